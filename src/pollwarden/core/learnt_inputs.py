"""What a learnt schedule reads from outside, parsed hostile (issue 26): the key its samples are kept under and the
provider's own estimate of when a job will end. Pure: a document in, a value or a rejection out.

The key (`[schedule] learn_key`, a JMESPath over the submitted body or the first answer) names a kind of job (a
model, an endpoint, a size class): only a short scalar is a key. Anything else (an object, a list, a text longer
than `MAX_KEY` or with control characters, a value holding the credential or the client's scrub mark) is not
kept, and the answer's trail says why; the operation then learns from its contract's whole history.

The estimate (`[fields] estimated_completion_at`) moves a check that would come long before it, or long after,
to the estimate itself: an estimate in the past, more than `MAX_AHEAD` away or not a time is ignored, and counted
as a rejected hint is (`guidance_rejected`).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any, Protocol

from .contract.parse import Contract
from .durations import DurationError, format_rfc3339, parse_timestamp
from .expr import lookup
from .schedule import Rejection, shorten
from .scrub import MARK

MAX_KEY = 64
"""Characters a key value may have: a model or a size class is short; a longer value is an id, not a kind."""
MAX_AHEAD = timedelta(days=366)
"""An estimate further away than this is absurd (as a hint is): ignored."""


class HoldsSecret(Protocol):
    def found_in(self, text: str) -> bool: ...


def key_value(expression: str, document: Any, secret: HoldsSecret | None = None) -> tuple[str | None, Rejection | None]:
    """The key `expression` names in `document`, as text: None when absent (no rejection) or refused (with one).
    The refused value is shown cut to 80 characters, and never when it holds the credential."""
    found = lookup(expression, document)
    if found.problem is not None:
        return None, Rejection(f"learn_key {expression}", "", f"{found.problem}; {NOT_USED}")
    if not found.present:
        return None, None
    value = found.value

    def refused(why: str, shown: str | None = None) -> tuple[None, Rejection]:
        # Shown as other hostile values are: cut to 80 characters, and never a control character (escaped).
        text = str(value) if shown is None else shown
        return None, Rejection(f"learn_key {expression}", shorten(_escaped(text)), f"{why}; {NOT_USED}")

    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            return refused("not a finite number")
        text = repr(value)
    elif isinstance(value, str):
        text = value
    else:
        return refused(f"a JSON {'object' if isinstance(value, dict) else 'array'}, not a string or number", "")
    if MARK in text or (secret is not None and secret.found_in(text)):
        return refused("holds the credential: never kept", "[secret]")
    if not text.strip():
        return refused("empty")
    if len(text) > MAX_KEY:
        return refused(f"longer than {MAX_KEY} characters: an id, not a kind of job")
    if _controls(text):
        return refused("holds control characters")
    return text, None


NOT_USED = "not used: this job learns from its contract's whole history"
"""What a refused key's rejection adds: the operation goes on, planned as one with no key."""


def _controls(text: str) -> bool:
    return any(ord(ch) < 32 or 127 <= ord(ch) < 160 or ch in "\u2028\u2029" for ch in text)


def _escaped(text: str) -> str:
    return text.encode("unicode_escape").decode("ascii") if _controls(text) else text


def estimate_at(contract: Contract, document: Any, at: datetime) -> tuple[datetime | None, tuple[Rejection, ...]]:
    """The provider's estimate of when the job ends, read at `at`: None when the contract reads none, the answer
    has none, or it is not to be believed (then with the rejection that says why)."""
    path = contract.fields.estimated_completion_at
    if path is None:
        return None, ()
    found = lookup(path, document)
    if found.problem is not None:
        return None, (Rejection(path, "", found.problem),)
    if not found.present:
        return None, ()
    shown = shorten(str(found.value))
    try:
        moment = parse_timestamp(found.value, contract.timestamps.estimated_completion_at)
    except (DurationError, OverflowError, ValueError):
        return None, (Rejection(path, shown, "not a time (estimated completion)"),)
    if moment < at:
        return None, (Rejection(path, shown, "an estimated completion in the past"),)
    if moment - at > MAX_AHEAD:
        return None, (Rejection(path, shown, "an estimated completion absurdly far away"),)
    return moment, ()


def near_estimate(when: datetime, estimate: datetime, now: datetime, slack: timedelta, cap: timedelta) -> datetime:
    """A check at `when`, placed by the estimate: one more than `slack` (the lag target) before it, or more than
    `slack` after it, is moved onto it (a job that ends as estimated is then found at once), never further from
    `now` than `cap` (`max_delay`: the estimate is a guess, no promise)."""
    if estimate - slack <= when <= estimate + slack:
        return when
    return min(estimate, now + cap)


def estimate_words(estimate: datetime) -> str:
    return f"placed by the provider's estimated completion {format_rfc3339(estimate)}"
