"""Decisions: an open one as a card whose safe options are buttons, and the history of decided ones."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from urllib.parse import urlencode, urlsplit

from ...core.durations import format_rfc3339
from ...core.escalation import OptionKind
from ...home.closing import BULK_REASONS
from ...store.base import StoredDecision
from ...store.paging import DecisionGroup
from .frame import (
    Chrome,
    by_attributes,
    cut,
    dash,
    decide_href,
    decision_href,
    esc,
    layout,
    operation_href,
    pager,
    status_badge,
)


def r31_lines(stored: StoredDecision) -> list[tuple[str, str]]:
    """The R31 context from `DecisionRequest.render()`, as label/value pairs (the options become buttons)."""
    pairs: list[tuple[str, str]] = []
    for line in stored.request.render().splitlines()[1:]:
        if line.startswith(("Safe options:", "  [", "Provider error:")):
            continue  # the options become buttons; the provider's error is shown apart, where it is seen first
        label, _, value = line.partition(": ")
        pairs.append((label, value))
    return pairs


def _safe_link(url: str | None) -> str | None:
    if url is None or urlsplit(url).scheme not in {"http", "https"}:
        return None
    return url


def decision_card(stored: StoredDecision, *, csrf: str, by_attrs: str) -> str:
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
    stays = "the operation stays stopped" if request.reason else "the watch goes on within its limits"
    items.append(
        '<li><button class="option refuse" type="submit" name="option" value="refuse">refuse</button>'
        f'<span class="effect">refuses this request: {stays} and nothing is sent</span></li>'
    )
    title = request.render().splitlines()[0]  # what is asked: a stop's decision, or an agent's cancel request
    error = (
        f'<p class="provider-error"><strong>The provider said:</strong> {esc(request.provider_error)}</p>'
        if request.provider_error
        else ""
    )
    return (
        f'<section class="card decision" id="decision-{esc(request.decision_id)}">'
        f"<h2>{esc(title)}</h2>{error}"
        f'<ul class="r31">{context}</ul>'
        f'<p class="muted">Detail: {esc(request.detail)} · <a href="{esc(operation_href(request.operation_id))}">'
        "the operation's story</a></p>"
        f'<form method="post" action="{esc(decide_href(request.decision_id))}">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        '<div class="fields">'
        f'<label>Decided by (recorded in the audit log)<input name="by" required maxlength="100" {by_attrs}'
        ' placeholder="your name"></label>'
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
            f'<a class="mono" href="{esc(decision_href(request.decision_id))}">{esc(request.decision_id)}</a>'
            if d.status == "open"
            else f'<span class="mono">{esc(request.decision_id)}</span>'
        )
        rows.append(
            f"<tr><td>{link}</td>{operation}<td>{esc(request.why)}</td><td>{status_badge(d.status)}</td>"
            f'<td>{dash(d.decided_by)}</td><td>{esc(chosen)}</td><td class="num">{esc(decided)}</td>'
            f"<td>{dash(d.note)}</td></tr>"
        )
    head = "<th>Decision</th>" + ("<th>Operation</th>" if with_operation else "")
    return (
        f'<table class="stack"><thead><tr>{head}<th>Reason</th><th>Status</th><th>By</th><th>Option</th><th>At</th>'
        "<th>Note</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


DECISIONS_PAGE = 20
"""Open decisions a page shows as cards: 2,000 open ones are 100 pages, grouped by reason above them."""


@dataclass(frozen=True)
class DecisionsData:
    """What views.py read for `/decisions`: the groups, one page of one group's (or every group's) cards."""

    groups: Sequence[DecisionGroup]
    reason: str | None
    page: int
    cards: Sequence[StoredDecision]
    recent: Sequence[StoredDecision]

    @property
    def open_count(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def matched(self) -> int:
        return sum(g.count for g in self.groups if self.reason in (None, g.reason))


def decisions_href(reason: str | None, page: int = 1) -> str:
    params = {k: v for k, v in (("reason", reason), ("page", page if page > 1 else None)) if v is not None}
    return "/decisions" + ("?" + urlencode(params) if params else "")


def _groups(data: DecisionsData) -> str:
    links = []
    for reason, count in [(None, data.open_count), *((g.reason, g.count) for g in data.groups)]:
        text = f"{esc(reason or 'all')} ({count})"
        if reason == data.reason:
            links.append(f'<strong aria-current="page">{text}</strong>')
        else:
            links.append(f'<a href="{esc(decisions_href(reason))}">{text}</a>')
    return '<nav class="groups" aria-label="open decisions by reason">By reason: ' + " ".join(links) + "</nav>"


def _bulk_forms(data: DecisionsData, csrf: str) -> str:
    """A form per ended-job reason shown (one step: it asks for the confirmation page, which changes nothing)."""
    forms = []
    for group in data.groups:
        if group.reason not in BULK_REASONS or data.reason not in (None, group.reason):
            continue
        plural = "s" if group.count != 1 else ""
        forms.append(
            '<form class="bulk" method="post" action="/decisions/close">'
            f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
            f'<input type="hidden" name="reason" value="{esc(group.reason)}">'
            f'<button class="option kind-close" type="submit">Close the {group.count} {esc(group.reason)}'
            f" decision{plural}…</button>"
            '<span class="muted">the provider ended these jobs; you confirm on the next page</span></form>'
        )
    return "".join(forms)


def decisions_page(data: DecisionsData, *, by: str, chrome: Chrome) -> str:
    parts = ["<h1>Decisions</h1>"]
    if data.groups:
        pages = max(1, -(-data.matched // DECISIONS_PAGE))
        first = (data.page - 1) * DECISIONS_PAGE + 1
        shown = f"{first}–{first + len(data.cards) - 1}" if data.cards else "none"
        parts.append(
            f'<p class="muted">{data.open_count} open. Each option states its cost; choosing one is recorded with'
            f" your name in the audit log. A decision can be decided once. Showing {shown} of {data.matched},"
            " oldest first.</p>"
        )
        parts.append(_groups(data))
        parts.append(_bulk_forms(data, chrome.csrf))
        by_attrs = by_attributes(by, chrome)
        parts.extend(decision_card(d, csrf=chrome.csrf, by_attrs=by_attrs) for d in data.cards)
        parts.append(pager(data.page, pages, lambda n: decisions_href(data.reason, n), "pages of decisions"))
    else:
        parts.append('<p class="muted">No open decisions: nothing is waiting for a person.</p>')
    if data.recent:
        parts.append("<h2>Recently decided</h2>")
        parts.append(decision_history(data.recent))
    return layout(
        "Decisions",
        "".join(parts),
        here="decisions",
        chrome=replace(chrome, open_decisions=data.open_count),
    )


def _person_fields(by_attrs: str, note: str | None) -> str:
    return (
        '<div class="fields">'
        f'<label>Decided by (recorded in the audit log)<input name="by" required maxlength="100" {by_attrs}'
        ' placeholder="your name"></label>'
        f'<label>Note (optional)<input name="note" maxlength="500" value="{esc(note or "")}" placeholder="why">'
        "</label></div>"
    )


def confirm_cancel_page(stored: StoredDecision, option: int, note: str | None, *, by: str, chrome: Chrome) -> str:
    """The second step of "cancel at provider": what will be sent, and one button that sends it."""
    request = stored.request
    body = (
        "<h1>Cancel the job at the provider?</h1>"
        f'<section class="card decision" id="confirm-{esc(request.decision_id)}">'
        "<p>This sends the contract's documented cancel for job "
        f'<code class="wrap">{esc(request.job_id)}</code> (operation'
        f' <a class="mono wrap" href="{esc(operation_href(request.operation_id))}">{esc(request.operation_id)}</a>)'
        " once. It cannot be taken back: the job stops at the provider.</p>"
        f'<form method="post" action="{esc(decide_href(request.decision_id))}">'
        f'<input type="hidden" name="csrf" value="{esc(chrome.csrf)}">'
        f'<input type="hidden" name="option" value="{option}"><input type="hidden" name="confirm" value="yes">'
        f"{_person_fields(by_attributes(by, chrome), note)}"
        '<button class="option refuse" type="submit" name="send" value="cancel">Yes, cancel the job at the provider'
        f'</button> <a href="{esc(decision_href(request.decision_id))}">No, go back</a></form></section>'
    )
    return layout("Confirm the cancel", body, here="decisions", chrome=chrome)


def confirm_close_page(reason: str, decisions: Sequence[StoredDecision], *, by: str, chrome: Chrome) -> str:
    """The second step of a bulk close: how many, which, and one button that closes them all."""
    count = len(decisions)
    listed = "".join(
        f'<li><span class="mono" title="{esc(d.request.operation_id)}">{cut(d.request.operation_id)}</span>'
        f"{' · ' + esc(d.request.provider_error) if d.request.provider_error else ''}</li>"
        for d in decisions[:DECISIONS_PAGE]
    )
    more = f"<li>… and {count - DECISIONS_PAGE} more</li>" if count > DECISIONS_PAGE else ""
    plural = "s" if count != 1 else ""
    body = (
        f"<h1>Close {count} {esc(reason)} decision{plural}?</h1>"
        '<section class="card">'
        "<p>The provider ended these jobs. Closing keeps each operation stopped as final and sends nothing to the"
        " provider; each close is recorded with your name in the audit log, one by one.</p>"
        f'<ul class="followups">{listed}{more}</ul>'
        '<form method="post" action="/decisions/close">'
        f'<input type="hidden" name="csrf" value="{esc(chrome.csrf)}">'
        f'<input type="hidden" name="reason" value="{esc(reason)}"><input type="hidden" name="confirm" value="yes">'
        f"{_person_fields(by_attributes(by, chrome), None)}"
        f'<button class="option" type="submit">Yes, close {count}</button> <a href="/decisions">No, go back</a>'
        "</form></section>"
    )
    return layout("Confirm the close", body, here="decisions", chrome=chrome)
