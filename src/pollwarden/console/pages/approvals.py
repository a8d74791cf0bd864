"""Approvals: agents' requests for a session or a call, answered with Approve, Refuse or Revoke."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from ...home.operating import describe_grant
from ...store.base import Grant
from .frame import (
    Chrome,
    answer_href,
    by_attributes,
    dash,
    esc,
    layout,
    operation_href,
    relative,
    status_badge,
    timestamp,
)

_ANSWER_EFFECT = {
    "approve": "lets the agent's provider call(s) go ahead",
    "refuse": "refuses: nothing is sent",
    "revoke": "takes the approval back: the session's later calls need a new one",
}


def grant_target(grant: Grant) -> str:
    """What the request is about: a session's contract, or a call's operation (linked) and contract."""
    if grant.kind == "session":
        return f'contract <span class="mono">{esc(grant.scope)}</span>'
    contract = grant.detail.get("contract")
    link = f'<a class="mono" href="{esc(operation_href(grant.scope))}">{esc(grant.scope)}</a>'
    return f"operation {link}" + (f'<br>contract <span class="mono">{esc(contract)}</span>' if contract else "")


def _detail_pairs(grant: Grant) -> str:
    pairs = [f"{esc(key)}={esc(value)}" for key, value in sorted(grant.detail.items()) if value not in (None, "")]
    return f'<div class="detail muted mono">{" · ".join(pairs)}</div>' if pairs else ""


def answer_form(grant: Grant, answers: Sequence[str], *, csrf: str, by_attrs: str) -> str:
    buttons = "".join(
        f'<button class="option{" refuse" if answer != "approve" else ""}" type="submit" name="answer"'
        f' value="{esc(answer)}" title="{esc(_ANSWER_EFFECT[answer])}">{esc(answer.capitalize())}</button>'
        for answer in answers
    )
    return (
        f'<form class="answer" method="post" action="{esc(answer_href(grant.grant_id))}">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        f'<input name="by" required maxlength="100" {by_attrs}'
        ' placeholder="decided by (your name)" aria-label="Decided by (recorded in the audit log)">'
        '<input name="note" maxlength="500" placeholder="note (optional)" aria-label="Note (optional)">'
        f"{buttons}</form>"
    )


def grant_rows(
    grants: Iterable[Grant], now: datetime, *, answers: Sequence[str], csrf: str, by_attrs: str, decided: bool = False
) -> str:
    head = "<th>Request</th><th>Kind</th><th>Session</th><th>Contract / operation</th><th>Requested</th><th>Detail</th>"
    head += "<th>Status</th><th>By</th><th>At</th>" if decided else ""
    head += "<th>Answer</th>" if answers else ""
    rows = []
    for g in grants:
        requested = f'{timestamp(g.requested_at)}<br><span class="muted">{esc(relative(g.requested_at, now))}</span>'
        cells = (
            f'<td class="mono" id="grant-{esc(g.grant_id)}">{esc(g.grant_id)}</td>'
            f'<td><span class="badge">{esc(g.kind)}</span></td>'
            f'<td class="mono">{esc(g.subject)}</td>'
            f"<td>{grant_target(g)}</td>"
            f'<td class="num">{requested}</td>'
            f"<td>{esc(describe_grant(g))}{_detail_pairs(g)}</td>"
        )
        if decided:
            at = dash(None) if g.decided_at is None else timestamp(g.decided_at)
            cells += f'<td>{status_badge(g.status)}</td><td>{dash(g.decided_by)}</td><td class="num">{at}</td>'
        if answers:
            cells += f"<td>{answer_form(g, answers, csrf=csrf, by_attrs=by_attrs)}</td>"
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def approvals_page(
    pending: Sequence[Grant],
    approved_sessions: Sequence[Grant],
    recent: Sequence[Grant],
    now: datetime,
    *,
    by: str,
    chrome: Chrome,
) -> str:
    csrf = chrome.csrf
    by_attrs = by_attributes(by, chrome)
    parts = [
        "<h1>Approvals</h1>",
        '<p class="muted">Agents whose contracts need a person ask here before a provider call: for a whole'
        " session, or for one call. Each answer is recorded with your name in the agent session's audit log, the"
        " same as <code>pollwarden approve-session</code>, <code>approve-call</code> and"
        " <code>revoke-session</code>. A request can be answered once.</p>",
    ]
    if pending:
        parts.append(f"<h2>Waiting for a person ({len(pending)})</h2>")
        parts.append(grant_rows(pending, now, answers=("approve", "refuse"), csrf=csrf, by_attrs=by_attrs))
    else:
        parts.append('<p class="muted">No pending approvals: no agent is waiting for a person.</p>')
    if approved_sessions:
        parts.append("<h2>Approved sessions</h2>")
        parts.append(
            '<p class="muted">Routine calls inside an approved session need no further answer; revoking makes the'
            " session's later calls ask again.</p>"
        )
        parts.append(
            grant_rows(approved_sessions, now, answers=("revoke",), csrf=csrf, by_attrs=by_attrs, decided=True)
        )
    if recent:
        parts.append("<h2>Recently answered</h2>")
        parts.append(grant_rows(recent, now, answers=(), csrf=csrf, by_attrs=by_attrs, decided=True))
    return layout(
        "Approvals",
        "".join(parts),
        here="approvals",
        chrome=replace(chrome, pending_approvals=len(pending)),
    )
