"""The audit trail told as a story (R45): one line per decision, in the words an operator uses.

Each event tells its own line (`AuditEvent.line`, in `pollwarden.events`), given the typed event (`events.parse`),
so a record written by an older version, with a field missing, still tells its line: a missing value reads "?",
never "None". This module walks a log and gives each event where it sits (`Scene`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import events as ev
from ..core.durations import format_rfc3339
from ..events.words import SOURCE_WORDS, Scene, clock, reason_words
from ..store.base import AGENT_LOG_PREFIX, CONTRACT_LOG_PREFIX, Event

__all__ = ["SOURCE_WORDS", "render_event", "scene_of", "story_json", "story_lines"]


def scene_of(event: Event, observed: ev.Observed | None = None) -> Scene:
    """Where a stored event sits; an agent session's or an installed contract's log is no operation."""
    log_id = event.operation_id
    operation = None if log_id.startswith((AGENT_LOG_PREFIX, CONTRACT_LOG_PREFIX)) else log_id
    return Scene(clock(event.at), operation, observed)


def render_event(event: Event, observed: ev.Observed | None = None) -> str | None:
    """One line for a stored event; a kind this version does not know is named, not hidden."""
    scene = scene_of(event, observed)
    typed = ev.parse(event.kind, event.data)
    if typed is None:
        return f"{scene.at} {reason_words(event.kind)} (recorded by another version; see `story --json`)"
    return typed.line(scene)


def story_lines(events: Sequence[Event]) -> list[str]:
    lines: list[str] = []
    observed: ev.Observed | None = None
    for event in events:
        if event.kind == ev.Observed.KIND:
            observed = ev.Observed.from_json(event.data)
            continue
        line = render_event(event, observed)
        if event.kind == ev.DecisionEvent.KIND:
            observed = None
        if line is not None:
            lines.append(line)
    return lines


def story_json(events: Sequence[Event]) -> list[dict[str, Any]]:
    return [{"seq": e.seq, "at": format_rfc3339(e.at), "kind": e.kind, "data": dict(e.data)} for e in events]
