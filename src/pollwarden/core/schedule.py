"""When to ask again: capped exponential backoff with jitter, under the provider's signals (R7–R10, R23–R24).

Randomness is handed in as one number `u` in [0, 1), so a decision is reproducible from its audit record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .contract.parse import Schedule
from .reasons import Jitter

MAX_RETRY_AFTER = timedelta(days=366)
RATE_LIMIT_GROWTH = 4
"""Without Retry-After a 429 multiplies the raw delay by 4 per consecutive 429 (R24: 'grow sharply')."""


@dataclass(frozen=True)
class Rejection:
    """Provider guidance that was not followed, and why: it goes into the audit (R9)."""

    source: str
    value: str
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "value": self.value, "why": self.why}


def raw_delay(schedule: Schedule, attempt: int, *, rate_limited: int = 0) -> timedelta:
    """R7: raw = min(max, base * 2^attempt); consecutive 429s multiply it further, still capped."""
    base = schedule.base_delay.total_seconds()
    cap = schedule.max_delay.total_seconds()
    exponent = max(0, attempt) + (math.log2(RATE_LIMIT_GROWTH) * max(0, rate_limited))
    # Compare exponents rather than computing 2**attempt, so a huge attempt cannot overflow.
    if exponent >= 64 or base * (2.0**exponent) >= cap:
        return schedule.max_delay
    return timedelta(seconds=base * (2.0**exponent))


def jittered(schedule: Schedule, raw: timedelta, u: float) -> timedelta:
    """Bounded jitter keeps at least half the delay, so a fleet never degenerates into near-zero retries."""
    if not 0.0 <= u < 1.0:
        raise ValueError(f"jitter draw must be in [0, 1), got {u}")
    low = 0.5 if schedule.jitter is Jitter.BOUNDED else 0.0
    return raw * (low + (1.0 - low) * u)


def shorten(text: str) -> str:
    """A provider's value as a rejection shows it: at most 80 characters, so a hostile header cannot flood the log."""
    return text if len(text) <= 80 else text[:77] + "..."


def parse_retry_after(value: str, received_at: datetime) -> datetime | Rejection:
    """RFC 9110 §10.2.3: delay-seconds or an HTTP-date; either becomes an absolute earliest time."""
    text = value.strip()
    shown = shorten(text)
    # RFC 9110 delay-seconds is 1*DIGIT, ASCII only: str.isdigit() alone also accepts '²' (int() raises) and '１２'.
    if text.isascii() and text.isdigit():
        seconds = int(text) if len(text) <= 12 else None
        if seconds is None or timedelta(seconds=seconds) > MAX_RETRY_AFTER:
            return Rejection("Retry-After", shown, "absurdly far in the future")
        return received_at + timedelta(seconds=seconds)
    if text.startswith("-") and text[1:].isascii() and text[1:].isdigit():
        return Rejection("Retry-After", shown, "negative delay")
    # The email package (with socket, calendar and locale) is loaded by the first HTTP-date, not by every import
    # of the core: most Retry-After values are delay-seconds.
    from email.utils import parsedate_to_datetime

    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return Rejection("Retry-After", shown, "neither delay-seconds nor an HTTP-date")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    if moment - received_at > MAX_RETRY_AFTER:
        return Rejection("Retry-After", shown, "absurdly far in the future")
    # A date in the past means "now": the floor is the time it arrived.
    return max(moment.astimezone(UTC), received_at)
