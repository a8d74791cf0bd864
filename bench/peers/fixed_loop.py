"""The hand-written fixed-interval loop: `while True: get; sleep(10)`.

Configured as it is usually written: one GET, stop when the state is terminal, otherwise (including any error
status or a refused connection) sleep 10 s and ask again. No deadline, no budget, no Retry-After.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from .common import FAILURE, Counter, PeerConfig, PeerResult, body_result, body_state, counting_client

INTERVAL = 10.0


def prepare(config: PeerConfig) -> Callable[[], PeerResult]:
    counter = Counter()
    client = counting_client(counter)
    return lambda: run(config, client, counter)


def run(config: PeerConfig, client: httpx.Client, counter: Counter) -> PeerResult:
    with client:
        while True:
            try:
                response = client.get(config.status_url)
                if response.status_code == 200:
                    body = response.json()
                    state = body_state(body)
                    if state == "succeeded":
                        return PeerResult("success", state, body_result(body), attempts=counter.value)
                    if state in FAILURE:
                        return PeerResult("failure", str(state), attempts=counter.value)
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(INTERVAL * config.scale)
