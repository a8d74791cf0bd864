"""A server run in the foreground of a command (`console`, `simulate`) until Ctrl-C or SIGTERM stops it."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any


@contextmanager
def stop_signals() -> Iterator[threading.Event]:
    """SIGTERM and SIGINT set the yielded event during the block (main thread only), then the old handlers return.

    SIGINT explicitly too: a process started in the background by a shell inherits SIGINT ignored, and Python
    then installs no KeyboardInterrupt handler, so Ctrl-C (or `kill -INT`) would do nothing.
    """
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    previous: dict[signal.Signals, Callable[[int, FrameType | None], Any] | int | None] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, on_signal)
    try:
        yield done
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def wait_for(done: threading.Event) -> None:
    """Block until `done` is set, or until Ctrl-C where no handler of ours is installed."""
    with suppress(KeyboardInterrupt):
        while not done.wait(0.5):
            pass
