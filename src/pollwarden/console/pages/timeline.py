"""One operation's timeline as a server-rendered SVG (no script), drawn from its audit events only.

Lanes, top to bottom: the person's and the watch's marks (decisions, extensions, cancels, interrupts) and the
stop; one mark per status request, coloured by its answer; the waits chosen, as spans coloured by their source
(Retry-After, provider hint, local backoff, manual extension); the requests used against the budget, as a step
line under a dashed budget line. The deadline is a vertical line, or an arrow at the right edge when it lies
beyond the last event. Every text in it passes `esc` (provider text is hostile), and the SVG's `<title>` and
`aria-label` tell the same story in words; `data-` attributes let a test count what is drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ... import events as ev
from ...core.durations import DurationError, parse_rfc3339
from ...core.record import OperationRecord
from ...core.words import delay_words, plural
from ...store.base import Event
from .frame import esc

WIDTH = 1000
LEFT = 118
RIGHT = 24
MARKS_Y = 34
REQUESTS_Y = 78
WAITS_Y = 112
BUDGET_TOP = 146
BUDGET_BOTTOM = 206
AXIS_Y = 226
HEIGHT = 248

SOURCE_COLOURS = {
    "provider_retry_after": "#a35b00",
    "provider_poll_hint": "#6a3fb5",
    "provider_estimate": "#6a3fb5",
    "local_backoff": "#5d6875",
    "learnt": "#1f5fa8",
    "manual_extension": "#1d7a3a",
    "credential_recheck": "#1d7a3a",
}

STOP_KINDS = {ev.SucceededEvent.KIND: "succeeded", ev.JobEnded.KIND: "job ended", ev.Escalated.KIND: "stopped"}


@dataclass(frozen=True)
class Request:
    at: datetime
    number: int
    label: str
    tone: str  # ok | wait | warn | bad


@dataclass(frozen=True)
class Wait:
    start: datetime
    end: datetime
    source: str


@dataclass(frozen=True)
class Mark:
    at: datetime
    kind: str  # stop | decided | refused | extended | action | interrupted
    label: str


@dataclass
class Picture:
    start: datetime
    requests: list[Request] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    budget: list[tuple[datetime, int]] = field(default_factory=list)
    """(when, max status requests) from creation on, changed by extensions."""
    used: list[tuple[datetime, int]] = field(default_factory=list)
    deadlines: list[datetime] = field(default_factory=list)

    @property
    def stop(self) -> Mark | None:
        stops = [m for m in self.marks if m.kind == "stop"]
        return stops[-1] if stops else None


def _moment(text: str | None, fallback: datetime) -> datetime:
    if not text:
        return fallback
    try:
        return parse_rfc3339(text)
    except DurationError:
        return fallback


def _answer(o: ev.Observed) -> tuple[str, str]:
    """The label and tone of one answer: its state when the contract read one, else its HTTP status."""
    if o.http_status is None:
        return "transport failure", "bad"
    if o.state:
        return o.state, "ok"
    if o.http_status == 429 or o.http_status >= 500:
        return f"HTTP {o.http_status}", "warn"
    return f"HTTP {o.http_status}", "bad" if o.http_status >= 400 else "ok"


def picture_of(events: Sequence[Event], record: OperationRecord) -> Picture:
    """What the timeline draws, read from the events in order (and the record only where no event says it)."""
    start = events[0].at if events else record.created_at
    pic = Picture(start)
    pic.budget.append((start, record.plan.max_status_requests))
    pending: Request | None = None
    for event in events:
        typed = ev.parse(event.kind, event.data)
        if isinstance(typed, ev.Created):
            if typed.max_status_requests is not None:
                pic.budget[0] = (start, typed.max_status_requests)
            pic.deadlines.append(_moment(typed.deadline_at, record.deadline_at))
        elif isinstance(typed, ev.Reserved):
            pic.used.append((event.at, typed.request_no or len(pic.used) + 1))
        elif isinstance(typed, ev.Observed):
            label, tone = _answer(typed)
            pending = Request(_moment(typed.sent_at, event.at), len(pic.requests) + 1, label, tone)
            pic.requests.append(pending)
        elif isinstance(typed, ev.DecisionEvent):
            if typed.action == "wait" and typed.next_poll_at:
                end = _moment(typed.next_poll_at, event.at)
                pic.waits.append(Wait(event.at, max(end, event.at), typed.delay_source or "local_backoff"))
            if typed.action == "succeed" and pending is not None:
                pic.requests[-1] = Request(pending.at, pending.number, pending.label, "done")
            pending = None
        elif event.kind in STOP_KINDS:
            reason = event.data.get("reason")
            words = STOP_KINDS[event.kind] + (f": {str(reason).replace('_', ' ')}" if reason else "")
            pic.marks.append(Mark(event.at, "stop", words))
        elif isinstance(typed, ev.Extended):
            granted = "one check granted" if typed.delay_source == "credential_recheck" else "extended"
            pic.marks.append(Mark(event.at, "extended", f"{granted} by {typed.by or '?'}"))
            if typed.max_status_requests is not None:
                pic.budget.append((event.at, typed.max_status_requests))
            if typed.deadline_at:
                pic.deadlines.append(_moment(typed.deadline_at, event.at))
            if typed.next_poll_at:
                source = typed.delay_source if typed.delay_source in SOURCE_COLOURS else "manual_extension"
                pic.waits.append(Wait(event.at, _moment(typed.next_poll_at, event.at), source))
        elif isinstance(typed, ev.Decided):
            pic.marks.append(Mark(event.at, "decided", f"{typed.by or '?'} chose {typed.label or '?'}"))
        elif isinstance(typed, ev.Refused):
            pic.marks.append(Mark(event.at, "refused", f"refused by {typed.by or '?'}"))
        elif isinstance(typed, ev.ActionEvent):
            status = typed.extra.get("http_status")
            answer = f" (HTTP {status})" if isinstance(status, int) else ("" if typed.ok else " FAILED")
            pic.marks.append(Mark(event.at, "action", f"{typed.action or 'action'}{answer}"))
        elif isinstance(typed, ev.WatchInterrupted):
            pic.marks.append(Mark(event.at, "interrupted", f"interrupted ({typed.why or '?'})"))
    if not pic.deadlines:
        pic.deadlines.append(record.deadline_at)
    return pic


def _clock(moment: datetime) -> str:
    return moment.strftime("%H:%M:%S")


def summary(pic: Picture) -> str:
    """The story the picture tells, in words: the SVG's title and aria-label."""
    parts: list[str] = []
    n = len(pic.requests)
    if n:
        parts.append(
            f"{plural(n, 'check')} from {_clock(pic.requests[0].at)}"
            f" to {_clock(pic.requests[-1].at)}, answers: {', '.join(r.label for r in pic.requests)}"
        )
    else:
        parts.append("no check yet")
    sources: dict[str, int] = {}
    for wait in pic.waits:
        sources[wait.source] = sources.get(wait.source, 0) + 1
    if sources:
        waits = ", ".join(f"{count} from {delay_words(s)}" for s, count in sources.items())
        parts.append(f"waits: {waits}")
    parts.append(f"budget {plural(pic.budget[-1][1], 'check')}, deadline {_clock(pic.deadlines[-1])}")
    for mark in pic.marks:
        parts.append(f"{mark.label} at {_clock(mark.at)}")
    return "; ".join(parts) + "."


def timeline_svg(events: Sequence[Event], record: OperationRecord, now: datetime) -> str:
    pic = picture_of(events, record)
    moments = [pic.start, *(r.at for r in pic.requests), *(m.at for m in pic.marks), *(e.at for e in events)]
    moments += [w.end for w in pic.waits]
    if not record.is_final:
        moments.append(min(now, record.deadline_at))
    end = max(moments)
    if end - pic.start < timedelta(seconds=1):
        end = pic.start + timedelta(seconds=1)
    deadline = pic.deadlines[-1]
    span = (end - pic.start).total_seconds()
    inner = WIDTH - LEFT - RIGHT

    def x(moment: datetime) -> float:
        offset = (moment - pic.start).total_seconds() / span
        return round(LEFT + max(0.0, min(1.0, offset)) * inner, 1)

    words = summary(pic)
    out = [
        f'<svg class="timeline" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%"'
        f' preserveAspectRatio="xMinYMin meet" aria-label="{esc(words)}" data-requests="{len(pic.requests)}"'
        f' data-waits="{len(pic.waits)}" data-marks="{len(pic.marks)}"'
        f' data-stop="{esc(pic.stop.label) if pic.stop else ""}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{esc(words)}</title>",
        '<g font-size="12" fill="#5d6875">',
        f'<text x="4" y="{MARKS_Y + 4}">decisions</text>',
        f'<text x="4" y="{REQUESTS_Y + 4}">requests</text>',
        f'<text x="4" y="{WAITS_Y + 4}">waits</text>',
        f'<text x="4" y="{(BUDGET_TOP + BUDGET_BOTTOM) // 2 + 4}">budget used</text>',
        "</g>",
        f'<line x1="{LEFT}" y1="{AXIS_Y}" x2="{WIDTH - RIGHT}" y2="{AXIS_Y}" stroke="#aab4bf"/>',
    ]
    fine = span < 10  # a short run: tenths of a second, or the three ticks could read the same
    for tick in (pic.start, pic.start + (end - pic.start) / 2, end):
        anchor = "start" if tick == pic.start else "end" if tick == end else "middle"
        label = _clock(tick) + (f".{tick.microsecond // 100_000}" if fine else "")
        out.append(
            f'<text x="{x(tick)}" y="{AXIS_Y + 16}" font-size="12" text-anchor="{anchor}"'
            f' fill="#5d6875">{esc(label)}</text>'
        )
    out.extend(_budget(pic, x, end))
    if deadline <= end:
        dx = x(deadline)
        out.append(
            f'<g id="tl-deadline"><line x1="{dx}" y1="18" x2="{dx}" y2="{AXIS_Y}" stroke="#b3261e"'
            f' stroke-dasharray="5 3"/><text x="{dx - 4}" y="14" font-size="12" text-anchor="end"'
            f' fill="#b3261e">deadline {esc(_clock(deadline))}</text></g>'
        )
    else:
        out.append(
            f'<g id="tl-deadline"><text x="{WIDTH - RIGHT}" y="14" font-size="12" text-anchor="end"'
            f' fill="#b3261e">deadline {esc(_clock(deadline))} →</text></g>'
        )
    for i, wait in enumerate(pic.waits, 1):
        x1, x2 = x(wait.start), x(wait.end)
        colour = SOURCE_COLOURS.get(wait.source, "#5d6875")
        what = delay_words(wait.source)
        out.append(
            f'<rect class="tl-wait" id="tl-wait-{i}" data-source="{esc(wait.source)}" x="{x1}" y="{WAITS_Y - 7}"'
            f' width="{max(2.0, round(x2 - x1, 1))}" height="14" rx="3" fill="{colour}" fill-opacity="0.55">'
            f"<title>wait {i}: {esc(_clock(wait.start))} to {esc(_clock(wait.end))}, from {esc(what)}</title></rect>"
        )
    tones = {"ok": "#1f5fbf", "done": "#1d7a3a", "warn": "#a35b00", "bad": "#b3261e"}
    labelled_at = -1000.0  # a label only where it cannot overlap the last one; every mark keeps its <title>
    for r in pic.requests:
        rx = x(r.at)
        room = rx - labelled_at
        out.append(
            f'<g class="tl-request" id="tl-request-{r.number}" data-tone="{r.tone}">'
            f'<circle cx="{rx}" cy="{REQUESTS_Y}" r="6" fill="{tones[r.tone]}"/>'
            f"<title>request {r.number} at {esc(_clock(r.at))}: {esc(r.label)}</title>"
        )
        if room >= 78:
            labelled_at = rx
            out.append(
                f'<text x="{rx}" y="{REQUESTS_Y - 11}" font-size="11" text-anchor="middle"'
                f' fill="{tones[r.tone]}">{esc(r.label[:12])}</text>'
            )
        out.append("</g>")
    placed: list[float] = []
    for i, mark in enumerate(pic.marks, 1):
        mx = x(mark.at)
        line_x = mx
        while any(abs(mx - p) < 14 for p in placed):
            mx += 16  # marks of the same moment side by side; each line stays at its true time
        placed.append(mx)
        ident = "tl-stop" if mark is pic.stop else f"tl-mark-{i}"
        colour = "#b3261e" if mark.kind == "stop" and not mark.label.startswith("succeeded") else "#18202b"
        if mark.kind == "stop" and mark.label.startswith("succeeded"):
            colour = "#1d7a3a"
        shape = (
            f'<rect x="{mx - 5}" y="{MARKS_Y - 5}" width="10" height="10" fill="{colour}"/>'
            if mark.kind == "stop"
            else f'<path d="M{mx} {MARKS_Y - 7} l7 7 l-7 7 l-7 -7 z" fill="{colour}"/>'
        )
        out.append(
            f'<g class="tl-mark tl-{mark.kind}" id="{ident}" data-kind="{mark.kind}">'
            f'<line x1="{line_x}" y1="{MARKS_Y}" x2="{line_x}" y2="{BUDGET_BOTTOM}" stroke="{colour}"'
            ' stroke-opacity="0.35"/>'
            f"{shape}<title>{esc(mark.label)} at {esc(_clock(mark.at))}</title>"
        )
        if mark is pic.stop:
            anchor, dx = ("end", -10) if mx > WIDTH / 2 else ("start", 10)
            out.append(
                f'<text x="{mx + dx}" y="{MARKS_Y + 4}" font-size="12" text-anchor="{anchor}"'
                f' fill="{colour}">{esc(mark.label[:60])}</text>'
            )
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _budget(pic: Picture, x: Callable[[datetime], float], end: datetime) -> list[str]:
    """The requests used (a step line) under the budget (a dashed line that an extension raises)."""
    top = max([b for _, b in pic.budget] + [n for _, n in pic.used] + [1])

    def y(count: int) -> float:
        return round(BUDGET_BOTTOM - (BUDGET_BOTTOM - BUDGET_TOP) * count / top, 1)

    out = []
    for i, (at, maximum) in enumerate(pic.budget):
        until = pic.budget[i + 1][0] if i + 1 < len(pic.budget) else end
        out.append(
            f'<line class="tl-budget" x1="{x(at)}" y1="{y(maximum)}" x2="{x(until)}" y2="{y(maximum)}"'
            f' stroke="#b3261e" stroke-dasharray="4 3"><title>budget: {plural(maximum, "check")}</title></line>'
        )
    out.append(
        f'<text x="{x(pic.budget[-1][0]) + 4}" y="{y(pic.budget[-1][1]) - 4}" font-size="11"'
        f' fill="#b3261e">budget {pic.budget[-1][1]}</text>'
    )
    points = [f"{x(pic.start)},{y(0)}"]
    count = 0
    for at, n in pic.used:
        points.append(f"{x(at)},{y(count)}")
        count = n
        points.append(f"{x(at)},{y(count)}")
    points.append(f"{x(end)},{y(count)}")
    out.append(
        f'<polyline class="tl-used" points="{" ".join(points)}" fill="none" stroke="#1f5fbf" stroke-width="2">'
        f"<title>{plural(count, 'check')} used</title></polyline>"
    )
    return out


LEGEND = (
    '<p class="legend muted">'
    '<span style="color:#1f5fbf">● answer with a state</span> '
    '<span style="color:#1d7a3a">● the answer that succeeded</span> '
    '<span style="color:#a35b00">● 429 or 5xx</span> '
    '<span style="color:#b3261e">● error or transport failure</span> · waits: '
    + " ".join(f'<span style="color:{c}">▬ {esc(delay_words(s))}</span>' for s, c in SOURCE_COLOURS.items())
    + ' · <span style="color:#b3261e">┆ deadline, - - budget</span> · ◆ a person or a watch · ■ the stop</p>'
)
