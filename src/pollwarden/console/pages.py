"""The console's pages: plain functions from data to HTML, every value escaped where it is written.

Nothing here reads the store or the request; `server.py` gathers the data and passes it in. There is no
script: every form works as an HTML form, and the Content-Security-Policy the server sends forbids scripts.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import quote, urlsplit

from ..core.durations import format_duration, format_rfc3339
from ..core.escalation import OptionKind
from ..core.reasons import Phase
from ..core.record import OperationRecord
from ..operating import AuditCheck, describe_grant
from ..shown import shown
from ..store.base import Grant, StoredDecision


def esc(value: object) -> str:
    """Every value that reaches a page goes through here (quotes too: values also land in attributes).

    HTML escaping alone leaves bidi overrides and controls, which reorder or hide what an operator reads."""
    return html.escape(shown(value), quote=True)


def operation_href(operation_id: str) -> str:
    return "/operations/" + quote(operation_id, safe="")


def decide_href(decision_id: str) -> str:
    return "/decisions/" + quote(decision_id, safe="") + "/decide"


def answer_href(grant_id: str) -> str:
    return "/approvals/" + quote(grant_id, safe="") + "/answer"


@dataclass(frozen=True)
class Flash:
    kind: str  # ok | error
    text: str


STYLE = """
:root { --fg:#1d232b; --muted:#5d6875; --line:#d8dde3; --bg:#f6f7f9; --card:#fff; --accent:#1f5fbf;
        --ok:#1d7a3a; --warn:#a35b00; --bad:#b3261e; }
* { box-sizing: border-box; }
body { margin:0; font:15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Liberation Sans", sans-serif;
       color:var(--fg); background:var(--bg); }
header { background:#18202b; color:#fff; padding:.6rem 1.25rem; display:flex; gap:1.5rem; align-items:center; }
header .brand { font-weight:700; letter-spacing:.02em; }
header nav { display:flex; gap:1rem; flex:1; }
header a { color:#cfe0ff; text-decoration:none; }
header a.here { color:#fff; border-bottom:2px solid #fff; }
header form { margin:0; }
header button { background:none; border:1px solid #6b7a8c; color:#cfe0ff; border-radius:4px; padding:.15rem .6rem;
                cursor:pointer; font:inherit; font-size:.85rem; }
main { padding:1rem 1.25rem 3rem; max-width:1280px; }
h1 { font-size:1.35rem; margin:.4rem 0 1rem; }
h2 { font-size:1.1rem; margin:1.5rem 0 .6rem; }
table { border-collapse:collapse; width:100%; background:var(--card); border:1px solid var(--line); }
th, td { text-align:left; padding:.4rem .6rem; border-bottom:1px solid var(--line); vertical-align:top; }
th { background:#eef1f5; font-weight:600; font-size:.85rem; color:var(--muted); white-space:nowrap; }
td.num { white-space:nowrap; font-variant-numeric:tabular-nums; }
td > a.mono { white-space:nowrap; }
code, .mono { font-family:ui-monospace, "DejaVu Sans Mono", "Liberation Mono", monospace; font-size:.9em; }
.muted { color:var(--muted); }
.badge { display:inline-block; padding:.05rem .5rem; border-radius:999px; font-size:.8rem; font-weight:600;
         border:1px solid currentColor; white-space:nowrap; }
.phase-active { color:var(--accent); } .phase-succeeded { color:var(--ok); } .phase-stopped { color:var(--warn); }
.status-open { color:var(--warn); } .status-decided { color:var(--ok); } .status-refused { color:var(--bad); }
.status-expired { color:var(--muted); }
.status-pending { color:var(--warn); } .status-approved { color:var(--ok); } .status-revoked { color:var(--muted); }
form.answer { display:flex; flex-wrap:wrap; gap:.4rem; align-items:center; margin:0; }
form.answer input { font:inherit; font-size:.9rem; padding:.25rem .4rem; border:1px solid #aab4bf; border-radius:4px;
                    width:9rem; }
form.answer button.option { padding:.25rem .7rem; }
.detail { font-size:.8rem; margin-top:.2rem; }
progress { width:7rem; height:.8rem; vertical-align:middle; margin-right:.35rem; }
.flash { padding:.6rem .9rem; border-radius:6px; margin:0 0 1rem; border:1px solid; }
.flash.ok { background:#e8f5ec; border-color:#9fd3ae; color:#124d25; }
.flash.error { background:#fdecea; border-color:#f1a9a2; color:#7a1a13; }
.card { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:1rem 1.2rem;
        margin:0 0 1.2rem; }
.card h2 { margin-top:0; }
ul.r31 { list-style:none; padding:0; margin:0 0 .8rem; columns:2 22rem; column-gap:2rem; }
ul.r31 li { padding:.12rem 0; break-inside:avoid; }
ul.r31 .k { color:var(--muted); display:inline-block; min-width:9.5rem; } ul.r31 .v { font-weight:500; }
.fields { display:flex; flex-wrap:wrap; gap:.8rem 1.5rem; margin:.4rem 0 1rem; }
.fields label { display:flex; flex-direction:column; font-size:.85rem; color:var(--muted); gap:.2rem; }
.fields input { font:inherit; padding:.35rem .5rem; border:1px solid #aab4bf; border-radius:4px; min-width:16rem; }
ul.options { list-style:none; padding:0; margin:0; display:flex; flex-direction:column; gap:.55rem; }
ul.options li { display:flex; gap:.8rem; align-items:baseline; flex-wrap:wrap; }
ul.options .effect { color:var(--muted); font-size:.9rem; flex:1; min-width:18rem; }
button.option, a.option { font:inherit; font-weight:600; padding:.4rem .9rem; border-radius:5px; cursor:pointer;
                          border:1px solid var(--accent); background:var(--accent); color:#fff; text-decoration:none;
                          display:inline-block; }
a.option { background:#fff; color:var(--accent); }
button.kind-close, button.kind-cancel, button.kind-resubmit { background:#fff; color:var(--accent); }
h3 { font-size:.95rem; margin:.2rem 0 .6rem; }
button.refuse { border-color:var(--bad); background:#fff; color:var(--bad); }
ol.story { background:var(--card); border:1px solid var(--line); border-radius:6px; padding:.6rem 1rem .6rem 3rem;
           margin:0; }
ol.story li { font-family:ui-monospace, "DejaVu Sans Mono", "Liberation Mono", monospace; font-size:.85rem;
              padding:.1rem 0; white-space:pre-wrap; word-break:break-word; }
table.kv th { width:14rem; }
.verdict { font-size:1.3rem; font-weight:700; }
.verdict.ok { color:var(--ok); } .verdict.bad { color:var(--bad); }
.login { max-width:26rem; margin:4rem auto; }
.login input { width:100%; font:inherit; padding:.45rem .6rem; margin:.4rem 0 .8rem; border:1px solid #aab4bf;
               border-radius:4px; }
"""

NAV = (
    ("/", "Operations", "operations"),
    ("/decisions", "Decisions", "decisions"),
    ("/approvals", "Approvals", "approvals"),
    ("/audit", "Audit", "audit"),
)


def layout(
    title: str,
    body: str,
    *,
    here: str,
    csrf: str | None,
    flashes: Sequence[Flash] = (),
    open_decisions: int | None = None,
    pending_approvals: int | None = None,
) -> str:
    """The page frame; `csrf` None means a logged-out page (no navigation, no logout form)."""
    head = (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · pollwarden</title><style>{STYLE}</style></head><body>"
    )
    bar = '<header><span class="brand">pollwarden console</span>'
    if csrf is not None:
        links = []
        for href, label, key in NAV:
            text = esc(label)
            if key == "decisions" and open_decisions:
                text += f" ({open_decisions} open)"
            if key == "approvals" and pending_approvals:
                text += f" ({pending_approvals} pending)"
            cls = ' class="here"' if key == here else ""
            links.append(f'<a href="{href}"{cls}>{text}</a>')
        bar += "<nav>" + "".join(links) + "</nav>"
        bar += (
            '<form method="post" action="/logout">'
            f'<input type="hidden" name="csrf" value="{esc(csrf)}"><button type="submit">log out</button></form>'
        )
    bar += "</header>"
    notes = "".join(f'<div class="flash {esc(f.kind)}" role="status">{esc(f.text)}</div>' for f in flashes)
    return f"{head}{bar}<main>{notes}{body}</main></body></html>"


def login_page(message: str | None = None) -> str:
    note = f'<div class="flash error" role="alert">{esc(message)}</div>' if message else ""
    body = (
        '<div class="card login"><h1>Log in</h1>'
        f"{note}"
        '<p class="muted">Use the token the <code>pollwarden console</code> command printed when it started.</p>'
        '<form method="post" action="/login">'
        '<label for="token">Token</label>'
        '<input id="token" name="token" type="password" autocomplete="off" required autofocus>'
        '<button class="option" type="submit">Log in</button></form></div>'
    )
    return layout("Log in", body, here="login", csrf=None)


def message_page(title: str, text: str, *, csrf: str | None) -> str:
    body = f'<h1>{esc(title)}</h1><p>{esc(text)}</p><p><a href="/">Back to the operations</a></p>'
    return layout(title, body, here="", csrf=csrf)


# -- small pieces -----------------------------------------------------------------------------------


def clock(moment: datetime | None) -> str:
    if moment is None:
        return '<span class="muted">—</span>'
    return f'<time datetime="{esc(format_rfc3339(moment))}">{esc(moment.strftime("%H:%M:%S"))} UTC</time>'


def timestamp(at: datetime) -> str:
    """Date and time to the second; the exact instant is in the `datetime` attribute."""
    return f'<time datetime="{esc(format_rfc3339(at))}">{esc(at.strftime("%Y-%m-%d %H:%M:%S"))} UTC</time>'


def relative(moment: datetime, now: datetime) -> str:
    """`in 4m10s` or `2m ago`, to the second: the console is read by a person, not parsed."""
    delta = timedelta(seconds=round((moment - now).total_seconds()))
    if delta == timedelta(0):
        return "now"
    return f"in {format_duration(delta)}" if delta > timedelta(0) else f"{format_duration(-delta)} ago"


def phase_badge(record: OperationRecord) -> str:
    return f'<span class="badge phase-{esc(record.phase.value)}">{esc(record.phase.value)}</span>'


def status_badge(status: str) -> str:
    return f'<span class="badge status-{esc(status)}">{esc(status)}</span>'


def budget(used: int, maximum: int, what: str) -> str:
    """A bar and its numbers; the numbers are the fact, the bar only helps the eye."""
    value = min(used, maximum)
    return (
        f'<progress value="{value}" max="{max(maximum, 1)}" aria-label="{esc(what)}"></progress>'
        f'<span class="mono">{used}/{maximum}</span>'
    )


def _dash(value: object) -> str:
    return '<span class="muted">—</span>' if value is None or value == "" else esc(value)


# -- operations -------------------------------------------------------------------------------------


def operations_page(
    records: Sequence[OperationRecord],
    open_by_operation: dict[str, str],
    now: datetime,
    *,
    csrf: str,
    flashes: Sequence[Flash],
    open_decisions: int,
    pending_approvals: int | None = None,
) -> str:
    if not records:
        body = (
            '<h1>Operations</h1><p class="muted">No operations yet: start one with <code>pollwarden watch</code>.</p>'
        )
        return layout(
            "Operations",
            body,
            here="operations",
            csrf=csrf,
            flashes=flashes,
            open_decisions=open_decisions,
            pending_approvals=pending_approvals,
        )
    rows = []
    for r in records:
        deadline = (
            '<span class="muted">—</span>'
            if r.phase is Phase.SUCCEEDED
            else f'<span title="{esc(format_rfc3339(r.deadline_at))}">{esc(relative(r.deadline_at, now))}</span>'
        )
        next_poll = (
            '<span class="muted">—</span>'
            if r.is_final
            else f'<span title="{esc(format_rfc3339(r.next_poll_at))}">{esc(relative(r.next_poll_at, now))}</span>'
        )
        decision = open_by_operation.get(r.operation_id)
        decide = f'<a href="/decisions#decision-{esc(decision)}">decide</a>' if decision else ""
        rows.append(
            "<tr>"
            f'<td><a class="mono" href="{esc(operation_href(r.operation_id))}">{esc(r.operation_id)}</a></td>'
            f'<td class="mono">{esc(r.job_id)}</td>'
            f"<td>{phase_badge(r)}</td>"
            f"<td>{_dash(r.reason.value if r.reason else None)}</td>"
            f"<td>{_dash(r.last_state)}</td>"
            f'<td class="num">{budget(r.status_requests_used, r.plan.max_status_requests, "status requests")}</td>'
            f'<td class="num">'
            f"{budget(r.transport_failures_used, r.plan.max_transport_failures, 'transport failures')}</td>"
            f'<td class="num">{deadline}</td>'
            f'<td class="num">{next_poll}</td>'
            f"<td>{decide}</td>"
            "</tr>"
        )
    body = (
        "<h1>Operations</h1>"
        f'<p class="muted">{len(records)} operations, as of {clock(now)}. Reload the page for fresh state.</p>'
        "<table><thead><tr><th>Operation</th><th>Job</th><th>Phase</th><th>Reason</th><th>Last state</th>"
        "<th>Status requests</th><th>Transport failures</th><th>Deadline</th><th>Next poll</th><th></th>"
        "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )
    return layout(
        "Operations",
        body,
        here="operations",
        csrf=csrf,
        flashes=flashes,
        open_decisions=open_decisions,
        pending_approvals=pending_approvals,
    )


def operation_page(
    record: OperationRecord,
    story: Sequence[str] | None,
    story_problem: str | None,
    decisions: Sequence[StoredDecision],
    now: datetime,
    *,
    csrf: str,
    flashes: Sequence[Flash],
    open_decisions: int,
    pending_approvals: int | None = None,
) -> str:
    summary = record.summary()
    kv = "".join(f"<tr><th>{esc(key)}</th><td>{_dash(value)}</td></tr>" for key, value in summary.items())
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
        csrf=csrf,
        flashes=flashes,
        open_decisions=open_decisions,
        pending_approvals=pending_approvals,
    )


# -- decisions --------------------------------------------------------------------------------------


def r31_lines(stored: StoredDecision) -> list[tuple[str, str]]:
    """The R31 context from `DecisionRequest.render()`, as label/value pairs (the options become buttons)."""
    pairs: list[tuple[str, str]] = []
    for line in stored.request.render().splitlines()[1:]:
        if line.startswith("Safe options:") or line.startswith("  ["):
            continue
        label, _, value = line.partition(": ")
        pairs.append((label, value))
    return pairs


def _safe_link(url: str | None) -> str | None:
    if url is None or urlsplit(url).scheme not in {"http", "https"}:
        return None
    return url


def decision_card(stored: StoredDecision, *, csrf: str, by: str) -> str:
    request = stored.request
    context = "".join(
        f'<li><span class="k">{esc(label)}:</span> <span class="v">{esc(value)}</span></li>'
        for label, value in r31_lines(stored)
    )
    items = []
    for option in request.options:
        label = f"[{option.number}] {option.label}"
        if option.kind is OptionKind.INSPECT:
            url = _safe_link(option.url)
            control = (
                f'<a class="option" href="{esc(url)}" target="_blank" rel="noopener noreferrer">{esc(label)}</a>'
                if url
                else f"<span>{esc(label)}</span>"
            )
            effect = "opens the provider's console in a new tab; records nothing, the decision stays open"
        else:
            control = (
                f'<button class="option kind-{esc(option.kind.value)}" type="submit" name="option"'
                f' value="{option.number}">{esc(label)}</button>'
            )
            effect = option.effect
        items.append(f'<li>{control}<span class="effect">{esc(effect)}</span></li>')
    items.append(
        '<li><button class="option refuse" type="submit" name="option" value="refuse">refuse</button>'
        '<span class="effect">refuses this request: the operation stays stopped and nothing is sent</span></li>'
    )
    return (
        f'<section class="card decision" id="decision-{esc(request.decision_id)}">'
        "<h2>External job needs a decision</h2>"
        f'<ul class="r31">{context}</ul>'
        f'<p class="muted">Detail: {esc(request.detail)} · <a href="{esc(operation_href(request.operation_id))}">'
        "the operation's story</a></p>"
        f'<form method="post" action="{esc(decide_href(request.decision_id))}">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        '<div class="fields">'
        f'<label>Decided by (recorded in the audit log)<input name="by" required maxlength="100" value="{esc(by)}"'
        ' autocomplete="name" placeholder="your name"></label>'
        '<label>Note (optional)<input name="note" maxlength="500" placeholder="why"></label>'
        "</div>"
        f'<h3>Safe options</h3><ul class="options">{"".join(items)}</ul>'
        "</form></section>"
    )


def decision_history(decisions: Iterable[StoredDecision], *, with_operation: bool = True) -> str:
    rows = []
    for d in decisions:
        request = d.request
        chosen = "—"
        if d.option is not None:
            try:
                chosen = f"[{d.option}] {request.option(d.option).label}"
            except ValueError:
                chosen = f"[{d.option}]"
        decided = "—" if d.decided_at is None else format_rfc3339(d.decided_at)
        href = esc(operation_href(request.operation_id))
        operation = f'<td><a class="mono" href="{href}">{esc(request.operation_id)}</a></td>' if with_operation else ""
        link = (
            f'<a class="mono" href="/decisions#decision-{esc(request.decision_id)}">{esc(request.decision_id)}</a>'
            if d.status == "open"
            else f'<span class="mono">{esc(request.decision_id)}</span>'
        )
        rows.append(
            f"<tr><td>{link}</td>{operation}<td>{esc(request.reason.value)}</td><td>{status_badge(d.status)}</td>"
            f'<td>{_dash(d.decided_by)}</td><td>{esc(chosen)}</td><td class="num">{esc(decided)}</td>'
            f"<td>{_dash(d.note)}</td></tr>"
        )
    head = "<th>Decision</th>" + ("<th>Operation</th>" if with_operation else "")
    return (
        f"<table><thead><tr>{head}<th>Reason</th><th>Status</th><th>By</th><th>Option</th><th>At</th><th>Note</th>"
        "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def decisions_page(
    open_ones: Sequence[StoredDecision],
    recent: Sequence[StoredDecision],
    *,
    csrf: str,
    by: str,
    flashes: Sequence[Flash],
    pending_approvals: int | None = None,
) -> str:
    parts = ["<h1>Decisions</h1>"]
    if open_ones:
        parts.append(
            f'<p class="muted">{len(open_ones)} open. Each option states its cost; choosing one is recorded with'
            " your name in the audit log. A decision can be decided once.</p>"
        )
        parts.extend(decision_card(d, csrf=csrf, by=by) for d in open_ones)
    else:
        parts.append('<p class="muted">No open decisions: nothing is waiting for a person.</p>')
    if recent:
        parts.append("<h2>Recently decided</h2>")
        parts.append(decision_history(recent))
    return layout(
        "Decisions",
        "".join(parts),
        here="decisions",
        csrf=csrf,
        flashes=flashes,
        open_decisions=len(open_ones),
        pending_approvals=pending_approvals,
    )


# -- approvals --------------------------------------------------------------------------------------

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


def answer_form(grant: Grant, answers: Sequence[str], *, csrf: str, by: str) -> str:
    buttons = "".join(
        f'<button class="option{" refuse" if answer != "approve" else ""}" type="submit" name="answer"'
        f' value="{esc(answer)}" title="{esc(_ANSWER_EFFECT[answer])}">{esc(answer.capitalize())}</button>'
        for answer in answers
    )
    return (
        f'<form class="answer" method="post" action="{esc(answer_href(grant.grant_id))}">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        f'<input name="by" required maxlength="100" value="{esc(by)}" autocomplete="name"'
        ' placeholder="decided by (your name)" aria-label="Decided by (recorded in the audit log)">'
        '<input name="note" maxlength="500" placeholder="note (optional)" aria-label="Note (optional)">'
        f"{buttons}</form>"
    )


def grant_rows(
    grants: Iterable[Grant], now: datetime, *, answers: Sequence[str], csrf: str, by: str, decided: bool = False
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
            at = '<span class="muted">—</span>' if g.decided_at is None else timestamp(g.decided_at)
            cells += f'<td>{status_badge(g.status)}</td><td>{_dash(g.decided_by)}</td><td class="num">{at}</td>'
        if answers:
            cells += f"<td>{answer_form(g, answers, csrf=csrf, by=by)}</td>"
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def approvals_page(
    pending: Sequence[Grant],
    approved_sessions: Sequence[Grant],
    recent: Sequence[Grant],
    now: datetime,
    *,
    csrf: str,
    by: str,
    flashes: Sequence[Flash],
    open_decisions: int | None = None,
) -> str:
    parts = [
        "<h1>Approvals</h1>",
        '<p class="muted">Agents whose contracts need a person ask here before a provider call: for a whole'
        " session, or for one call. Each answer is recorded with your name in the agent session's audit log, the"
        " same as <code>pollwarden approve-session</code>, <code>approve-call</code> and"
        " <code>revoke-session</code>. A request can be answered once.</p>",
    ]
    if pending:
        parts.append(f"<h2>Waiting for a person ({len(pending)})</h2>")
        parts.append(grant_rows(pending, now, answers=("approve", "refuse"), csrf=csrf, by=by))
    else:
        parts.append('<p class="muted">No pending approvals: no agent is waiting for a person.</p>')
    if approved_sessions:
        parts.append("<h2>Approved sessions</h2>")
        parts.append(
            '<p class="muted">Routine calls inside an approved session need no further answer; revoking makes the'
            " session's later calls ask again.</p>"
        )
        parts.append(grant_rows(approved_sessions, now, answers=("revoke",), csrf=csrf, by=by, decided=True))
    if recent:
        parts.append("<h2>Recently answered</h2>")
        parts.append(grant_rows(recent, now, answers=(), csrf=csrf, by=by, decided=True))
    return layout(
        "Approvals",
        "".join(parts),
        here="approvals",
        csrf=csrf,
        flashes=flashes,
        open_decisions=open_decisions,
        pending_approvals=len(pending),
    )


# -- audit ------------------------------------------------------------------------------------------


def audit_page(
    check: AuditCheck | None,
    problem: str | None,
    *,
    csrf: str,
    flashes: Sequence[Flash],
    open_decisions: int,
    pending_approvals: int | None = None,
) -> str:
    parts = ["<h1>Audit log</h1>"]
    if check is None:
        parts.append(f'<p class="verdict bad">Cannot verify</p><p>{esc(problem or "")}</p>')
    else:
        report = check.report
        verdict = '<p class="verdict ok">intact</p>' if report.ok else '<p class="verdict bad">TAMPERED</p>'
        against = (
            f"checked against the checkpoint kept elsewhere, {esc(check.trusted)}"
            if check.trusted
            else "no checkpoint kept elsewhere, so a rollback of the whole database could not be checked"
        )
        parts.append(
            f'{verdict}<p><span class="mono">{esc(check.source)}</span>: {report.records} records in'
            f" {report.logs} logs, {report.checkpoints} signed checkpoints, {report.bytes_verified} bytes"
            f" verified; {against}.</p>"
            '<p class="muted">The same check as <code>pollwarden audit verify</code>: the hash chain over the'
            " encrypted records and the signed checkpoints; it needs no decryption key.</p>"
        )
        if report.problems:
            rows = "".join(
                f'<tr><td class="mono">{esc(p.log_id)}</td><td class="num">{_dash(p.seq)}</td>'
                f"<td>{esc(p.what)}</td></tr>"
                for p in report.problems
            )
            parts.append(
                "<h2>Problems</h2><table><thead><tr><th>Log</th><th>Record</th><th>What</th></tr></thead>"
                f"<tbody>{rows}</tbody></table>"
            )
    return layout(
        "Audit",
        "".join(parts),
        here="audit",
        csrf=csrf,
        flashes=flashes,
        open_decisions=open_decisions,
        pending_approvals=pending_approvals,
    )
