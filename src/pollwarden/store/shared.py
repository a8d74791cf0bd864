"""One helper object per open store in this process, made by its first user and ended by its last: the combiner
of the Python API's watches of one store (`engine.combine`), the outbox's delivery loop
(`pollwarden.home.outbox`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, Protocol, TypeVar

from .base import Store

__all__ = ["PerStore", "Shared"]


class Shared(Protocol):
    """What a shared helper keeps: the store it serves, and how many use it now (it may size its work by that)."""

    store: Store
    users: int


S = TypeVar("S", bound=Shared)


class PerStore(Generic[S]):
    """The helpers of one kind, one per store object while any user holds it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, S] = {}

    @contextmanager
    def use(self, store: Store, make: Callable[[Store], S], end: Callable[[S], None]) -> Iterator[S]:
        """The store's helper (`make` makes it if none is held) while the block runs; the last user to leave
        ends it (`end`, outside the lock: it may wait)."""
        with self._lock:
            found = self._held.get(id(store))
            if found is None or found.store is not store:  # an id reused by a store opened since
                found = self._held[id(store)] = make(store)
            found.users += 1
        try:
            yield found
        finally:
            with self._lock:
                found.users -= 1
                last = found.users == 0
                if last and self._held.get(id(store)) is found:
                    del self._held[id(store)]
            if last:
                end(found)
