"""`why`: one recorded decision, its inputs, the rule that fired, and a replay through today's core.

Every decision event carries the core's inputs (the record before, the observation, `now` and the jitter
draw), so a disputed decision is re-run exactly instead of argued about.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..core.codec import observation_from_json, record_from_json
from ..core.decide import Decision, Halt, decide, halt, next_step
from ..core.durations import format_moment, format_rfc3339
from ..core.learnt import Learnt
from ..core.learnt_first import recorded as placement_recorded
from ..core.learnt_first import replay as replay_placement
from ..errors import PollwardenError
from ..store.base import Event

COMPARED = ("action", "rule", "reason", "next_poll_at", "delay_source", "raw_delay", "jitter_u", "rejections", "detail")


class WhyError(PollwardenError, ValueError):
    pass


@dataclass(frozen=True)
class Explanation:
    event: Event
    recorded: dict[str, Any]
    replayed: dict[str, Any] | None
    differences: tuple[str, ...]

    @property
    def same(self) -> bool:
        return self.replayed is not None and not self.differences

    def to_json(self) -> dict[str, Any]:
        data = dict(self.event.data)
        return {
            "seq": self.event.seq,
            "at": format_rfc3339(self.event.at),
            "rule": self.recorded.get("rule"),
            "decision": self.recorded,
            "inputs": data.get("inputs"),
            "replay": self.replayed,
            "same_today": self.same,
            "differences": list(self.differences),
        }


PLACED_BY = ("created", "submitted")
"""Events that may record a decision too: the first check the learnt history placed (`core.learnt_first`)."""


def pick(events: Sequence[Event], *, seq: int | None = None, at: datetime | None = None) -> Event:
    decisions = [e for e in events if e.kind == "decision" or (e.kind in PLACED_BY and placement_recorded(e.data))]
    if not decisions:
        raise WhyError("this operation has no recorded decision yet")
    if seq is not None:
        for event in decisions:
            if event.seq == seq:
                return event
        seqs = ", ".join(str(e.seq) for e in decisions)
        raise WhyError(f"record {seq} is not a decision; decisions are at seq {seqs}")
    if at is not None:
        before = [e for e in decisions if e.at <= at]
        if not before:
            raise WhyError(f"no decision was made at or before {format_moment(at)}")
        return before[-1]
    return decisions[-1]


def replay(event: Event) -> dict[str, Any] | None:
    """Today's core on the event's recorded inputs; damaged inputs (a log is read as hostile, though chained) are a
    WhyError naming the record, never a traceback."""
    try:
        return _replay(event)
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise WhyError(
            f"record {event.seq}'s recorded inputs cannot be read ({type(exc).__name__}); `pollwarden audit verify`"
            " says whether the log was changed"
        ) from None


def _replay(event: Event) -> dict[str, Any] | None:
    inputs = event.data.get("inputs")
    if not isinstance(inputs, dict):
        return None
    if event.kind in PLACED_BY:
        return replay_placement(inputs) if placement_recorded(event.data) else None
    record = record_from_json(inputs["record"])
    now = datetime.fromisoformat(inputs["now"])
    decision: Decision
    if "observation" in inputs:
        learnt = Learnt.from_json(inputs["learnt"]) if "learnt" in inputs else None
        decision = decide(record, observation_from_json(inputs["observation"]), now, float(inputs["u"]), learnt)
    else:
        step = next_step(record, now)
        if not isinstance(step, Halt):
            return {"action": "none", "rule": type(step).__name__.lower()}
        decision = halt(record, step.reason, now, step.detail, rule=step.reason.value)
    return decision.to_json()


def explain(event: Event) -> Explanation:
    placed = event.data.get("placed") if event.kind in PLACED_BY else None
    shown = placed if isinstance(placed, dict) else event.data  # a first check's placement, in a decision's shape
    recorded = {key: shown.get(key) for key in COMPARED}
    replayed = replay(event)
    differences: tuple[str, ...] = ()
    if replayed is not None:
        differences = tuple(
            f"{key}: recorded {recorded[key]!r}, today {replayed.get(key)!r}"
            for key in COMPARED
            if recorded[key] != replayed.get(key)
        )
    return Explanation(event, recorded, replayed, differences)
