"""The page frame and the small pieces every page uses: escaping, links, badges, times, budgets.

Every value that reaches a page goes through `esc`; the frame carries the navigation and the logout form.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import quote, urlencode

from ...core.durations import format_duration, format_rfc3339
from ...core.record import OperationRecord
from ...shown import shown


def esc(value: object) -> str:
    """Every value that reaches a page goes through here (quotes too: values also land in attributes).

    HTML escaping alone leaves bidi overrides and controls, which reorder or hide what an operator reads."""
    return html.escape(shown(value), quote=True)


def operation_href(operation_id: str) -> str:
    return "/operations/" + quote(operation_id, safe="")


def decision_href(decision_id: str) -> str:
    """One open decision's card alone (`/decisions` pages them: the card of a link may be on any page)."""
    return "/decisions?" + urlencode({"decision": decision_id}) + "#decision-" + quote(decision_id, safe="")


def decide_href(decision_id: str) -> str:
    return "/decisions/" + quote(decision_id, safe="") + "/decide"


def answer_href(grant_id: str) -> str:
    return "/approvals/" + quote(grant_id, safe="") + "/answer"


@dataclass(frozen=True)
class Flash:
    kind: str  # ok | error
    text: str


@dataclass(frozen=True)
class Chrome:
    """What a logged-in page's frame shows around its body: the logout form's CSRF token, the flashes, the counts
    in the navigation (None or 0: no count shown)."""

    csrf: str
    flashes: Sequence[Flash] = ()
    open_decisions: int | None = None
    pending_approvals: int | None = None
    user: str | None = None
    """The user a one-time link bound this session to (a broker's console): every form's 'Decided by'."""
    refresh_seconds: int | None = None
    """The page reloads itself this often (a meta refresh: the CSP allows no script); None: it does not."""


STYLE = """
:root { --fg:#1d232b; --muted:#5d6875; --line:#d8dde3; --bg:#f6f7f9; --card:#fff; --accent:#1f5fbf;
        --ok:#1d7a3a; --warn:#a35b00; --bad:#b3261e; }
* { box-sizing: border-box; }
body { margin:0; font:15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Liberation Sans", sans-serif;
       color:var(--fg); background:var(--bg); }
header { background:#18202b; color:#fff; padding:.6rem 1.25rem; display:flex; flex-wrap:wrap; gap:.5rem 1.5rem;
         align-items:center; }
header .brand { font-weight:700; letter-spacing:.02em; }
header nav { display:flex; flex-wrap:wrap; gap:1rem; flex:1; }
header a { color:#cfe0ff; text-decoration:none; }
header a.here { color:#fff; border-bottom:2px solid #fff; }
header form { margin:0; }
header .who { color:#cfe0ff; }
input[readonly] { background:var(--bg); color:var(--muted); }
header button { background:none; border:1px solid #6b7a8c; color:#cfe0ff; border-radius:4px; padding:.15rem .6rem;
                cursor:pointer; font:inherit; font-size:.85rem; }
main { padding:1rem 1.25rem 3rem; max-width:1280px; min-width:0; }
/* Nothing may be wider than the window (1,280 px is the target): long ids are cut with an ellipsis (the
   whole id in the title), long values wrap, and a table too wide anyway scrolls inside its own box. */
td { overflow-wrap:anywhere; }
.trunc { display:inline-block; max-width:14rem; overflow:hidden; text-overflow:ellipsis; white-space:nowrap;
         vertical-align:bottom; }
.wrap { overflow-wrap:anywhere; }
td.owner { font-size:.85rem; max-width:14rem; }
td.act { white-space:nowrap; }
table.operations td .detail { overflow-wrap:normal; }
.trunc.state { max-width:9rem; }
td.when { font-variant-numeric:tabular-nums; min-width:6.5rem; }
.reason { white-space:nowrap; }  /* one token to read and grep: never broken inside */
td .state { overflow-wrap:break-word; }  /* a state word wraps only if it cannot fit at all */
.flag-overdue { color:var(--warn); } .flag-orphaned { color:var(--bad); }
nav.filters { margin:.4rem 0 .8rem; }
table.fleet { width:auto; min-width:30rem; margin-bottom:.6rem; }
.card.tl { padding:.6rem .8rem; overflow:hidden; }
svg.timeline { display:block; max-width:100%; height:auto; }
svg.distribution { display:block; max-width:34rem; width:100%; height:auto; }
p.legend { font-size:.8rem; margin:.4rem 0 0; }
ul.followups { background:var(--card); border:1px solid var(--line); border-radius:6px; margin:0;
               padding:.5rem 1rem .5rem 2rem; }
ul.followups li { padding:.15rem 0; overflow-wrap:anywhere; }
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
.card p, .card h2, .card li { overflow-wrap:anywhere; }
ul.r31 { list-style:none; padding:0; margin:0 0 .8rem; columns:2 22rem; column-gap:2rem; overflow-wrap:anywhere; }
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
nav.pager { margin:.8rem 0; display:flex; flex-wrap:wrap; gap:.3rem .7rem; align-items:baseline; }
nav.pager a, nav.pager strong { padding:.1rem .3rem; }
form.search { display:flex; flex-wrap:wrap; gap:.5rem 1rem; align-items:flex-end; margin:.4rem 0 .8rem; }
form.search label { display:flex; flex-direction:column; font-size:.85rem; color:var(--muted); gap:.2rem; }
form.search input, form.search select, form.search button { font:inherit; padding:.3rem .45rem;
    border:1px solid #aab4bf; border-radius:4px; max-width:100%; }
.label { display:none; }
nav.groups { margin:.4rem 0 1rem; display:flex; flex-wrap:wrap; gap:.3rem 1rem; }
.provider-error { background:#fdecea; border:1px solid #f1a9a2; color:#7a1a13; border-radius:5px;
                  padding:.35rem .6rem; margin:0 0 .8rem; overflow-wrap:anywhere; }
form.bulk { display:flex; flex-wrap:wrap; gap:.5rem 1rem; align-items:center; margin:0 0 1rem; }
/* 390 px (a phone): no horizontal scroll. Wide tables become one block per row, labels where headers were. */
@media (max-width: 720px) {
  header, main { padding-left:.7rem; padding-right:.7rem; }
  th { white-space:normal; }
  table.fleet { min-width:0; font-size:.85rem; }
  table.fleet th, table.fleet td { padding:.3rem .35rem; }
  table.stack, table.stack tbody, table.stack tr, table.stack td { display:block; width:100%; }
  table.stack thead { display:none; }
  table.stack tr { border-bottom:2px solid var(--line); padding:.3rem 0; }
  table.stack td { border:none; padding:.15rem .6rem; }
  table.stack td.owner { max-width:none; }
  .label { display:inline; color:var(--muted); }
  .fields input { min-width:0; width:100%; }
  .fields label { flex:1 1 100%; }
  ul.options .effect { min-width:0; flex-basis:100%; }
  ul.r31 { columns:1; }
  ul.r31 .k { min-width:0; }
  table.kv th { width:auto; }
  .trunc { max-width:100%; }
  .card { padding:.8rem .8rem; }
}
.login { max-width:26rem; margin:4rem auto; }
.login input { width:100%; font:inherit; padding:.45rem .6rem; margin:.4rem 0 .8rem; border:1px solid #aab4bf;
               border-radius:4px; }
"""

NAV = (
    ("/", "Operations", "operations"),
    ("/decisions", "Decisions", "decisions"),
    ("/approvals", "Approvals", "approvals"),
    ("/schedules", "Schedules", "schedules"),
    ("/audit", "Audit", "audit"),
)


def layout(
    title: str,
    body: str,
    *,
    here: str,
    chrome: Chrome | None,
) -> str:
    """The page frame; `chrome` None means a logged-out page (no navigation, no logout form)."""
    head = (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · pollwarden</title><style>{STYLE}</style>"
    )
    if chrome is not None and chrome.refresh_seconds:
        head += f'<meta http-equiv="refresh" content="{int(chrome.refresh_seconds)}">'
    head += "</head><body>"
    bar = '<header><span class="brand">pollwarden console</span>'
    flashes: Sequence[Flash] = ()
    if chrome is not None:
        flashes = chrome.flashes
        links = []
        for href, label, key in NAV:
            text = esc(label)
            if key == "decisions" and chrome.open_decisions:
                text += f" ({chrome.open_decisions} open)"
            if key == "approvals" and chrome.pending_approvals:
                text += f" ({chrome.pending_approvals} pending)"
            cls = ' class="here"' if key == here else ""
            links.append(f'<a href="{href}"{cls}>{text}</a>')
        bar += "<nav>" + "".join(links) + "</nav>"
        if chrome.user is not None:
            bar += f'<span class="who">logged in as {esc(chrome.user)}</span>'
        bar += (
            '<form method="post" action="/logout">'
            f'<input type="hidden" name="csrf" value="{esc(chrome.csrf)}"><button type="submit">log out</button></form>'
        )
    bar += "</header>"
    notes = "".join(f'<div class="flash {esc(f.kind)}" role="status">{esc(f.text)}</div>' for f in flashes)
    return f"{head}{bar}<main>{notes}{body}</main></body></html>"


def login_page(message: str | None = None, *, one_time: bool = False) -> str:
    note = f'<div class="flash error" role="alert">{esc(message)}</div>' if message else ""
    if one_time:  # a broker's console: no token, only a link an approver asks the broker for
        return layout(
            "Log in",
            '<div class="card login"><h1>Log in</h1>'
            f"{note}"
            '<p class="muted">This console belongs to a pollwarden broker. As an approver, run'
            " <code>pollwarden console-login --connect SOCKET</code> and open the link it prints (valid 5"
            " minutes, once).</p></div>",
            here="login",
            chrome=None,
        )
    body = (
        '<div class="card login"><h1>Log in</h1>'
        f"{note}"
        '<p class="muted">Use the token the <code>pollwarden console</code> command printed when it started.</p>'
        '<form method="post" action="/login">'
        '<label for="token">Token</label>'
        '<input id="token" name="token" type="password" autocomplete="off" required autofocus>'
        '<button class="option" type="submit">Log in</button></form></div>'
    )
    return layout("Log in", body, here="login", chrome=None)


def by_attributes(by: str, chrome: Chrome) -> str:
    """The value of a form's 'Decided by' input: the name last typed, or in a bound session that user, read-only
    (the server records the bound user whatever is posted; the field only shows who that is)."""
    if chrome.user is not None:
        return f'value="{esc(chrome.user)}" readonly'
    return f'value="{esc(by)}" autocomplete="name"'


def message_page(title: str, text: str, *, csrf: str | None) -> str:
    body = f'<h1>{esc(title)}</h1><p>{esc(text)}</p><p><a href="/">Back to the operations</a></p>'
    return layout(title, body, here="", chrome=None if csrf is None else Chrome(csrf))


CUT_AT = 28
"""Ids longer than this are cut in the middle: generated ones share a long prefix and differ at the end."""


def cut(text: str, *, head: int = 14, tail: int = 8) -> str:
    """`deploys-202612…2-04a1f0`: the start and the distinct end of a long id, escaped; the caller puts the whole
    id in a title (hover) and a link. Short ids are shown whole."""
    if len(text) <= max(CUT_AT, head + tail + 1):
        return esc(text)
    return f"{esc(text[:head])}…{esc(text[-tail:])}"


def pager(page: int, pages: int, href: Callable[[int], str], label: str) -> str:
    """Links to the first, previous, next and last pages and a few around this one: plain links, each reachable
    with the keyboard (Tab) and named for a screen reader."""
    if pages <= 1:
        return ""
    links = []

    def link(n: int, text: str, name: str) -> str:
        return f'<a href="{esc(href(n))}" aria-label="{esc(name)}">{text}</a>'

    if page > 1:
        links += [link(1, "« first", "first page"), link(page - 1, "‹ previous", "previous page")]
    for n in range(max(1, page - 2), min(pages, page + 2) + 1):
        if n == page:
            links.append(f'<strong aria-current="page">{n}</strong>')
        else:
            links.append(link(n, str(n), f"page {n}"))
    if page < pages:
        links += [link(page + 1, "next ›", "next page"), link(pages, "last »", f"last page ({pages})")]
    return f'<nav class="pager" aria-label="{esc(label)}">Page {page} of {pages}: ' + " ".join(links) + "</nav>"


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


def dash(value: object) -> str:
    return '<span class="muted">—</span>' if value is None or value == "" else esc(value)


def moment_span(moment: datetime, now: datetime) -> str:
    """`in 4m10s` to read, the exact instant in the title."""
    return f'<span title="{esc(format_rfc3339(moment))}">{esc(relative(moment, now))}</span>'
