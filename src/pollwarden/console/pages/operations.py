"""The operations table and one operation's page: its budgets, its story, its decisions, its record."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ...core.contract_result import result_text
from ...core.reasons import Phase
from ...core.record import OperationRecord
from ...store.base import StoredDecision
from .decisions import decision_history
from .frame import Chrome, budget, clock, dash, esc, layout, moment_span, operation_href, phase_badge, relative


def _operation_row(r: OperationRecord, decision: str | None, now: datetime) -> str:
    deadline = dash(None) if r.phase is Phase.SUCCEEDED else moment_span(r.deadline_at, now)
    next_poll = dash(None) if r.is_final else moment_span(r.next_poll_at, now)
    decide = f'<a href="/decisions#decision-{esc(decision)}">decide</a>' if decision else ""
    return (
        "<tr>"
        f'<td><a class="mono" href="{esc(operation_href(r.operation_id))}">{esc(r.operation_id)}</a></td>'
        f'<td class="mono">{esc(r.job_id)}</td>'
        f"<td>{phase_badge(r)}</td>"
        f"<td>{dash(r.reason.value if r.reason else None)}</td>"
        f"<td>{dash(r.last_state)}</td>"
        f'<td class="num">{budget(r.status_requests_used, r.plan.max_status_requests, "status requests")}</td>'
        f'<td class="num">'
        f"{budget(r.transport_failures_used, r.plan.max_transport_failures, 'transport failures')}</td>"
        f'<td class="num">{deadline}</td>'
        f'<td class="num">{next_poll}</td>'
        f"<td>{decide}</td>"
        "</tr>"
    )


def operations_page(
    records: Sequence[OperationRecord],
    open_by_operation: dict[str, str],
    now: datetime,
    *,
    chrome: Chrome,
) -> str:
    if not records:
        body = (
            '<h1>Operations</h1><p class="muted">No operations yet: start one with <code>pollwarden watch</code>.</p>'
        )
    else:
        rows = "".join(_operation_row(r, open_by_operation.get(r.operation_id), now) for r in records)
        body = (
            "<h1>Operations</h1>"
            f'<p class="muted">{len(records)} operations, as of {clock(now)}. Reload the page for fresh state.</p>'
            "<table><thead><tr><th>Operation</th><th>Job</th><th>Phase</th><th>Reason</th><th>Last state</th>"
            "<th>Status requests</th><th>Transport failures</th><th>Deadline</th><th>Next poll</th><th></th>"
            f"</tr></thead><tbody>{rows}</tbody></table>"
        )
    return layout(
        "Operations",
        body,
        here="operations",
        chrome=chrome,
    )


def operation_page(
    record: OperationRecord,
    story: Sequence[str] | None,
    story_problem: str | None,
    decisions: Sequence[StoredDecision],
    now: datetime,
    *,
    chrome: Chrome,
) -> str:
    summary = record.summary()
    summary["result"] = result_text(record.result)  # any JSON value: compact JSON, never a Python repr
    kv = "".join(f"<tr><th>{esc(key)}</th><td>{dash(value)}</td></tr>" for key, value in summary.items())
    bars = (
        '<p><span class="muted">Status requests</span> '
        f"{budget(record.status_requests_used, record.plan.max_status_requests, 'status requests')}"
        ' &nbsp; <span class="muted">Transport failures</span> '
        f"{budget(record.transport_failures_used, record.plan.max_transport_failures, 'transport failures')}"
        f' &nbsp; <span class="muted">Deadline</span> {esc(relative(record.deadline_at, now))}</p>'
    )
    parts = [
        f'<h1>Operation <span class="mono">{esc(record.operation_id)}</span> {phase_badge(record)}</h1>',
        bars,
        "<h2>Story</h2>",
    ]
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
    return layout(
        f"Operation {record.operation_id}",
        "".join(parts),
        here="operations",
        chrome=chrome,
    )
