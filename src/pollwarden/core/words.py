"""The one vocabulary every output uses for waits, checks and stops: CLI, console, MCP, story.

An operator once read "checks 3/20 · next check in 12s (provider retry after)" on the live line, "requests 3/20 ·
next poll 10:41:07 (provider_retry_after)" in a log and "next poll 10:41:07 from provider guidance" in the story,
all for one wait. Each phrase lives here once; tests/test_vocabulary.py renders every template and holds them to it.

- a status request sent to the provider is a **check** (`checks 3/20`, `3 of 20 checks`);
- its time is the **next check**, and who chose it is said by `delay_words`;
- a stop the provider made (the job failed, was cancelled, expired) is said as what happened there (`stop_title`),
  never as "needs a decision".
"""

from __future__ import annotations

from datetime import timedelta

from .reasons import DelaySource, StopReason

__all__ = [
    "DELAY_WORDS",
    "checks_of",
    "checks_used",
    "delay_words",
    "plural",
    "span_words",
    "stop_title",
]

DELAY_WORDS: dict[str, str] = {
    DelaySource.PROVIDER_RETRY_AFTER.value: "provider's Retry-After",
    DelaySource.PROVIDER_POLL_HINT.value: "provider's hint",
    DelaySource.PROVIDER_ESTIMATE.value: "provider's estimate",
    DelaySource.LOCAL_BACKOFF.value: "backoff",
    DelaySource.LEARNT.value: "learnt schedule",
    DelaySource.MANUAL_EXTENSION.value: "extension",
    DelaySource.CREDENTIAL_RECHECK.value: "credential recheck",
    DelaySource.PROVIDER_PUSH.value: "provider's push",
}
"""Who chose a next check's time, by `DelaySource` value (a stored event carries the value as text)."""

_STOP_TITLES = {
    StopReason.JOB_FAILED: "External job failed",
    StopReason.JOB_CANCELLED: "External job was cancelled",
    StopReason.JOB_EXPIRED: "External job expired",
}


def delay_words(source: DelaySource | str | None) -> str:
    """`provider's Retry-After`: who chose the time of the next check. An unknown value (a newer
    version's, in an old log) reads as itself with spaces; None as `?`."""
    if source is None:
        return "?"
    value = source.value if isinstance(source, DelaySource) else str(source)
    return DELAY_WORDS.get(value, value.replace("_", " "))


def plural(count: int, noun: str, many: str | None = None) -> str:
    """`1 minute`, `2 minutes`, `0 checks`: a count with its noun in the right number."""
    return f"{count} {noun if count == 1 else (many or noun + 's')}"


def checks_used(used: int, allowed: int) -> str:
    """`checks 3/20`: the compact form, for a line that is redrawn or logged."""
    return f"checks {used}/{allowed}"


def checks_of(used: int, allowed: int) -> str:
    """`3 of 20 checks`: the form of a sentence."""
    return f"{used} of {plural(allowed, 'check')}"


def span_words(span: timedelta) -> str:
    """`1 hour 5 minutes`, `1 minute`, `45 seconds`: a length of time a person reads (not a contract's `1h5m`),
    to the largest two units."""
    seconds = max(0, int(span.total_seconds()))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        plural(value, unit)
        for value, unit in ((days, "day"), (hours, "hour"), (minutes, "minute"), (secs, "second"))
        if value
    ]
    return " ".join(parts[:2]) if parts else "0 seconds"


def stop_title(reason: StopReason | None, *, cancel_request: bool = False) -> str:
    """The first line of a decision request: what happened at the provider when the provider ended the job
    (`External job failed`), else that a person is needed."""
    if cancel_request:
        return "An agent asks to cancel an external job"
    if reason is not None and reason in _STOP_TITLES:
        return _STOP_TITLES[reason]
    return "External job needs a decision"
