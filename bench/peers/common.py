"""What every peer adapter shares: its configuration, its result, the provider's state table, a counting client.

The adapters run in child processes (see `bench.peers.__main__`), one per peer and scenario, so a peer that
never returns can be killed at the harness timeout and a restart can be a real `kill -9` and a fresh process.
Nothing here decides anything for a peer: each adapter maps the provider's answers to its library's model
exactly as that library's documentation shows, and reports what the library then did.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

PENDING = frozenset({"queued", "running"})
"""The provider's in-progress states (the simulator's `queued` and `running`)."""

FAILURE = frozenset({"failed", "cancelled", "expired"})
"""Terminal states that are not success."""

TERMINAL = frozenset({"succeeded"}) | FAILURE
"""What a hand-written poller waits for: "until done" is the form most code (and most tutorials) uses."""

HTTP_TIMEOUT = 5.0
"""Per-request timeout for every peer that lets us set one; the same 5 s as pollwarden's contract."""


@dataclass(frozen=True)
class PeerConfig:
    """One run of one peer against one job. Times are real seconds; `scale` compresses a peer's own delays."""

    peer: str
    base_url: str
    job_id: str
    deadline: float
    scale: float = 1.0
    home: str = ""
    operation_id: str = ""

    @property
    def status_url(self) -> str:
        return f"{self.base_url}/jobs/{self.job_id}"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> PeerConfig:
        data = json.loads(text)
        return cls(**data)


@dataclass
class PeerResult:
    """What the caller of a peer learns, and when.

    outcome: `success` (the peer declared the job done, with `result` if it found one), `failure` (the peer says
    the job ended badly), `stop` (the peer gave up with an error or a timeout), `error` (the adapter crashed).
    """

    outcome: str
    detail: str = ""
    result: str | None = None
    known_at: float = field(default_factory=time.time)
    attempts: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> PeerResult:
        data = json.loads(text)
        return cls(**data)


class Counter:
    """Client-side attempts: the provider cannot count connections it refused, the client can."""

    def __init__(self) -> None:
        self.value = 0

    def hook(self, request: httpx.Request) -> None:
        self.value += 1


def counting_client(counter: Counter) -> httpx.Client:
    return httpx.Client(timeout=HTTP_TIMEOUT, event_hooks={"request": [counter.hook]})


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """RFC 9110 Retry-After, both forms, as seconds from now; None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - (time.time() if now is None else now))
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def body_state(body: Any) -> str | None:
    if isinstance(body, dict):
        state = body.get("state")
        return state if isinstance(state, str) else None
    return None


def body_result(body: Any) -> str | None:
    if isinstance(body, dict):
        result = body.get("result_url")
        return result if isinstance(result, str) and result else None
    return None


def describe(exc: BaseException) -> str:
    """One short line: the exception type and the start of its message (httpx's documentation link cut off)."""
    text = str(exc).split("\nFor more information")[0].replace("\n", " ")
    return f"{type(exc).__name__}: {text[:160]}"
