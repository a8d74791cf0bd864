"""Durations as people write them (`500ms`, `90s`, `40m`, `1h30m`) and times as RFC 3339.

One parser for the contract, the CLI and the MCP server, so `40m` means the same everywhere.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from ..errors import PollwardenError

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_MAX_SECONDS = 366 * 86400.0


class DurationError(PollwardenError, ValueError):
    """A duration or timestamp that cannot be used; the message says what was given and what is accepted."""


def parse_duration(text: str) -> timedelta:
    """Parse `1h30m`-style text; a bare number is refused because its unit would be a guess."""
    if not isinstance(text, str):
        raise DurationError(f"expected a duration string like '90s' or '40m', got {type(text).__name__}")
    raw = text.strip().lower()
    if not raw:
        raise DurationError("empty duration; write it like '500ms', '90s', '40m' or '1h30m'")
    pos = 0
    total = 0.0
    seen: set[str] = set()
    for match in _PART.finditer(raw):
        if match.start() != pos:
            break
        unit = match.group(2)
        if unit in seen:
            raise DurationError(f"duration {text!r} repeats the unit {unit!r}")
        seen.add(unit)
        total += float(match.group(1)) * _UNIT_SECONDS[unit]
        pos = match.end()
    if pos != len(raw) or not seen:
        raise DurationError(f"cannot read duration {text!r}; write it like '500ms', '90s', '40m' or '1h30m'")
    if total > _MAX_SECONDS:
        raise DurationError(f"duration {text!r} is longer than a year; that is not a wait, it is a mistake")
    return timedelta(seconds=total)


def format_duration(delta: timedelta) -> str:
    """Render a duration the way it would be written in a contract (`1h30m`, `9s`, `750ms`)."""
    total_ms = round(delta.total_seconds() * 1000)
    sign = "-" if total_ms < 0 else ""
    total_ms = abs(total_ms)
    if total_ms < 1000:
        return f"{sign}{total_ms}ms"
    seconds, ms = divmod(total_ms, 1000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = []
    if hours:
        parts.append(f"{hours}h")
    if minutes:
        parts.append(f"{minutes}m")
    if secs or ms:
        parts.append(f"{secs}.{ms:03d}".rstrip("0").rstrip(".") + "s" if ms else f"{secs}s")
    return sign + "".join(parts)


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC 3339 timestamp; a time without an offset is refused (its zone would be a guess)."""
    if not isinstance(text, str) or len(text) > 64:
        raise DurationError("expected an RFC 3339 timestamp like '2026-04-18T10:20:00Z'")
    raw = text.strip()
    if raw.endswith(("z", "Z")):
        raw = raw[:-1] + "+00:00"
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise DurationError(f"cannot read timestamp {text!r}; expected RFC 3339 like '2026-04-18T10:20:00Z'") from None
    if value.tzinfo is None:
        raise DurationError(f"timestamp {text!r} has no UTC offset; add 'Z' or '+00:00'")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00: the UTC instant is outside datetime's range
        raise DurationError(f"timestamp {text!r} is out of range") from None


TIMESTAMP_FORMATS = ("rfc3339", "epoch_seconds", "epoch_millis")
"""How a provider writes a moment: OpenAI's `expires_at` is Unix seconds, most others RFC 3339."""

_EPOCH_LIMIT = 253_402_300_799  # 9999-12-31T23:59:59Z: later than that is not a moment datetime can hold


def parse_timestamp(value: object, form: str) -> datetime:
    """One moment in the declared form; a value of another JSON type or out of range is refused, not guessed."""
    if form == "rfc3339":
        if not isinstance(value, str):
            raise DurationError("expected an RFC 3339 timestamp string")
        return parse_rfc3339(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        unit = "seconds" if form == "epoch_seconds" else "milliseconds"
        raise DurationError(f"expected {unit} since 1970 as a number")
    seconds = float(value) if form == "epoch_seconds" else float(value) / 1000
    if not 0 <= seconds <= _EPOCH_LIMIT:
        raise DurationError("a Unix time before 1970 or after the year 9999")
    return datetime.fromtimestamp(seconds, UTC)


def format_moment(moment: datetime) -> str:
    """`2026-12-06T18:40:00Z`: a time as a person reads it in `story`, `why` and a decision request, with its date
    and zone, to the second; `why --at` takes it back (`moment_end`)."""
    utc = moment if moment.tzinfo is UTC else moment.astimezone(UTC)
    return utc.isoformat(timespec="seconds").replace("+00:00", "Z")


def moment_end(text: str) -> datetime:
    """The last instant a time a person typed can mean: `18:40:00Z` as `format_moment` printed it stands for that
    whole second (a decision at 18:40:00.4 is "at or before" it), so a time with no fraction is read to the end
    of its second. DurationError as `parse_rfc3339`."""
    moment = parse_rfc3339(text)
    if "." in text or moment.microsecond:
        return moment
    return moment + timedelta(microseconds=999_999)


def format_rfc3339(moment: datetime) -> str:
    """UTC with a `Z`, sub-second digits only when present: the form used in files and JSON."""
    # Most times are already UTC (the database's clock, the batch clock): a conversion per call adds up, about
    # ten formatted times per poll.
    utc = moment if moment.tzinfo is UTC else moment.astimezone(UTC)
    if utc.microsecond:  # kept whole: an audited decision must replay from exactly these times
        return utc.isoformat(timespec="microseconds").replace("+00:00", "Z")
    return utc.isoformat(timespec="seconds").replace("+00:00", "Z")
