"""How an event tells its line of the story (`AuditEvent.line`): where it sits (`Scene`), and the words its fields
read as. A record written by an older version, with a field missing, still tells its line: a missing value reads
"?", never "None"."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from ..core.durations import DurationError, format_moment, parse_rfc3339
from ..core.words import DELAY_WORDS, delay_words, plural

SOURCE_WORDS = DELAY_WORDS
"""Who chose a next check's time: the one vocabulary's words (`core.words`)."""

JOB_ENDED_REASONS = frozenset({"job_failed", "job_cancelled", "job_expired"})


class Exchange(Protocol):
    """What the story tells of one HTTP exchange: an `operation.Observed` (an event kind itself, whose module
    imports this one, so it is named here by shape)."""

    @property
    def http_status(self) -> int | None: ...
    @property
    def state(self) -> str | None: ...
    @property
    def retry_after_header(self) -> str | None: ...
    @property
    def detail(self) -> str | None: ...
    @property
    def provider_error(self) -> str | None: ...


@dataclass(frozen=True)
class Scene:
    """Where an event sits: its clock time, the operation whose log it is in (None for an agent session's, an
    installed contract's or the broker's log), and the observation a decision line starts from."""

    at: str
    operation: str | None
    observed: Exchange | None


def said(value: object) -> str:
    """A value for a sentence: a field an older record lacks reads "?", never "None"."""
    return "?" if value is None or value == "" else str(value)


def clock(moment: datetime) -> str:
    """Every time the story tells, with its date and zone: what `why --at` takes back."""
    return format_moment(moment)


def count_words(value: object, noun: str) -> str:
    """`40 checks`, `1 check`: a count an older record may lack ("? checks")."""
    return plural(value, noun) if isinstance(value, int) and not isinstance(value, bool) else f"{said(value)} {noun}s"


def wait_words(next_check: str | None, source: object) -> str:
    """`next check 2026-12-06T18:41:00Z (backoff)`: a wait as every line of the story says it."""
    return f"next check {clock_text(next_check)} ({delay_words(None if source is None else str(source))})"


def clock_text(text: str | None) -> str:
    if not text:
        return "?"
    try:
        return clock(parse_rfc3339(text))
    except DurationError:
        return "?"


def reason_words(reason: str | None) -> str:
    return said(reason).replace("_", " ")


def counts_of(value: object) -> tuple[tuple[str, int | float], ...] | None:
    """The counts of an event's payload, as `counts_text` reads them (a hand-edited payload may hold anything)."""
    if not isinstance(value, Mapping):
        return None
    return tuple((str(k), v) for k, v in value.items() if isinstance(v, int | float) and not isinstance(v, bool))


def observed_words(o: Exchange) -> str:
    if o.http_status is None:
        return f"request failed ({o.detail or 'transport failure'})"
    if o.state is not None:
        return f"polled, state {o.state}"
    text = f"received {o.http_status}"
    if o.retry_after_header:
        text += f", Retry-After {o.retry_after_header}"
    return text


def principal(who: Mapping[str, Any]) -> str:
    """An agent as the kernel named it to the broker: user name, uid and pid."""
    return f"{said(who.get('user'))} (uid {said(who.get('uid'))}, pid {said(who.get('pid'))})"
