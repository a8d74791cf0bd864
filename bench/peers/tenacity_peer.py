"""tenacity around a status call, as its documentation shows it.

Docs: https://tenacity.readthedocs.io/en/latest/ ("Whether to retry": `retry_if_result`; "Waiting before
retrying": `wait_exponential(multiplier=1, min=4, max=10)`, the docs' own example; "Stopping":
`stop_after_delay`). The status function raises for HTTP errors (`raise_for_status`) and returns the body.
Retried: a result whose state is not terminal ("until done", the usual predicate), and transient errors
(transport errors, 429, 5xx) via `retry_if_exception`. Stop: `stop_after_delay(deadline)`. tenacity has no
notion of Retry-After.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from tenacity import RetryError, Retrying, retry_if_exception, retry_if_result, stop_after_delay, wait_exponential

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
)


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code == 429 or exc.response.status_code >= 500
    return isinstance(exc, httpx.TransportError)


def not_done(body: Any) -> bool:
    return body_state(body) not in TERMINAL


def prepare(config: PeerConfig) -> Callable[[], PeerResult]:
    counter = Counter()
    client = counting_client(counter)
    s = config.scale
    retrying = Retrying(
        retry=retry_if_result(not_done) | retry_if_exception(is_transient),
        wait=wait_exponential(multiplier=1 * s, min=4 * s, max=10 * s),
        stop=stop_after_delay(config.deadline),
    )

    def fetch() -> Any:
        response = client.get(config.status_url)
        response.raise_for_status()
        return response.json()

    def run() -> PeerResult:
        with client:
            try:
                body = retrying(fetch)
            except RetryError as exc:
                last = exc.last_attempt
                why = describe(last.exception() or exc) if last.failed else f"state {body_state(last.result())}"
                return PeerResult("stop", f"RetryError (stop_after_delay), last: {why}", attempts=counter.value)
            except Exception as exc:
                return PeerResult("stop", describe(exc), attempts=counter.value)
        state = body_state(body)
        if state in FAILURE:
            return PeerResult("failure", str(state), attempts=counter.value)
        return PeerResult("success", str(state), body_result(body), attempts=counter.value)

    return run
