"""stamina's `retry_context` around a status call that raises while the job is pending.

Docs: https://stamina.hynek.me/en/stable/api.html (`stamina.retry_context`, `stamina.retry`): retries happen
on exceptions only, so the status call raises `StillPending` while the state is not terminal. `on` is a
*backoff hook*, the form the API docs give for HTTP: retry transport errors, 429 and 5xx, not other 4xx, and
return the Retry-After value (seconds or HTTP-date) as the custom backoff when the answer carries one. The
backoff itself is stamina's default (wait_initial 0.1 s, wait_max 5 s, wait_jitter 1 s, base 2); the bound
is `timeout=deadline` with `attempts=None` (the default of 10 attempts would give up on any job longer than
about 25 s, which is not what a poller wants).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import stamina

from .common import (
    FAILURE,
    TERMINAL,
    Counter,
    PeerConfig,
    PeerResult,
    body_result,
    body_state,
    counting_client,
    describe,
    retry_after_seconds,
)


class StillPending(Exception):
    """The job is not done yet: the only way to make stamina ask again."""


def backoff_hook(exc: Exception) -> bool | float:
    if isinstance(exc, StillPending):
        return True
    if isinstance(exc, httpx.HTTPStatusError):
        code = exc.response.status_code
        if code == 429 or code >= 500:
            wait = retry_after_seconds(exc.response.headers.get("Retry-After"))
            return wait if wait is not None else True
        return False
    return isinstance(exc, httpx.TransportError)


def prepare(config: PeerConfig) -> Callable[[], PeerResult]:
    counter = Counter()
    client = counting_client(counter)
    s = config.scale

    def run() -> PeerResult:
        body: Any = None
        with client:
            try:
                for attempt in stamina.retry_context(
                    on=backoff_hook,
                    attempts=None,
                    timeout=config.deadline,
                    wait_initial=0.1 * s,
                    wait_max=5.0 * s,
                    wait_jitter=1.0 * s,
                ):
                    with attempt:
                        response = client.get(config.status_url)
                        response.raise_for_status()
                        body = response.json()
                        if body_state(body) not in TERMINAL:
                            raise StillPending(str(body_state(body)))
            except Exception as exc:
                return PeerResult("stop", describe(exc), attempts=counter.value)
        state = body_state(body)
        if state in FAILURE:
            return PeerResult("failure", str(state), attempts=counter.value)
        return PeerResult("success", str(state), body_result(body), attempts=counter.value)

    return run
