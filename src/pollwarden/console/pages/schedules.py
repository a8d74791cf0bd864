"""The schedules page: each contract's learnt distribution (issue 26), as `pollwarden schedules` shows it, with a
small inline plot of it (SVG, no script: the console's CSP forbids scripts).

The plot is the estimated share of jobs ended by each age (the distribution's CDF, a line over the grid the plan
was made on), the planned checks as ticks under it, and p50 and p95 as marks; it scales with the page (a viewBox,
`max-width:100%`), so it fits a 390 px phone without horizontal scroll.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from ...core.durations import format_duration
from ...core.learnt import Summary
from ...engine.learning import said
from .frame import Chrome, esc, layout

WIDTH = 360
HEIGHT = 150
LEFT = 34
RIGHT = 10
TOP = 10
PLOT_BOTTOM = 110
TICKS_Y = 122
AXIS_Y = 142
MAX_TICKS = 40
"""Planned checks drawn at most: a plan with more (a long tail at a tight target) shows its first ones."""


def _say(seconds: float) -> str:
    return format_duration(timedelta(seconds=round(seconds)))


def distribution_svg(one: Summary) -> str:
    """The CDF of the learnt distribution, its planned checks and its p50/p95, or '' without a model."""
    model, est = one.model, one.estimate
    if model is None or est is None:
        return ""
    span = max(model.longest, model.checks[-1] if model.checks else 0.0, 1e-3)
    width = WIDTH - LEFT - RIGHT

    def x(age: float) -> float:
        return LEFT + width * min(age, span) / span

    def y(share: float) -> float:
        return PLOT_BOTTOM - (PLOT_BOTTOM - TOP) * share

    points = " ".join(f"{x(k * est.step):.1f},{y(p):.1f}" for k, p in enumerate(est.cdf) if k * est.step <= span)
    name = one.contract if one.key is None else f"{one.contract} key {one.key}"
    out = [
        f'<svg class="distribution" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%"'
        f' xmlns="http://www.w3.org/2000/svg"><title>{esc(name)}: share of jobs ended by age, p50'
        f" {esc(_say(model.p50))}, p95 {esc(_say(model.p95))}, {len(model.checks)} planned checks</title>",
        f'<line x1="{LEFT}" y1="{PLOT_BOTTOM}" x2="{WIDTH - RIGHT}" y2="{PLOT_BOTTOM}" stroke="#aab4bf"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{PLOT_BOTTOM}" stroke="#aab4bf"/>',
        f'<text x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end" font-size="9">100%</text>',
        f'<text x="{LEFT - 4}" y="{PLOT_BOTTOM}" text-anchor="end" font-size="9">0</text>',
        f'<polyline class="cdf" points="{points}" fill="none" stroke="#1f5fa8" stroke-width="1.6"/>',
    ]
    for label, age in (("p50", model.p50), ("p95", model.p95)):
        out.append(
            f'<line class="{label}" x1="{x(age):.1f}" y1="{TOP}" x2="{x(age):.1f}" y2="{PLOT_BOTTOM}"'
            ' stroke="#5d6875" stroke-dasharray="3 3"/>'
            f'<text x="{x(age) + 2:.1f}" y="{TOP + 8}" font-size="9">{label}</text>'
        )
    for check in model.checks[:MAX_TICKS]:
        out.append(
            f'<line class="check" x1="{x(check):.1f}" y1="{TICKS_Y - 6}" x2="{x(check):.1f}" y2="{TICKS_Y + 6}"'
            ' stroke="#a35b00" stroke-width="1.4"/>'
        )
    out.append(f'<text x="{LEFT - 4}" y="{TICKS_Y + 3}" text-anchor="end" font-size="9">checks</text>')
    out.append(f'<text x="{LEFT}" y="{AXIS_Y}" font-size="9">0</text>')
    out.append(f'<text x="{WIDTH - RIGHT}" y="{AXIS_Y}" text-anchor="end" font-size="9">{esc(_say(span))}</text>')
    out.append("</svg>")
    return "".join(out)


def _section(one: Summary) -> str:
    name = esc(one.contract) + ("" if one.key is None else f' <span class="mono">key {esc(one.key)}</span>')
    words = said(one)
    head = f"<h2>{name}</h2><p>{esc(words.samples)}"
    if words.fallback is not None:
        return f"{head}; {esc(words.fallback)}.</p>"
    return (
        f"{head}: {esc(words.durations)}.</p>{distribution_svg(one)}<p>Checks at {esc(words.checks)}.</p>"
        f"<p>Requests per job expected: <b>{esc(words.learnt)}</b> learnt, {esc(words.plain)} with the plain"
        " backoff.</p>"
    )


def schedules_page(found: Sequence[Summary], problem: str | None, *, chrome: Chrome) -> str:
    parts = ["<h1>Learnt schedules</h1>"]
    if problem is not None:
        parts.append(f'<p class="verdict bad">Cannot read the store</p><p>{esc(problem)}</p>')
    elif not found:
        parts.append("<p>No operation has ended yet: every contract polls with its plain backoff.</p>")
    parts.extend(_section(one) for one in found)
    parts.append(
        "<p class=\"muted\">The same figures as <code>pollwarden schedules</code>: each contract's jobs' durations"
        " from its ended operations (the last 500, 30 days), the checks its learnt plan places, and the requests"
        " per job that plan expects against the plain backoff's.</p>"
    )
    return layout("Schedules", "".join(parts), here="schedules", chrome=chrome)
