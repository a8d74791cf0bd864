"""A server run in the foreground of a command (`console`, `simulate`) until Ctrl-C or SIGTERM stops it."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any


class SignalRelay:
    """Sets `event` for a signal from a thread of its own: the handler (`handler`) only writes to a pipe.

    A Python signal handler runs in the main thread between two bytecodes, possibly inside the very `with lock:`
    it would enter: `Event.set` takes the event's lock, so a second SIGTERM arriving while the first handler is
    in `set` (Ctrl-C, `timeout` and systemd signal a whole process group, and a supervisor passes it on as
    well), or a signal while the main thread is in `Event.wait`, would wait for that lock for ever."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._thread = threading.Thread(target=self._deliver, name="pollwarden-signals", daemon=True)
        self._thread.start()

    def handler(self, signum: int, frame: FrameType | None) -> None:
        with suppress(BlockingIOError):  # the pipe is full: the event is being set already
            os.write(self._write, b"s")

    def _deliver(self) -> None:
        while os.read(self._read, 512):
            self.event.set()
        os.close(self._read)

    def close(self) -> None:
        os.close(self._write)  # the thread reads the end of the pipe and stops
        self._thread.join()


@contextmanager
def stop_signals(done: threading.Event | None = None, *, then_ignore: bool = False) -> Iterator[threading.Event]:
    """SIGTERM and SIGINT set `done` (a new event unless given) during the block (main thread only), then the old
    handlers return; with `then_ignore`, once a stop was asked for, both are ignored instead (a process that ends
    as asked: the rest of a burst of stop signals to its group must not turn its clean exit into exit 130).

    SIGINT explicitly too: a process started in the background by a shell inherits SIGINT ignored, and Python
    then installs no KeyboardInterrupt handler, so Ctrl-C (or `kill -INT`) would do nothing.
    """
    done = threading.Event() if done is None else done
    previous: dict[signal.Signals, Callable[[int, FrameType | None], Any] | int | None] = {}
    relay: SignalRelay | None = None
    if threading.current_thread() is threading.main_thread():
        relay = SignalRelay(done)
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, relay.handler)
    try:
        yield done
    finally:
        ignore = then_ignore and done.is_set()
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_IGN if ignore else handler if handler is not None else signal.SIG_DFL)
        if relay is not None:
            relay.close()


def wait_for(done: threading.Event) -> None:
    """Block until `done` is set, or until Ctrl-C where no handler of ours is installed."""
    with suppress(KeyboardInterrupt):
        while not done.wait(0.5):
            pass
