"""The contract's `[[rate_limit]]` signals: answers that mean "slow down" (or "a person must pay") besides a 429.

GitHub says a spent rate limit with 403 and `x-ratelimit-remaining: 0`, AWS with a 400 whose body is
`{"__type": "ThrottlingException"}`, OpenAI a quota that is gone with a 429 `insufficient_quota` that no
waiting fixes. A signal names the status codes and a header or body predicate; observe tries them in order
before its status-code table. Reading them is strict like every other table; evaluating them is observe's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from .reader import Reader, check_token


class ResetFormat(StrEnum):
    EPOCH_SECONDS = "epoch_seconds"
    SECONDS = "seconds"
    MILLISECONDS = "milliseconds"
    DURATION = "duration"
    """Seconds with an `s` (`"30s"`, `"1.5s"`): how a protobuf Duration is written in JSON (Google's RetryInfo)."""


class Meaning(StrEnum):
    RATE_LIMITED = "rate_limited"
    AUTHORIZATION_DENIED = "authorization_denied"
    """A quota or billing answer: waiting does not help, a person must act (pay, raise the quota)."""


@dataclass(frozen=True)
class RateLimitSignal:
    status: tuple[int, ...]
    header: str | None = None
    """Lower-cased, as `Response.headers` keys are."""
    equals: str | None = None
    body: str | None = None
    """A JMESPath predicate over the parsed JSON body; kept as text (the compiled form has no equality)."""
    reset_header: str | None = None
    reset_body: str | None = None
    """A JMESPath expression over the JSON body naming the reset (Google: `error.details[].retryDelay`)."""
    reset: ResetFormat | None = None
    means: Meaning = Meaning.RATE_LIMITED
    min_wait: timedelta | None = None
    """The least the provider asks for after this answer ("wait for at least one minute before retrying", GitHub's
    secondary limit): a floor under the next poll, with or without a reset, that no schedule shortens."""

    def to_json(self) -> dict[str, Any]:
        """For the fingerprint: what the signal means, in a stable form."""
        return {
            "status": list(self.status),
            "header": self.header,
            "equals": self.equals,
            "body": self.body,
            "reset_header": self.reset_header,
            **({"reset_body": self.reset_body} if self.reset_body is not None else {}),
            "reset": None if self.reset is None else self.reset.value,
            "means": self.means.value,
            # Only when used, so every older signal (and the fingerprint it is part of) stays what it was.
            **({"min_wait": self.min_wait.total_seconds()} if self.min_wait is not None else {}),
        }


_KEYS = {"status", "header", "equals", "body", "reset_header", "reset_body", "reset", "means", "min_wait"}
MAX_SIGNALS = 32
MAX_MIN_WAIT = timedelta(days=1)
"""Longer than any provider asks between two requests; a minimum past it is a typo, refused at load."""


def parse_rate_limits(r: Reader) -> tuple[RateLimitSignal, ...]:
    if "rate_limit" not in r.data:
        return ()
    raw = r.data["rate_limit"]
    if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
        raise r.fail("rate_limit", "must be an array of tables, each written [[rate_limit]]")
    if len(raw) > MAX_SIGNALS:
        raise r.fail("rate_limit", f"at most {MAX_SIGNALS} signals")
    return tuple(_signal(Reader(r.source, item, f"rate_limit {n}")) for n, item in enumerate(raw, start=1))


def _signal(s: Reader) -> RateLimitSignal:
    s.only(_KEYS)
    status = s.data.get("status")
    if (
        not isinstance(status, list)
        or not status
        or not all(isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599 for code in status)
    ):
        raise s.fail("status", "required: a non-empty list of HTTP error codes from 400 to 599, like [403, 429]")
    if 401 in status:
        raise s.fail("status", "401 means the credential was refused; it cannot be a rate-limit signal")
    header = s.text("header")
    if header is not None:
        check_token(s, "header", header)
    equals = s.text("equals", allow_empty=True)
    if equals is not None and header is None:
        raise s.fail("equals", "needs header = NAME: it compares that header's value")
    body = s.expression("body")
    reset_header = s.text("reset_header")
    if reset_header is not None:
        check_token(s, "reset_header", reset_header)
    reset_body = s.expression("reset_body")
    reset_text = s.text("reset")
    if reset_text is not None and reset_text not in {f.value for f in ResetFormat}:
        raise s.fail("reset", f"must be 'epoch_seconds', 'seconds', 'milliseconds' or 'duration', got {reset_text!r}")
    named = reset_header is not None or reset_body is not None
    if (reset_text is None) == named:
        raise s.fail(
            "reset" if reset_text is None else "reset_header",
            "reset says the form of reset_header or reset_body: give reset with one of them",
        )
    means_text = s.text("means") or Meaning.RATE_LIMITED.value
    if means_text not in {m.value for m in Meaning}:
        raise s.fail("means", f"must be 'rate_limited' or 'authorization_denied', got {means_text!r}")
    means = Meaning(means_text)
    if means is Meaning.AUTHORIZATION_DENIED and named:
        raise s.fail("reset_header", "a signal that means authorization_denied stops; it has no reset time")
    min_wait = s.duration("min_wait", timedelta(0), positive=True) if "min_wait" in s.data else None
    if min_wait is not None and means is Meaning.AUTHORIZATION_DENIED:
        raise s.fail("min_wait", "a signal that means authorization_denied stops; there is no next poll to delay")
    if min_wait is not None and min_wait > MAX_MIN_WAIT:
        raise s.fail("min_wait", "must be at most 24h: it is the least wait between two requests")
    return RateLimitSignal(
        status=tuple(status),
        header=None if header is None else header.lower(),
        equals=equals,
        body=body,
        reset_header=None if reset_header is None else reset_header.lower(),
        reset_body=reset_body,
        reset=None if reset_text is None else ResetFormat(reset_text),
        means=means,
        min_wait=min_wait,
    )
