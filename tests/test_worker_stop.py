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
from pathlib import Path

from pollwarden.audit import load_or_create_keys
from pollwarden.foreground import stop_signals
from pollwarden.store.open import open_store
from pollwarden.worker import JsonLog, Worker

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
