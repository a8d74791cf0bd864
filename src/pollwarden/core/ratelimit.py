"""Matching one answer against the contract's `[[rate_limit]]` signals, and reading the reset time it names.

Kept out of observe so the status-code classification stays one readable table: observe asks `matching` first
and, for a rate limit, `reset_at`. Every predicate is evaluated defensively: a header that is absent, a body
that is not JSON and a JMESPath expression that raises on this body all mean "does not match", never an error
(the answer is the provider's, hostile until parsed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from . import expr
from .contract.signals import RateLimitSignal, ResetFormat
from .schedule import MAX_RETRY_AFTER, Rejection, shorten

_NUMBER = re.compile(r"[0-9]{1,15}(\.[0-9]{1,9})?")
"""ASCII digits only (str.isdigit alone accepts '²'), at most 15 before the point so float() stays exact enough."""


def matching(
    signals: tuple[RateLimitSignal, ...],
    status: int,
    headers: Mapping[str, str],
    document: Callable[[], Any],
) -> tuple[int, RateLimitSignal] | None:
    """The first signal (numbered from 1, as a person counts [[rate_limit]] tables) this answer matches.

    `document` parses the body on first use, so a header-only signal never reads it; it returns None when the
    body is not a JSON object, and then a body predicate does not match."""
    for number, signal in enumerate(signals, start=1):
        if status not in signal.status:
            continue
        if signal.header is not None:
            value = headers.get(signal.header)
            if value is None or (signal.equals is not None and value.strip() != signal.equals):
                continue
        if signal.body is not None and not _holds(signal.body, document()):
            continue
        return number, signal
    return None


def _holds(expression: str, document: Any) -> bool:
    if document is None:
        return False
    found = expr.lookup(expression, document)  # never raises; an expression that fails on this body: no match
    value = found.value if found.problem is None else None
    # JMESPath truth: false, null, "", [] and {} are false; every number (0 included) is true.
    return not (value is None or value is False or (isinstance(value, str | list | dict) and not value))


def reset_at(
    signal: RateLimitSignal, headers: Mapping[str, str], document: Callable[[], Any], at: datetime
) -> datetime | Rejection | None:
    """The time the signal's reset header (else its reset_body expression) names, bounded like Retry-After: at
    most MAX_RETRY_AFTER ahead, a time in the past meaning "now"; None when the answer carries neither."""
    if signal.reset is None:
        return None
    if signal.reset_header is not None and (raw := headers.get(signal.reset_header)) is not None:
        return _moment(signal.reset, signal.reset_header, raw.strip(), at)
    if signal.reset_body is not None and (body := document()) is not None:
        found = expr.lookup(signal.reset_body, body)
        value = found.value if found.problem is None else None
        if isinstance(value, str):
            return _moment(signal.reset, signal.reset_body, value.strip(), at)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return _moment(signal.reset, signal.reset_body, json.dumps(value), at)
        if value is not None:
            return Rejection(signal.reset_body, shorten(json.dumps(value)), f"not a number of {_unit(signal.reset)}")
    return None


def _moment(reset: ResetFormat, source: str, text: str, at: datetime) -> datetime | Rejection:
    shown = shorten(text)
    if text.startswith("-"):
        return Rejection(source, shown, "negative")
    if reset is ResetFormat.DURATION:
        if not text.endswith("s") or not _NUMBER.fullmatch(text[:-1]):
            return Rejection(source, shown, "not a duration in seconds like '30s'")
        text = text[:-1]
    elif not _NUMBER.fullmatch(text):
        return Rejection(source, shown, f"not a number of {_unit(reset)}")
    number = float(text)
    if reset is ResetFormat.EPOCH_SECONDS:
        if number > (at + MAX_RETRY_AFTER).timestamp():
            return Rejection(source, shown, "absurdly far in the future")
        moment = datetime.fromtimestamp(number, UTC)
    else:
        seconds = number / 1000 if reset is ResetFormat.MILLISECONDS else number
        # Compared as a number: 15 digits of seconds is past what a timedelta holds (OverflowError).
        if seconds > MAX_RETRY_AFTER.total_seconds():
            return Rejection(source, shown, "absurdly far in the future")
        moment = at + timedelta(seconds=seconds)
    return max(moment, at)


def _unit(reset: ResetFormat) -> str:
    return {
        ResetFormat.EPOCH_SECONDS: "epoch seconds",
        ResetFormat.SECONDS: "seconds",
        ResetFormat.MILLISECONDS: "milliseconds",
        ResetFormat.DURATION: "seconds",
    }[reset]
