"""The operations list (`/`): what needs a person first, 50 a page, searched and filtered by links and one form
that work with no script, refreshed by the page itself (a meta refresh) unless turned off."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from urllib.parse import urlencode

from ...core.digits import whole_number
from ...core.reasons import Phase, StopReason
from ...shown import has_control
from ...store.base import INSPECT_UNREADABLE, ContractCounts, UnreadableRow
from ...store.paging import PAGE_SIZE, SHOWS, OperationsQuery
from .frame import (
    Chrome,
    budget,
    clock,
    cut,
    dash,
    decision_href,
    esc,
    layout,
    moment_span,
    operation_href,
    pager,
    phase_badge,
)
from .operations import Row, ended, flag_badges

FILTERS = {"all": "all", "awaiting": "awaiting a decision", "overdue": "overdue", "orphaned": "orphaned"}
"""`/?show=KEY` and the link's words, in the order of urgency."""
assert tuple(FILTERS) == SHOWS

REFRESH_SECONDS = 15
"""How often the list reloads itself while auto-refresh is on (`refresh=off` in the address turns it off)."""
MAX_SEARCH = 200


@dataclass(frozen=True)
class ListView:
    """What `/` was asked for, read from its address: never an error, whatever it holds (an unknown value is
    ignored and the list shows everything it would otherwise)."""

    query: OperationsQuery = field(default_factory=OperationsQuery)
    page: int = 1
    refresh: bool = True

    @classmethod
    def parse(cls, params: Mapping[str, Sequence[str]]) -> ListView:
        def one(key: str) -> str:
            """The first value given, or "" when none was, or when it holds a control or bidi character (no id or
            name can; PostgreSQL would refuse a NUL outright)."""
            values = params.get(key) or [""]
            return "" if has_control(values[0]) else values[0].strip()

        show = one("show") if one("show") in SHOWS else "all"
        phase = one("phase") if one("phase") in {p.value for p in Phase} else None
        reason = one("reason") if one("reason") in {r.value for r in StopReason} else None
        page = max(1, whole_number(one("page"), 6) or 1)
        query = OperationsQuery(
            show=show,
            search=one("q")[:MAX_SEARCH],
            contract=one("contract")[:MAX_SEARCH] or None,
            phase=phase,
            reason=reason,
            offset=(page - 1) * PAGE_SIZE,
        )
        return cls(query, page, one("refresh") != "off")

    def href(self, **changes: object) -> str:
        """This view's address with some of its settings changed (a filter resets the page to the first)."""
        q = self.query
        values: dict[str, object] = {
            "show": q.show,
            "q": q.search,
            "contract": q.contract,
            "phase": q.phase,
            "reason": q.reason,
            "page": self.page,
            "refresh": None if self.refresh else "off",
        }
        values.update(changes)
        kept = {k: v for k, v in values.items() if v not in (None, "", "all", 1)}
        return "/" + ("?" + urlencode(kept) if kept else "")


def _operation_row(row: Row, now: datetime) -> str:
    r = row.record
    active = r.phase is Phase.ACTIVE
    deadline = moment_span(r.deadline_at, now) if active else ended(r, now)
    next_poll = moment_span(r.next_poll_at, now) if active else dash(None)
    owner = esc(row.ownership.describe(now)) if active else dash(None)
    decide = f'<a href="{esc(decision_href(row.decision))}">decide</a>' if row.decision else ""
    reason = f'<div class="detail reason">{esc(r.reason.value)}</div>' if r.reason else ""
    href = esc(operation_href(r.operation_id))
    return (
        f'<tr data-operation="{esc(r.operation_id)}" data-flags="{esc(" ".join(row.ownership.flags))}">'
        f'<td><a class="mono trunc" href="{href}" title="{esc(r.operation_id)}">{cut(r.operation_id)}</a>'
        f'<div class="detail mono" title="{esc(r.job_id)}">{cut(r.job_id)}</div></td>'
        f"<td>{phase_badge(r)} {flag_badges(row.ownership)}{reason}</td>"
        f'<td><span class="state" title="{esc(r.last_state or "")}">{cut(r.last_state) if r.last_state else dash(None)}'
        "</span></td>"
        f'<td class="num">{budget(r.status_requests_used, r.plan.max_status_requests, "checks")}'
        f'<div class="detail muted">transport {r.transport_failures_used}/{r.plan.max_transport_failures}</div></td>'
        f'<td class="when"><span class="label">Deadline </span>{deadline}</td>'
        f'<td class="when"><span class="label">Next check </span>{next_poll}</td>'
        f'<td class="owner">{owner}</td>'
        f'<td class="act">{decide}</td>'
        "</tr>"
    )


_FLEET_KEYS = ("active", "due", "overdue", "awaiting")


def fleet(counts: Sequence[ContractCounts], view: ListView) -> str:
    """Per contract: active, due, overdue, open decisions, as the database counts them (`Store.fleet_counts`)."""
    lines = "".join(
        f'<tr data-contract="{esc(c.contract)}"><td><a class="mono" title="{esc(c.contract)}"'
        f' href="{esc(view.href(contract=c.contract, page=1))}">{cut(c.contract)}</a></td>'
        + "".join(
            f'<td class="num" data-count="{key}">{n}</td>'
            for key, n in zip(_FLEET_KEYS, (c.active, c.due, c.overdue, c.open_decisions), strict=True)
        )
        + "</tr>"
        for c in counts
    )
    return (
        '<table class="fleet" aria-label="fleet at a glance"><thead><tr><th>Contract</th><th>Active</th><th>Due</th>'
        f"<th>Overdue</th><th>Awaiting a decision</th></tr></thead><tbody>{lines}</tbody></table>"
    )


def _filters(view: ListView, counts: Mapping[str, int]) -> str:
    links = []
    for key, label in FILTERS.items():
        text = f"{esc(label)} ({counts.get(key, 0)})"
        if key == view.query.show:
            links.append(f'<strong aria-current="page">{text}</strong>')
        else:
            links.append(f'<a href="{esc(view.href(show=key, page=1))}">{text}</a>')
    return '<nav class="filters" aria-label="filter the operations">Show: ' + " · ".join(links) + "</nav>"


def _select(name: str, label: str, chosen: str | None, values: Sequence[str]) -> str:
    options = '<option value="">any</option>' + "".join(
        f'<option value="{esc(v)}"{" selected" if v == chosen else ""}>{esc(v)}</option>' for v in values
    )
    return f'<label>{esc(label)}<select name="{name}">{options}</select></label>'


def _search(view: ListView, contracts: Sequence[str]) -> str:
    """One GET form: it keeps the `show` filter and the refresh setting, and starts again at page 1."""
    q = view.query
    hidden = f'<input type="hidden" name="show" value="{esc(q.show)}">' if q.show != "all" else ""
    if not view.refresh:
        hidden += '<input type="hidden" name="refresh" value="off">'
    return (
        f'<form class="search" method="get" action="/" role="search">{hidden}'
        '<label>Operation or job id<input type="search" name="q" maxlength="200"'
        f' value="{esc(q.search)}" placeholder="part of an id"></label>'
        + _select("contract", "Contract", q.contract, contracts)
        + _select("phase", "Phase", q.phase, [p.value for p in Phase])
        + _select("reason", "Reason", q.reason, [r.value for r in StopReason])
        + '<button type="submit">Apply</button>'
        + (f' <a href="{esc(ListView(refresh=view.refresh).href())}">clear</a>' if view.href() != "/" else "")
        + "</form>"
    )


def _refresh_note(view: ListView, now: datetime) -> str:
    if view.refresh:
        toggle = f'Refreshes every {REFRESH_SECONDS} s: <a href="{esc(view.href(refresh="off"))}">turn off</a>'
    else:
        toggle = f'Auto-refresh is off: <a href="{esc(replace(view, refresh=True).href())}">turn on</a>'
    return f'<p class="muted">As of {clock(now)}. {toggle}.</p>'


@dataclass(frozen=True)
class ListData:
    """What views.py read for `/`."""

    rows: Sequence[Row]
    matched: int
    counts: Mapping[str, int]
    fleet: Sequence[ContractCounts]
    contracts: Sequence[str]
    unreadable: Sequence[UnreadableRow] = ()


def operations_page(data: ListData, view: ListView, now: datetime, *, chrome: Chrome) -> str:
    if not data.counts.get("all") and view.href(refresh=None) == "/" and not data.unreadable:
        body = (
            '<h1>Operations</h1><p class="muted">No operations yet: start one with <code>pollwarden watch</code>.</p>'
        )
        return layout("Operations", body, here="operations", chrome=chrome)
    pages = max(1, -(-data.matched // PAGE_SIZE))
    if data.rows:
        lines = "".join(_operation_row(row, now) for row in data.rows)
        table = (
            '<table class="operations stack"><thead><tr><th>Operation / job</th><th>Phase</th><th>Last state</th>'
            "<th>Checks</th><th>Deadline</th><th>Next check</th><th>Owner</th><th></th>"
            f"</tr></thead><tbody>{lines}</tbody></table>"
        )
    elif data.matched:
        table = f'<p class="muted">There is no page {view.page}: <a href="{esc(view.href(page=1))}">the first</a>.</p>'
    else:
        table = '<p class="muted">No operation matches right now.</p>'
    first = (view.page - 1) * PAGE_SIZE + 1
    shown = f"{first}–{first + len(data.rows) - 1} of {data.matched}" if data.rows else f"0 of {data.matched}"
    body = (
        "<h1>Operations</h1>"
        f"<h2>Fleet at a glance</h2>{fleet(data.fleet, view)}"
        f"{_refresh_note(view, now)}"
        f"{_filters(view, data.counts)}{_search(view, data.contracts)}"
        f'<p class="muted">{shown}, what needs a person first: awaiting a decision, overdue, orphaned, then active'
        " by next check, then ended, newest first.</p>"
        f"{table}{pager(view.page, pages, lambda n: view.href(page=n), 'pages of operations')}"
        f"{_unreadable_rows(data.unreadable)}"
    )
    refreshing = replace(chrome, refresh_seconds=REFRESH_SECONDS if view.refresh else None)
    return layout("Operations", body, here="operations", chrome=refreshing)


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
