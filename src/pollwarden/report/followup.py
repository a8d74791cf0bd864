"""What became of a person's decision: what was asked, by whom, what the provider answered, and where the
operation is now. Built once here for the console's operation page and `pollwarden status OP`.

A decision's own row (`StoredDecision`) says who chose which option and when, and is readable without the audit
key; the provider's answer to a cancel or a resubmission is only in the operation's (encrypted) `action` event,
so without the key the follow-up says the answer cannot be read here rather than guessing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .. import events as ev
from ..core.durations import format_duration
from ..core.escalation import OptionKind
from ..core.reasons import Phase
from ..core.record import OperationRecord
from ..store.base import Event, Store, Stored, StoredDecision, StoreError

__all__ = ["FollowUp", "follow_up_lines", "follow_ups", "now_words"]

Lookup = Callable[[str], "OperationRecord | None"]


@dataclass(frozen=True)
class FollowUp:
    decision_id: str
    by: str
    at: datetime | None
    asked: str
    """`cancel requested`, `extension granted: +10m, +5 checks`, `refused`..."""
    answered: str | None
    """What the provider answered (`provider answered 202`), None when nothing was sent to it."""
    now: str
    """Where it stands now: `operation stays stopped (request budget exhausted)`, `active again`, ..."""

    def line(self) -> str:
        when = "" if self.at is None else f" at {self.at.strftime('%H:%M:%S')} UTC"
        parts = [f"{self.asked} by {self.by}{when}"]
        if self.answered:
            parts.append(self.answered)
        parts.append(self.now)
        return " — ".join(parts)


def now_words(record: OperationRecord) -> str:
    """The operation's state in a few words, for the end of a follow-up line."""
    state = f", job last seen {record.last_state}" if record.last_state else ""
    if record.phase is Phase.ACTIVE:
        return f"active again{state}"
    if record.phase is Phase.SUCCEEDED:
        return "succeeded since"
    reason = record.reason.value.replace("_", " ") if record.reason else "stopped"
    return f"operation stays stopped ({reason}){state}"


def _actions(events: Sequence[Event] | None) -> dict[str, ev.ActionEvent]:
    """The last `action` event per decision id; a resubmission's failure carries no decision id (the last one)."""
    found: dict[str, ev.ActionEvent] = {}
    for event in events or ():
        if event.kind != ev.ActionEvent.KIND:
            continue
        action = ev.ActionEvent.from_json(event.data)
        found[action.decision_id or f"?{action.action}"] = action
    return found


def _answer(action: ev.ActionEvent | None, readable: bool) -> str:
    if action is None:
        return "the provider's answer is not in the log" if readable else "the provider's answer needs the audit key"
    status = action.extra.get("http_status")
    if isinstance(status, int) and not isinstance(status, bool):
        verdict = "accepted" if action.ok else "refused"
        return f"provider answered {status} ({verdict})"
    if action.ok:
        return "provider answered ok"
    return f"it FAILED: {action.detail}" if action.detail else "it FAILED"


def follow_ups(
    record: OperationRecord,
    decisions: Sequence[StoredDecision],
    events: Sequence[Event] | None,
    lookup: Lookup,
) -> list[FollowUp]:
    """One follow-up per answered decision of this operation, oldest first. `events` None: no audit key here."""
    actions = _actions(events)
    out: list[FollowUp] = []
    answered = [d for d in decisions if d.status in ("decided", "refused") and d.decided_by]
    answered.sort(key=lambda d: d.decided_at.timestamp() if d.decided_at else 0.0)
    for d in answered:
        by = d.decided_by or "?"
        request = d.request
        if d.status == "refused" or d.option is None:
            out.append(FollowUp(request.decision_id, by, d.decided_at, "refused", None, now_words(record)))
            continue
        try:
            option = request.option(d.option)
        except ValueError:
            out.append(FollowUp(request.decision_id, by, d.decided_at, f"option [{d.option}]", None, now_words(record)))
            continue
        if option.kind in (OptionKind.EXTEND, OptionKind.PAUSE):
            more = []
            if option.extra_time is not None:
                more.append(f"+{format_duration(option.extra_time)}")
            if option.extra_checks is not None:
                more.append(f"+{option.extra_checks} checks")
            verb = "pause" if option.kind is OptionKind.PAUSE else "extension"
            asked = f"{verb} granted: {', '.join(more)}" if more else f"{verb} granted"
            out.append(FollowUp(request.decision_id, by, d.decided_at, asked, None, now_words(record)))
        elif option.kind is OptionKind.CANCEL:
            action = actions.get(request.decision_id)
            answer = _answer(action, events is not None)
            out.append(FollowUp(request.decision_id, by, d.decided_at, "cancel requested", answer, now_words(record)))
        elif option.kind is OptionKind.RESUBMIT:
            action = actions.get(request.decision_id) or actions.get("?resubmit")
            new_id = action.extra.get("new_operation") if action is not None else None
            now = now_words(record)
            if isinstance(new_id, str):
                new = lookup(new_id)
                now = f"new operation {new_id}: " + ("not found" if new is None else new.phase.value)
            out.append(
                FollowUp(
                    request.decision_id, by, d.decided_at, "resubmission", _answer(action, events is not None), now
                )
            )
        else:
            out.append(FollowUp(request.decision_id, by, d.decided_at, option.label, None, now_words(record)))
    return out


def follow_up_lines(store: Store, stored: Stored, home: Path) -> list[str]:
    """`status OP`'s follow-up lines. The decisions come from `store` (read without a key); the provider's
    answers from the audit events, read with the home's key when it is there (else the line says it is not)."""
    from ..audit import AuditError
    from ..home.operating import HomeError, open_store

    record = stored.record
    decisions = store.decisions(record.operation_id)
    if not any(d.status in ("decided", "refused") for d in decisions):
        return []
    events: list[Event] | None = None
    try:
        reader = open_store(home, keys="read")
        try:
            events = reader.events(record.operation_id)
        finally:
            reader.close()
    except (HomeError, StoreError, AuditError):
        events = None

    def lookup(operation_id: str) -> OperationRecord | None:
        found = store.get(operation_id)
        return None if found is None else found.record

    return [f.line() for f in follow_ups(record, decisions, events, lookup)]
