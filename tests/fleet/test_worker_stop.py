"""The worker's main thread hears a stop signal whichever thread the kernel hands it to.

A process-directed signal goes to any thread that does not block it; the kernel passes over the main thread
when a signal is pending on it already (a burst of SIGINT from a terminal, `timeout` and a supervisor at once).
Python runs the handler only in the main thread, once it runs Python code again: a main thread blocked in an
untimed join of the lanes, whose lanes wait for the stop, never did.
"""

from __future__ import annotations

import io
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType

import pytest

from pollwarden.audit import load_or_create_keys
from pollwarden.fleet.worker import JsonLog, Worker
from pollwarden.foreground import stop_signals
from pollwarden.store.open import open_store

GUARD = 60.0


def test_a_stop_signal_caught_on_another_thread_stops_the_worker(tmp_path: Path) -> None:
    worker = Worker(
        lambda: open_store(
            tmp_path / "pollwarden.db", keys=load_or_create_keys(tmp_path), trusted_checkpoint_path=None
        ),
        owner="worker-1",
        concurrency=2,
        idle_sleep=GUARD,  # the lanes sleep on the stop event, as with nothing due
        log=JsonLog(io.StringIO(), worker="worker-1"),
    )
    stopped: list[bool] = []

    def signal_this_thread() -> None:
        # Once the lanes are asleep, SIGINT to this thread, not the main one: its handler (a pipe write) runs in
        # the main thread only when that runs Python code again.
        stopped.append(worker.stop.wait(0.3))
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    other = threading.Thread(target=signal_this_thread, daemon=True)
    hung = threading.Event()

    def give_up() -> None:  # a hang is a failure below, not a stalled suite
        hung.set()
        worker.stop.set()

    guard = threading.Timer(GUARD, give_up)
    guard.start()
    try:
        with stop_signals(worker.stop):
            other.start()
            worker.run()
    finally:
        guard.cancel()
    assert stopped == [False]  # nothing had stopped it before the signal
    assert not hung.is_set(), "the worker never heard the signal another thread caught"


class _Hangup(BaseException):
    """What an interrupt the worker's stop signals do not cover (SIGHUP, the CLI's `Interrupted`) raises."""


def test_an_interrupt_of_the_wait_still_waits_for_the_batch_in_flight(tmp_path: Path) -> None:
    """On Python 3.11 a `Thread.join` that an interrupt ends marks the thread it waited for as ended while it runs
    on: the worker then stopped waiting for a lane in the middle of its batch, and left with its leases held."""
    started, release = threading.Event(), threading.Event()
    finished: list[bool] = []

    class Busy(Worker):
        def run_once(self, pool: ThreadPoolExecutor) -> int:  # a batch in flight until released
            started.set()
            release.wait(GUARD)
            finished.append(release.is_set())
            return 1

    worker = Busy(
        lambda: open_store(
            tmp_path / "pollwarden.db", keys=load_or_create_keys(tmp_path), trusted_checkpoint_path=None
        ),
        owner="worker-1",
        concurrency=1,  # one lane: the one the interrupted wait was waiting for
        log=JsonLog(io.StringIO(), worker="worker-1"),
    )
    main = threading.get_ident()

    def hang_up(signum: int, frame: FrameType | None) -> None:
        raise _Hangup

    def interrupt_then_release() -> None:
        started.wait(GUARD)
        signal.pthread_kill(main, signal.SIGALRM)
        worker.stop.wait(GUARD)  # set by the worker once the interrupt reached it
        time.sleep(0.2)  # a wait that did not wait for the lane has returned by now; one that does, does not care
        release.set()

    previous = signal.signal(signal.SIGALRM, hang_up)
    helper = threading.Thread(target=interrupt_then_release, daemon=True)
    try:
        helper.start()
        with pytest.raises(_Hangup):
            worker.run()
        assert finished == [True], "the worker stopped waiting for a lane still in its batch"
    finally:
        signal.signal(signal.SIGALRM, previous)
        release.set()
        helper.join(GUARD)
        worker.close()
