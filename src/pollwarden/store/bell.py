"""The store's bell: one process rings it when it made an operation due early (a provider push), and every
waiter of the same store, in any process, wakes at once and reads its operation again (issue 27).

SQLite: one FIFO per listener in a directory beside the database file (`<file>.bells/`); a ring writes a byte
to each, and a FIFO whose listener is gone (no reader: ENXIO) is removed. PostgreSQL: `LISTEN`/`NOTIFY` on
one channel, so a fleet's waiters on every host hear it. A ring says only "look again": what changed is read
from the store, so a lost or extra ring costs a read, never a wrong step, and polling stays the bound.

Each listener also has a pipe of its own (`poke`), so a thread of the same process can end a wait at once
(a cancelled watch) without a ring to every other listener.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import select
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

CHANNEL = "pollwarden_bell"
"""The PostgreSQL notification channel every store of a database listens on."""


class Listener(Protocol):
    def wait(self, timeout: float) -> bool:
        """Block until rung or poked (True) or `timeout` seconds pass (False)."""
        ...

    def poke(self) -> None:
        """End a wait of this listener at once (from another thread of this process)."""
        ...

    def close(self) -> None: ...


class Bell(Protocol):
    def ring(self) -> None:
        """Wake every listener of this store, in every process; never raises (a push is answered regardless)."""
        ...

    def listen(self) -> Listener: ...


class _Waiter:
    """Waits on one file descriptor the bell writes to, and on its own pipe.

    A close from another thread while a wait is in `select` must not close the descriptors under it (the wait
    would read a closed, or worse a reused, descriptor): the close marks the waiter closed and pokes it, and the
    last wait to leave closes them. A wait or a poke after the close does nothing."""

    def __init__(self, source: int, drain: Callable[[], None], close: Callable[[], None]) -> None:
        self._source = source
        self._drain = drain
        self._close = close
        self._poke_read, self._poke_write = os.pipe()
        os.set_blocking(self._poke_read, False)
        os.set_blocking(self._poke_write, False)
        self._lock = threading.Lock()
        self._waiting = 0
        self._closed = False
        self._released = False

    def wait(self, timeout: float) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._waiting += 1
        try:
            ready, _, _ = select.select([self._source, self._poke_read], [], [], max(0.0, timeout))
            if not ready:
                return False
            with contextlib.suppress(BlockingIOError):
                while os.read(self._poke_read, 512):
                    pass
            if self._source in ready:
                self._drain()
            return not self._closed
        finally:
            with self._lock:
                self._waiting -= 1
                last = self._closed and self._waiting == 0
            if last:
                self._release()

    def poke(self) -> None:
        with self._lock:
            if self._released:
                return
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._poke_write, b"\x01")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            busy = self._waiting > 0
        if busy:
            self.poke()  # the wait in `select` wakes, and closes on its way out
        else:
            self._release()

    def _release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
            for fd in (self._poke_read, self._poke_write):
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._close()


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 4096):
            pass


class FifoBell:
    """SQLite's bell: a FIFO per listener in `directory` (made private to the home's owner)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def ring(self) -> None:
        try:
            names = os.listdir(self.directory)
        except OSError:
            return  # nobody has listened yet
        for name in names:
            if not name.endswith(".fifo"):
                continue
            path = self.directory / name
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # its listener is gone without closing it
                    with contextlib.suppress(OSError):
                        path.unlink()
                continue
            try:
                os.write(fd, b"\x01")
            except OSError:
                pass  # full: it has a ring waiting already
            finally:
                os.close(fd)

    def listen(self) -> Listener:
        self.directory.mkdir(mode=0o700, exist_ok=True)
        path = self.directory / f"{os.getpid()}-{secrets.token_hex(4)}.fifo"
        os.mkfifo(path, 0o600)
        # Read and write: the listener is a writer of its own FIFO too, so `select` never sees end-of-file (a
        # FIFO whose last writer closed reads as ready forever) and a ring's byte stays until read.
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):  # pragma: no cover - the directory is the owner's alone
            os.close(fd)
            raise OSError(f"{path} is not a FIFO")

        def close() -> None:
            with contextlib.suppress(OSError):
                path.unlink()
            with contextlib.suppress(OSError):
                os.close(fd)

        return _Waiter(fd, lambda: _drain(fd), close)


class PostgresBell:
    """PostgreSQL's bell: `NOTIFY` through the store's pool; each listener holds a connection that `LISTEN`s."""

    def __init__(self, notify: Callable[[], None], connect: Callable[[], object]) -> None:
        self._notify = notify
        self._connect = connect

    def ring(self) -> None:
        with contextlib.suppress(Exception):
            self._notify()

    def listen(self) -> Listener:
        import psycopg

        conn = self._connect()
        assert isinstance(conn, psycopg.Connection)
        conn.execute(f"LISTEN {CHANNEL}")

        def drain() -> None:
            with contextlib.suppress(psycopg.Error):
                for _ in conn.notifies(timeout=0):
                    pass

        return _Waiter(conn.pgconn.socket, drain, conn.close)


@contextlib.contextmanager
def listening(bell: Callable[[], Bell], wanted: bool) -> Iterator[Listener | None]:
    """A listener for the block when `wanted` (the contract has a `[push]` table), else None; None too when
    one cannot be made (a home that is not writable, a database that refuses LISTEN): the waiter then keeps
    its schedule, which was always the bound."""
    listener: Listener | None = None
    if wanted:
        with contextlib.suppress(Exception):
            listener = bell().listen()
    try:
        yield listener
    finally:
        if listener is not None:
            listener.close()


STOP_SLICE = 0.25
"""At most this long on the bell before a wait looks at its stop event again (the bell cannot hear an event)."""


def pause(bell: Listener, seconds: float, stop: threading.Event | None = None) -> bool:
    """Wait `seconds` on the bell; True when it rang, or when `stop` was set meanwhile (seen within `STOP_SLICE`)."""
    ends = time.monotonic() + seconds
    while (left := ends - time.monotonic()) > 0:
        if stop is not None and stop.is_set():
            return True
        if bell.wait(left if stop is None else min(left, STOP_SLICE)):
            return True
    return stop is not None and stop.is_set()
