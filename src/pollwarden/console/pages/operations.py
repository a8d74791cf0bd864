"""The pieces of an operation the list shows (`listing.py`), and one operation's page: its timeline, its budgets, what
became of its decisions, its story and its record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ...core.contract.result import result_text
from ...core.reasons import Phase
from ...core.record import OperationRecord
from ...core.result_part import part_words
from ...report.followup import FollowUp
from ...report.ownership import Ownership
from ...store.base import Event, StoredDecision
from .decisions import decision_history
from .frame import Chrome, budget, clock, dash, esc, layout, phase_badge, relative
from .timeline import LEGEND, timeline_svg


@dataclass(frozen=True)
class Row:
    """One operation as the table shows it: its record, who owns it, and its open decision if any."""

    record: OperationRecord
    ownership: Ownership
    decision: str | None


def ended(record: OperationRecord, now: datetime) -> str:
    """What replaces a countdown once the operation is final: when it stopped or ended, not a deadline."""
    verb = "ended" if record.phase is Phase.SUCCEEDED else "stopped"
    if record.finished_at is None:
        return f'<span class="muted">{verb}</span>'
    ago = esc(relative(record.finished_at, now))
    return f'<span class="muted" title="{ago}">{verb} at</span> {clock(record.finished_at)}'


def flag_badges(owned: Ownership) -> str:
    return "".join(f'<span class="badge flag-{esc(flag)}">{esc(flag)}</span> ' for flag in owned.flags)


def follow_up_list(follow_ups: Sequence[FollowUp]) -> str:
    items = "".join(f'<li data-decision="{esc(f.decision_id)}">{esc(f.line())}</li>' for f in follow_ups)
    return f'<ul class="followups">{items}</ul>'


@dataclass(frozen=True)
class OperationView:
    """What one operation's page shows, as the view read it: the record and who owns it, its events (None when
    they cannot be read), its story or why not, its decisions and what became of them."""

    record: OperationRecord
    ownership: Ownership
    events: Sequence[Event] | None
    story: Sequence[str] | None
    story_problem: str | None
    decisions: Sequence[StoredDecision]
    follow_ups: Sequence[FollowUp]


def operation_page(view: OperationView, now: datetime, *, chrome: Chrome) -> str:
    record = view.record
    summary = record.summary()
    summary["result"] = result_text(record.result)  # any JSON value: compact JSON, never a Python repr
    summary["provider_error"] = record.provider_error  # its text: the value JSON carries would show as a repr
    if record.counts is not None or record.partial:  # what part of the job the result is, in words
        summary["counts"] = part_words(record)
    kv = "".join(f"<tr><th>{esc(key)}</th><td>{dash(value)}</td></tr>" for key, value in summary.items())
    if record.is_final:
        when = ended(record, now)
    else:
        when = f'<span class="muted">Deadline</span> {esc(relative(record.deadline_at, now))}'
    owner = ""
    if record.phase is Phase.ACTIVE:
        owned = view.ownership
        owner = f' &nbsp; <span class="muted">Owner</span> {esc(owned.describe(now))} {flag_badges(owned)}'
    bars = (
        '<p><span class="muted">Checks</span> '
        f"{budget(record.status_requests_used, record.plan.max_status_requests, 'checks')}"
        ' &nbsp; <span class="muted">Transport failures</span> '
        f"{budget(record.transport_failures_used, record.plan.max_transport_failures, 'transport failures')}"
        f" &nbsp; {when}{owner}</p>"
    )
    parts = [
        f'<h1>Operation <span class="mono wrap">{esc(record.operation_id)}</span> {phase_badge(record)}</h1>',
        bars,
    ]
    if view.follow_ups:
        parts.append("<h2>What became of the decisions</h2>" + follow_up_list(view.follow_ups))
    parts.append("<h2>Timeline</h2>")
    if view.events:
        parts.append(f'<div class="card tl">{timeline_svg(view.events, record, now)}{LEGEND}</div>')
    else:
        parts.append('<p class="muted">No timeline: the events cannot be read here.</p>')
    parts.append("<h2>Story</h2>")
    if view.story_problem is not None:
        parts.append(f'<div class="flash error">The story cannot be read: {esc(view.story_problem)}</div>')
    elif view.story:
        parts.append('<ol class="story">' + "".join(f"<li>{esc(line)}</li>" for line in view.story) + "</ol>")
    else:
        parts.append('<p class="muted">No events yet.</p>')
    parts.append("<h2>Decisions</h2>")
    if view.decisions:
        parts.append(decision_history(view.decisions, with_operation=False))
    else:
        parts.append('<p class="muted">No decision was asked for.</p>')
    parts.append(f'<h2>Record</h2><table class="kv">{kv}</table>')
    return layout(f"Operation {record.operation_id}", "".join(parts), here="operations", chrome=chrome)
