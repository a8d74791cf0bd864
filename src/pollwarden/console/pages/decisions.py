"""Decisions: an open one as a card whose safe options are buttons, and the history of decided ones."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from urllib.parse import urlsplit

from ...core.durations import format_rfc3339
from ...core.escalation import OptionKind
from ...store.base import StoredDecision
from .frame import Chrome, by_attributes, dash, decide_href, esc, layout, operation_href, status_badge


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
    return (
        f'<section class="card decision" id="decision-{esc(request.decision_id)}">'
        f"<h2>{esc(title)}</h2>"
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
            f'<a class="mono" href="/decisions#decision-{esc(request.decision_id)}">{esc(request.decision_id)}</a>'
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
        f"<table><thead><tr>{head}<th>Reason</th><th>Status</th><th>By</th><th>Option</th><th>At</th><th>Note</th>"
        "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def decisions_page(
    open_ones: Sequence[StoredDecision],
    recent: Sequence[StoredDecision],
    *,
    by: str,
    chrome: Chrome,
) -> str:
    parts = ["<h1>Decisions</h1>"]
    if open_ones:
        parts.append(
            f'<p class="muted">{len(open_ones)} open. Each option states its cost; choosing one is recorded with'
            " your name in the audit log. A decision can be decided once.</p>"
        )
        by_attrs = by_attributes(by, chrome)
        parts.extend(decision_card(d, csrf=chrome.csrf, by_attrs=by_attrs) for d in open_ones)
    else:
        parts.append('<p class="muted">No open decisions: nothing is waiting for a person.</p>')
    if recent:
        parts.append("<h2>Recently decided</h2>")
        parts.append(decision_history(recent))
    return layout(
        "Decisions",
        "".join(parts),
        here="decisions",
        chrome=replace(chrome, open_decisions=len(open_ones)),
    )
