"""The turn to write one SQLite file, handed over promptly between pollwarden processes.

SQLite has one write lock per file, and a connection that misses it sleeps in SQLite's busy handler at fixed
steps (1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100 ms) whatever the holder does: with two worker processes on
one file each spent a third to a half of its wall time asleep in BEGIN IMMEDIATE while the other's commits took
3-6 ms (docs/performance.md, "More than one process on one SQLite file"). So every pollwarden writer of a file takes
an advisory lock (flock) on `<db>-writer.lock` just before BEGIN IMMEDIATE and gives it back after its COMMIT
or ROLLBACK, and waits for it in steps of at most `MAX_PAUSE`:

- **SQLite's lock stays the truth**: the turn only orders pollwarden's writers among themselves; BEGIN
  IMMEDIATE still runs, and still waits in the busy handler for any other writer (the sqlite3 shell, a backup);
- **bounded**: a holder that is stopped (SIGSTOP, a debugger) holds the turn, not forever its waiters: after
  `BUSY_TIMEOUT_S` of waiting the write is refused as for SQLite's lock, nothing written;
- **kill -9**: the kernel drops a flock with the last descriptor of its open file, so a killed holder's turn
  passes to the next writer at once (SQLite recovers the file as it always does); the file itself stays, empty;
- **private**: created 0600 like the database (it holds nothing, but nobody else has business locking it);
- **not a queue**: a writer that has just given the turn may take it again before a waiter looks (as with the
  busy handler); two processes' batches alternated in practice (waits of 5-9 ms on average, at most 206 ms
  measured, against up to 1.7 s in the busy handler);
- **fork**: a child closes its inherited descriptors (`forget`), so a parent killed later still frees its turn;
  an exec'd child never inherits one (Python's descriptors are not inheritable).
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from ..home.directory import create_private

__all__ = ["MAX_PAUSE", "Turn"]

FIRST_PAUSE = 0.0001
MAX_PAUSE = 0.001
"""A waiter looks again at least every millisecond: a batch holds the turn for 3-10 ms (its fsync), so a waiter
starts at most a millisecond after the holder let go, where SQLite's busy handler slept up to 100 ms."""


class Turn:
    """The write turn of one database file for one writer connection (its own open file: one turn each)."""

    def __init__(self, db: Path) -> None:
        self.path = db.with_name(db.name + "-writer.lock")
        self._fd: int | None = None
        try:
            create_private(self.path)
            fd = os.open(self.path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            # A directory this user cannot write (a read-only copy being verified) has no -wal either, so no
            # write would succeed: the turn is skipped and SQLite's own lock (and its refusal) decides.
            return
        if os.fstat(fd).st_uid != os.geteuid():
            # Planted by another user in a shared directory: whoever holds it could stall this user's writes,
            # which the database's own 0600 keeps them from. Skipped; SQLite's lock still orders the writes.
            os.close(fd)
            return
        self._fd = fd

    def take(self, timeout: float) -> bool:
        """Wait for the turn; False after `timeout` seconds (its holder is stopped, or writes without end)."""
        if self._fd is None or self._try():
            return True
        deadline = time.monotonic() + timeout
        pause = FIRST_PAUSE
        while True:
            time.sleep(pause)  # a sleep, not a blocking flock: that one could not be bounded
            if self._try():
                return True
            if time.monotonic() >= deadline:
                return False
            pause = min(pause * 2, MAX_PAUSE)

    def _try(self) -> bool:
        assert self._fd is not None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def give(self) -> None:
        """Unlocking a turn not held is harmless: so this needs no flag an interrupt could leave wrong."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        self.give()
        self.forget()

    def forget(self) -> None:
        """Close the descriptor without unlocking (in a forked child, the lock is the parent's to give)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
