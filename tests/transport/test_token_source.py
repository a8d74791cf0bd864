"""A slow credential source's slot (`token_source.Slot`), driven by a clock the test moves and runs the test lets
finish: ahead of need, one run at a time, a failure met at once for a while, and nobody waits who need not.

Real token commands, their caps and their process groups are in tests/transport/test_credentials.py; a worker's lanes
with
a hanging command in tests/e2e/test_worker_lanes.py.
"""

from __future__ import annotations

import threading

import pytest

from pollwarden.transport.token_source import RETRY_AFTER, CredentialError, Slot

TTL = 60.0
GUARD = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Source:
    """A source whose runs each wait until the test lets them finish with a token, or a failure."""

    def __init__(self) -> None:
        self.started = threading.Semaphore(0)
        self.answers: list[str | CredentialError] = []
        self.go = threading.Semaphore(0)
        self.runs = 0
        self.lock = threading.Lock()

    def __call__(self) -> str:
        with self.lock:
            self.runs += 1
        self.started.release()
        assert self.go.acquire(timeout=GUARD), "the test never let the run finish (a guard)"
        answer = self.answers.pop(0)
        if isinstance(answer, CredentialError):
            raise answer
        return answer

    def finish(self, answer: str | CredentialError) -> None:
        assert self.started.acquire(timeout=GUARD), "no run started (a guard)"
        self.answers.append(answer)
        self.go.release()


def _wait_in_thread(slot: Slot, source: Source, clock: Clock) -> tuple[threading.Thread, list[object]]:
    got: list[object] = []

    def wait() -> None:
        try:
            got.append(slot.wait(source, clock, TTL))
        except CredentialError as exc:
            got.append(exc)

    thread = threading.Thread(target=wait)
    thread.start()
    return thread, got


def test_a_token_near_its_end_is_used_while_its_refresh_runs_in_the_background() -> None:
    slot, source, clock = Slot(), Source(), Clock()
    assert slot.look(source, clock, TTL, 1.0) is None  # nothing yet: a run is started, nobody waits for it
    source.finish("token-1")
    assert slot.wait(source, clock, TTL) == "token-1"
    clock.now += TTL * 0.8  # past three quarters of its ttl: refreshed ahead of need
    assert slot.look(source, clock, TTL, 1.0) == "token-1"
    assert slot.look(source, clock, TTL, 1.0) == "token-1"
    source.finish("token-2")
    assert source.runs == 2  # one refresh, not one per look
    thread, got = _wait_in_thread(slot, source, clock)  # ends once the refresh is in, or at once with token-1
    thread.join(GUARD)
    assert got in (["token-1"], ["token-2"])
    clock.now += TTL * 0.3  # token-1's ttl is over: only the refreshed one is usable
    assert slot.wait(source, clock, TTL) == "token-2" and source.runs == 2


def test_everyone_who_needs_a_token_waits_for_the_one_run_under_way() -> None:
    slot, source, clock = Slot(), Source(), Clock()
    waiting = [_wait_in_thread(slot, source, clock) for _ in range(5)]
    source.finish("shared-token")
    for thread, got in waiting:
        thread.join(GUARD)
        assert got == ["shared-token"]
    assert source.runs == 1


def test_a_failed_run_is_met_at_once_for_a_while_then_the_source_runs_again() -> None:
    slot, source, clock = Slot(), Source(), Clock()
    thread, got = _wait_in_thread(slot, source, clock)
    source.finish(CredentialError("[auth].token_command: 'print-token' exited with status 3"))
    thread.join(GUARD)
    assert [str(exc) for exc in got] == ["[auth].token_command: 'print-token' exited with status 3"]
    # Within the window: met at once, no new run (a worker steps the operations, each stopped with it).
    failure = slot.look(source, clock, TTL, 1.0)
    assert isinstance(failure, CredentialError) and "status 3" in str(failure)
    with pytest.raises(CredentialError, match="status 3"):
        slot.wait(source, clock, TTL)
    assert source.runs == 1
    clock.now += RETRY_AFTER
    assert slot.look(source, clock, TTL, 1.0) is None  # run again, in the background
    source.finish("token-after")
    assert slot.wait(source, clock, TTL) == "token-after" and source.runs == 2


def _holding(token: str) -> tuple[Slot, Source, Clock]:
    """A slot whose first run brought `token`."""
    slot, source, clock = Slot(), Source(), Clock()
    thread, got = _wait_in_thread(slot, source, clock)
    source.finish(token)
    thread.join(GUARD)
    assert got == [token]
    return slot, source, clock


def test_a_401_drops_the_token_and_the_next_look_runs_the_source() -> None:
    slot, source, clock = _holding("rejected-token")
    slot.drop()
    assert slot.look(source, clock, TTL, 1.0) is None
    source.finish("accepted-token")
    assert slot.wait(source, clock, TTL) == "accepted-token" and source.runs == 2


def test_a_token_about_to_end_is_not_ready_for_a_batch_but_still_sent_by_one_that_looked_in_time() -> None:
    """`ready` wants a margin left (a batch applies the token a moment after it looked), `wait` takes what is left."""
    slot, source, clock = _holding("short-lived")
    clock.now += TTL - 0.5
    assert slot.look(source, clock, TTL, 1.0) is None  # its refresh is under way: the contract is passed over
    assert slot.look(source, clock, TTL, 0.0) == "short-lived"
    source.finish("next")
    assert slot.wait(source, clock, TTL) in ("short-lived", "next")
