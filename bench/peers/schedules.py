"""Each peer's request schedule on a virtual clock, computed from its documented defaults, for the fleet run.

50 agents waiting 5 to 15 minutes cannot be run on the wire in a benchmark that must finish in minutes, so
the fleet section (bench.conformance) replays every peer's schedule against fleet_bench's scripted provider
(`_provider`: running, then succeeded; 503 without Retry-After to everyone during the outage). pollwarden's
and the fixed loop's schedules are fleet_bench's own (`pollwarden_times` drives the real core); the library
peers' are the formulas below, read from the libraries' source and docs (the same defaults their adapters in
this package use), with the fleet's 2 h deadline where a peer takes one. Retries inside a library (a 503)
are requests too, and a peer that raises stops polling: that agent "gave up".
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

DEADLINE = 7200.0
"""The fleet's deadline (fleet_bench's pressure contract has 2 h)."""

Answer = Callable[[float], tuple[int, bool]]
"""The provider at virtual time t: (HTTP status, job succeeded)."""


@dataclass(frozen=True)
class Schedule:
    times: list[float]
    finished: bool
    """True when the agent learned that its job succeeded; False when it gave up (or ran out of deadline)."""


def azure(start: float, answer: Answer, rng: random.Random) -> Schedule:
    """LROBasePolling: the initial GET, an immediate first poll, then every 30 s (no Retry-After in the fleet).

    Each GET goes through RetryPolicy: a 5xx is retried after 0 s, 1.6 s and 3.2 s (backoff 0.8 x 2^(n-1), the
    first retry immediate, 3 status retries); when the fourth answer is still 5xx the poller raises.
    """
    times: list[float] = []

    def call(t: float) -> tuple[float, bool | None]:
        for wait in (0.0, 0.0, 1.6, 3.2):
            t += wait
            times.append(t)
            status, done = answer(t)
            if status < 500:
                return t, done
        return t, None

    t, done = call(start)
    if done is None:
        return Schedule(times, False)
    first = True  # LROPoller polls once at once after the initial response, then waits between polls
    while not done:
        t, done = call(t if first else t + 30.0)
        first = False
        if done is None:
            return Schedule(times, False)
        if t - start > DEADLINE:  # poller.result() has no deadline; stop the model where the others stop
            return Schedule(times, False)
    return Schedule(times, True)


def botocore(start: float, answer: Answer, rng: random.Random) -> Schedule:
    """Waiter: an attempt every 15 s up to MaxAttempts = 2 h // 15 s. Each attempt is a client call with the
    'standard' retry mode: 3 tries, backoff rand x 0.05 s x 2^(n-1) for 5xx. An error answer that no acceptor
    matches ends the wait with WaiterError."""
    times: list[float] = []
    t = start
    for _ in range(int(DEADLINE // 15)):
        for attempt in range(1, 4):
            times.append(t)
            status, done = answer(t)
            if status < 500:
                break
            if attempt == 3:
                return Schedule(times, False)
            t += rng.random() * min(0.05 * 2 ** (attempt - 1), 20.0)
        if done:
            return Schedule(times, True)
        t += 15.0
    return Schedule(times, False)


def _google_sleeps(initial: float, maximum: float, multiplier: float, rng: random.Random) -> Callable[[], float]:
    """google.api_core.retry.exponential_sleep_generator: uniform(0, d), d growing by `multiplier` to `maximum`."""
    state = [min(initial, maximum)]

    def next_sleep() -> float:
        value = rng.uniform(0.0, state[0])
        state[0] = min(state[0] * multiplier, maximum)
        return value

    return next_sleep


def google(start: float, answer: Answer, rng: random.Random) -> Schedule:
    """PollingFuture.result(timeout=2 h): DEFAULT_POLLING sleeps (1 s x1.5 to 20 s, full jitter) between
    refreshes; a 5xx refresh is retried by DEFAULT_RETRY (1 s x2 to 60 s, full jitter, 120 s timeout)."""
    times: list[float] = []
    poll_sleep = _google_sleeps(1.0, 20.0, 1.5, rng)
    t = start
    while t - start <= DEADLINE:
        retry_sleep = _google_sleeps(1.0, 60.0, 2.0, rng)
        first = t
        while True:
            times.append(t)
            status, done = answer(t)
            if status < 500:
                break
            wait = retry_sleep()
            if t + wait - first > 120.0:
                return Schedule(times, False)
            t += wait
        if done:
            return Schedule(times, True)
        t += poll_sleep()
    return Schedule(times, False)


def _retrying(start: float, answer: Answer, wait: Callable[[int], float], *, stop_first: bool) -> Schedule:
    """A retry library's loop: attempt n, then `wait(n)` seconds, until a final 2xx-4xx answer or the 2 h
    limit: checked before the wait is chosen (`stop_first`, tenacity's stop_after_delay), or against the time
    the next attempt would be made (stamina's timeout)."""
    times: list[float] = []
    t, n = start, 0
    while True:
        n += 1
        times.append(t)
        status, done = answer(t)
        if status < 500 and done:
            return Schedule(times, True)
        if stop_first and t - start >= DEADLINE:
            return Schedule(times, False)
        pause = wait(n)
        if not stop_first and t + pause - start > DEADLINE:
            return Schedule(times, False)
        t += pause


def tenacity(start: float, answer: Answer, rng: random.Random) -> Schedule:
    """wait_exponential(multiplier=1, min=4, max=10): after attempt n, max(4, min(2^(n-1), 10)) seconds; 5xx is
    retried like a pending answer; stop_after_delay(2 h)."""
    return _retrying(start, answer, lambda n: max(4.0, min(2.0 ** (n - 1), 10.0)), stop_first=True)


def stamina(start: float, answer: Answer, rng: random.Random) -> Schedule:
    """Defaults: after attempt n, min(5, 0.1 x 2^(n-1) + uniform(0, 1)) seconds; no Retry-After in the fleet's
    503s, so they back off the same way; timeout 2 h."""
    return _retrying(start, answer, lambda n: min(5.0, 0.1 * 2.0 ** (n - 1) + rng.uniform(0.0, 1.0)), stop_first=False)


MODELS: dict[str, Callable[[float, Answer, random.Random], Schedule]] = {
    "azure-core": azure,
    "botocore": botocore,
    "google-api-core": google,
    "tenacity": tenacity,
    "stamina": stamina,
}
