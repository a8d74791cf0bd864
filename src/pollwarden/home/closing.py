"""Closing in bulk the decisions about jobs that ended at the provider: `pollwarden decisions close` and the
console's form, one rule for both.

A job the provider failed, cancelled or expired still opens a decision, so nothing ends unseen; its only safe
answer that changes nothing at the provider is to close it. A person closes many at once: each is closed by
`operating.decide`, one audited `decided` event each naming the person, exactly as one `decide` would; one that
cannot be closed (decided meanwhile, its contract not installed) is reported and the others go on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ..core.escalation import DecisionError, OptionKind
from ..core.reasons import StopReason
from ..store.base import Store, StoredDecision
from .operating import HomeError, decide

BULK_REASONS = tuple(r.value for r in StopReason if r.job_ended)
"""The reasons whose open decisions a person may close in bulk: the provider itself ended the job."""

_PAGE = 500


def reason_problem(reason: str | None) -> str | None:
    """Why `reason` cannot be closed in bulk; None if it can (None: every reason that can)."""
    if reason is None or reason in BULK_REASONS:
        return None
    return f"only decisions about jobs that ended at the provider close in bulk: {', '.join(BULK_REASONS)}"


def close_option(stored: StoredDecision) -> int | None:
    """The number of the decision's close option when it closes in bulk (open, about a job that ended)."""
    request = stored.request
    if stored.status != "open" or request.reason is None or not request.reason.job_ended:
        return None
    return next((o.number for o in request.options if o.kind is OptionKind.CLOSE), None)


def closable(store: Store, reason: str | None = None) -> list[StoredDecision]:
    """The open decisions a bulk close would close, oldest first (every ended-job reason when `reason` is None)."""
    found: list[StoredDecision] = []
    for one in [reason] if reason is not None else list(BULK_REASONS):
        offset = 0
        while page := store.open_decisions(one, offset=offset, limit=_PAGE):
            found += [d for d in page if close_option(d) is not None]
            offset += len(page)
    found.sort(key=lambda d: (d.request.created_at, d.request.decision_id))
    return found


@dataclass(frozen=True)
class Closed:
    decision_id: str
    operation_id: str
    reason: str
    closed: bool
    message: str

    def to_json(self) -> dict[str, object]:
        return {
            "decision_id": self.decision_id,
            "operation": self.operation_id,
            "reason": self.reason,
            "closed": self.closed,
            "message": self.message,
        }


def close_ended(
    store: Store, decisions: Sequence[StoredDecision], *, by: str, note: str | None, now: datetime | None = None
) -> list[Closed]:
    """Close each of `decisions` (from `closable`) by its close option, as `by`: one `decide` each."""
    done: list[Closed] = []
    for stored in decisions:
        request = stored.request
        option = close_option(stored)
        if option is None:
            continue
        try:
            outcome = decide(store, request.decision_id, option=option, refuse=False, by=by, note=note, now=now)
        except (HomeError, DecisionError) as exc:
            done.append(Closed(request.decision_id, request.operation_id, request.why, False, str(exc)))
            continue
        done.append(Closed(request.decision_id, request.operation_id, request.why, True, outcome.message))
    return done
