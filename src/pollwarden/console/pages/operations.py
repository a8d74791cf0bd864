"""The operations table with the fleet at a glance, and one operation's page: its timeline, its budgets, what
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
from ...store.base import INSPECT_UNREADABLE, Event, StoredDecision, UnreadableRow
from .decisions import decision_history
from .frame import Chrome, budget, clock, dash, esc, layout, moment_span, operation_href, phase_badge, relative
from .timeline import LEGEND, timeline_svg

FILTERS = {"all": "all", "overdue": "overdue", "orphaned": "orphaned", "awaiting": "awaiting a decision"}
"""`/?show=KEY` and the link's words."""


@dataclass(frozen=True)
class Row:
    """One operation as the table shows it: its record, who owns it, and its open decision if any."""

    record: OperationRecord
    ownership: Ownership
    decision: str | None

    def shown_by(self, wanted: str) -> bool:
        if wanted == "overdue":
            return self.ownership.overdue
        if wanted == "orphaned":
            return self.ownership.orphaned
        if wanted == "awaiting":
            return self.decision is not None
        return True


def ended(record: OperationRecord, now: datetime) -> str:
    """What replaces a countdown once the operation is final: when it stopped or ended, not a deadline."""
    verb = "ended" if record.phase is Phase.SUCCEEDED else "stopped"
    if record.finished_at is None:
        return f'<span class="muted">{verb}</span>'
    ago = esc(relative(record.finished_at, now))
    return f'<span class="muted" title="{ago}">{verb} at</span> {clock(record.finished_at)}'


def trunc(text: str, *, cls: str = "mono") -> str:
    """A long id cut with an ellipsis by CSS; the whole of it in the title (hover) and in the copy."""
    return f'<span class="{cls} trunc" title="{esc(text)}">{esc(text)}</span>'


def flag_badges(owned: Ownership) -> str:
    return "".join(f'<span class="badge flag-{esc(flag)}">{esc(flag)}</span> ' for flag in owned.flags)


def _operation_row(row: Row, now: datetime) -> str:
    r = row.record
    active = r.phase is Phase.ACTIVE
    deadline = moment_span(r.deadline_at, now) if active else ended(r, now)
    next_poll = moment_span(r.next_poll_at, now) if active else dash(None)
    owner = esc(row.ownership.describe(now)) if active else dash(None)
    decide = f'<a href="/decisions#decision-{esc(row.decision)}">decide</a>' if row.decision else ""
    reason = f'<div class="detail reason">{esc(r.reason.value)}</div>' if r.reason else ""
    href = esc(operation_href(r.operation_id))
    return (
        f'<tr data-operation="{esc(r.operation_id)}" data-flags="{esc(" ".join(row.ownership.flags))}">'
        f'<td><a class="mono trunc" href="{href}" title="{esc(r.operation_id)}">{esc(r.operation_id)}</a>'
        f'<div class="detail">{trunc(r.job_id)}</div></td>'
        f"<td>{phase_badge(r)} {flag_badges(row.ownership)}{reason}</td>"
        f"<td>{trunc(r.last_state, cls='state') if r.last_state else dash(None)}</td>"
        f'<td class="num">{budget(r.status_requests_used, r.plan.max_status_requests, "checks")}'
        f'<div class="detail muted">transport {r.transport_failures_used}/{r.plan.max_transport_failures}</div></td>'
        f'<td class="when">{deadline}</td>'
        f'<td class="when">{next_poll}</td>'
        f'<td class="owner">{owner}</td>'
        f'<td class="act">{decide}</td>'
        "</tr>"
    )


def fleet(rows: Sequence[Row], now: datetime) -> str:
    """Per contract: active, due, overdue, stopped awaiting a decision; every count from the same rows."""
    counts: dict[str, list[int]] = {}
    for row in rows:
        r = row.record
        c = counts.setdefault(r.contract_name, [0, 0, 0, 0])
        active = r.phase is Phase.ACTIVE
        c[0] += active
        c[1] += active and r.next_poll_at <= now
        c[2] += row.ownership.overdue
        c[3] += r.phase is Phase.STOPPED and row.decision is not None
    lines = "".join(
        f'<tr data-contract="{esc(name)}"><td>{trunc(name)}</td>'
        + "".join(f'<td class="num" data-count="{key}">{n}</td>' for key, n in zip(_FLEET_KEYS, c, strict=True))
        + "</tr>"
        for name, c in sorted(counts.items())
    )
    return (
        '<table class="fleet" aria-label="fleet at a glance"><thead><tr><th>Contract</th><th>Active</th><th>Due</th>'
        f"<th>Overdue</th><th>Stopped, awaiting a decision</th></tr></thead><tbody>{lines}</tbody></table>"
    )


_FLEET_KEYS = ("active", "due", "overdue", "awaiting")


def _filters(wanted: str, rows: Sequence[Row]) -> str:
    links = []
    for key, label in FILTERS.items():
        n = sum(1 for row in rows if row.shown_by(key))
        text = f"{esc(label)} ({n})"
        if key == wanted:
            links.append(f'<strong aria-current="page">{text}</strong>')
        else:
            links.append(f'<a href="/?show={key}">{text}</a>')
    return '<nav class="filters" aria-label="filter the operations">Show: ' + " · ".join(links) + "</nav>"


def operations_page(
    rows: Sequence[Row], wanted: str, now: datetime, *, chrome: Chrome, unreadable: Sequence[UnreadableRow] = ()
) -> str:
    body = _operations_body(rows, wanted, now) + _unreadable_rows(unreadable)
    return layout("Operations", body, here="operations", chrome=chrome)


def _unreadable_rows(rows: Sequence[UnreadableRow]) -> str:
    """Rows skipped because their record cannot be read: listed apart, with why and how to look at them."""
    if not rows:
        return ""
    items = "".join(f"<li><code>{esc(row.operation_id)}</code>: {esc(row.why)}</li>" for row in rows)
    return (
        f'<h2>Unreadable</h2><p class="muted">{len(rows)} operation{"s" if len(rows) != 1 else ""} could not be'
        f' read, and no worker polls them.</p><ul class="unreadable">{items}</ul>'
        f'<p class="muted">{esc(INSPECT_UNREADABLE)}</p>'
    )


def _operations_body(rows: Sequence[Row], wanted: str, now: datetime) -> str:
    if not rows:
        body = (
            '<h1>Operations</h1><p class="muted">No operations yet: start one with <code>pollwarden watch</code>.</p>'
        )
    else:
        shown_rows = [row for row in rows if row.shown_by(wanted)]
        lines = "".join(_operation_row(row, now) for row in shown_rows)
        table = (
            '<table class="operations"><thead><tr><th>Operation / job</th><th>Phase</th><th>Last state</th>'
            "<th>Checks</th><th>Deadline</th><th>Next check</th><th>Owner</th><th></th>"
            f"</tr></thead><tbody>{lines}</tbody></table>"
            if shown_rows
            else f'<p class="muted">No operation is {esc(FILTERS[wanted])} right now.</p>'
        )
        body = (
            "<h1>Operations</h1>"
            f"<h2>Fleet at a glance</h2>{fleet(rows, now)}"
            f'<p class="muted">{len(rows)} operations, as of {clock(now)}. Reload the page for fresh state.</p>'
            f"{_filters(wanted, rows)}{table}"
        )
    return body


def follow_up_list(follow_ups: Sequence[FollowUp]) -> str:
    items = "".join(f'<li data-decision="{esc(f.decision_id)}">{esc(f.line())}</li>' for f in follow_ups)
    return f'<ul class="followups">{items}</ul>'


def operation_page(
    stored_record: OperationRecord,
    ownership: Ownership,
    events: Sequence[Event] | None,
    story: Sequence[str] | None,
    story_problem: str | None,
    decisions: Sequence[StoredDecision],
    follow_ups: Sequence[FollowUp],
    now: datetime,
    *,
    chrome: Chrome,
) -> str:
    record = stored_record
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
        owner = f' &nbsp; <span class="muted">Owner</span> {esc(ownership.describe(now))} {flag_badges(ownership)}'
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
    if follow_ups:
        parts.append("<h2>What became of the decisions</h2>" + follow_up_list(follow_ups))
    parts.append("<h2>Timeline</h2>")
    if events:
        parts.append(f'<div class="card tl">{timeline_svg(events, record, now)}{LEGEND}</div>')
    else:
        parts.append('<p class="muted">No timeline: the events cannot be read here.</p>')
    parts.append("<h2>Story</h2>")
    if story_problem is not None:
        parts.append(f'<div class="flash error">The story cannot be read: {esc(story_problem)}</div>')
    elif story:
        parts.append('<ol class="story">' + "".join(f"<li>{esc(line)}</li>" for line in story) + "</ol>")
    else:
        parts.append('<p class="muted">No events yet.</p>')
    parts.append("<h2>Decisions</h2>")
    if decisions:
        parts.append(decision_history(decisions, with_operation=False))
    else:
        parts.append('<p class="muted">No decision was asked for.</p>')
    parts.append(f'<h2>Record</h2><table class="kv">{kv}</table>')
    return layout(f"Operation {record.operation_id}", "".join(parts), here="operations", chrome=chrome)
