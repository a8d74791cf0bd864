"""A new operation's first check as its creating event records it (issue 26): placed by its contract's learnt model
(`core.learnt.first_check`), with what placed it, so `why` replays it and `story` tells it as every later learnt
wait is. Pure: the record as created, the model and the jitter draw in; the placed record and its event fields out.

The creating event (`created`, or `submitted` for a submission) gets two fields when a model was handed in:
`placed`, the placement in a decision's shape (`core.decide.Decision.to_json`: rule "first_check", action
"wait"), and `inputs`, what `replay` places it again from (the record before, the model, the draw). With no model
(learning off, fewer than `MIN_ENDED` ended jobs) the first check is the contract's `first_check` and the event is
as it always was; an older version's event, without them, reads as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .codec import record_from_json, record_to_json
from .durations import format_rfc3339
from .learnt import Learnt, first_check
from .reasons import DelaySource
from .record import OperationRecord

RULE = "first_check"
"""The rule a recorded first check names (`why`)."""
UNKEYED = "a watch's learn_key is read from its first answer, after this check"
"""Why a watch's first check is placed by its contract's whole history though the contract keeps samples by key
(docs/schedules.md, "Per kind of job"): a submission's body names its key before; a watch has no answer yet."""


@dataclass(frozen=True)
class FirstCheck:
    """A new operation with its first check placed, and what placed it."""

    before: OperationRecord
    """As created, its first check the contract's `first_check`."""
    record: OperationRecord
    learnt: Learnt | None
    u: float

    def placed(self) -> dict[str, Any]:
        """The placement in a decision's shape (what `why` compares with its replay)."""
        record = self.record
        detail = ""
        if record.delay_source is DelaySource.LEARNT and self.learnt is not None:
            delay = (record.next_poll_at - record.created_at).total_seconds()
            detail = self.learnt.words(delay, lead="first check")
            if self.learnt.key is None and record.plan.schedule.learn_key is not None:
                detail += f"; every key ({UNKEYED})"
        return {
            "action": "wait",
            "rule": RULE,
            "reason": None,
            "next_poll_at": format_rfc3339(record.next_poll_at),
            "delay_source": record.delay_source.value,
            "raw_delay": None,
            "jitter_u": self.u,
            "rejections": [],
            "detail": detail,
        }

    def event_fields(self) -> dict[str, Any]:
        """What the creating event carries of it: nothing when no model was handed in (the plain `first_check`)."""
        if self.learnt is None:
            return {}
        inputs = {
            "record": record_to_json(self.before),
            "now": self.before.created_at.isoformat(),
            "u": self.u,
            "learnt": self.learnt.to_json(),
        }
        return {"placed": self.placed(), "inputs": inputs}


def place_first(record: OperationRecord, learnt: Learnt | None, u: float) -> FirstCheck:
    """`record`'s first check, placed by `learnt` with the jitter draw `u` when it may use it."""
    return FirstCheck(record, first_check(record, learnt, u), learnt, u)


def recorded(data: Mapping[str, Any]) -> bool:
    """Whether a creating event's payload carries a first check's placement `replay` can read."""
    return isinstance(data.get("placed"), Mapping) and isinstance(data.get("inputs"), Mapping)


def replay(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The placement today's core makes from a creating event's `inputs`; a damaged one is a ValueError (or the
    codec's KeyError/TypeError, as a decision's)."""
    before = record_from_json(inputs["record"])
    return place_first(before, Learnt.from_json(inputs["learnt"]), float(inputs["u"])).placed()
