"""The wall clock, in one place: the core is handed times, drivers read them here (tests inject their own).

Every claim, lease and audit time comes from the store's clock (`Store.db_now`): on SQLite, one machine's, this
one; on PostgreSQL, the database server's, the one time every host of a fleet agrees on. A host whose own clock is
a minute ahead must not see a live worker's lease as expired. `CarriedClock` is how a driver reads such a clock
often without asking the database each time: once per `every` seconds, carried forward on this machine's
monotonic clock in between (it never runs backwards, and a few seconds of it cannot drift apart from the
database's by anything a lease would notice).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta


def utcnow() -> datetime:
    return datetime.now(UTC)


CARRY = 1.0
"""Seconds a reading of the store's clock is carried forward before the store is asked again."""


class CarriedClock:
    """A clock read from elsewhere (`read`, a query) at most once per `every` seconds, carried forward on the
    monotonic clock between readings; never earlier than a time it has already given."""

    def __init__(
        self, read: Callable[[], datetime], *, every: float = CARRY, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._read = read
        self._every = every
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._base: datetime | None = None
        self._origin = 0.0

    def __call__(self) -> datetime:
        with self._lock:
            base, origin = self._base, self._origin
        now = self._monotonic()
        carried = None if base is None else base + timedelta(seconds=now - origin)
        if carried is not None and now - origin < self._every:
            return carried
        try:
            read = self._read()  # outside the lock: a slow query holds up no other thread's reading
        except Exception:
            if carried is None:
                raise
            return carried  # the database is away a moment: the last reading, carried on; asked again next time
        reading = read if carried is None else max(read, carried)
        with self._lock:
            if self._base is None or now >= self._origin:
                self._base, self._origin = reading, now
        return reading
