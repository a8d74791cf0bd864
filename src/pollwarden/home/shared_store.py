"""One store per home per process, shared by the Python API's watches that run at the same time.

Fifty watches started together by an agent's threads each opened a store of their own: a connection, the audit
keys read and decoded, the witness setting read, and a head keeper of its own that wrote the home's head file
after its first commit; under one GIL each watch's first request waited for all of that, fifty times. Here the
first watch of a home opens its store, every watch that starts while it is open uses the same one, and the last
to end closes it (closing writes the newest head, as one store's close always did).

Sharing is safe because both backends serve many threads with one store: a SQLite store gives each read a
connection of its own and sends every write through the file's one `GroupWriter`; a PostgreSQL store's pool
gives each thread its own connection. A watch that fails (refused, cancelled, its callback raising, a body
rolled back) gives its share back like any other and leaves the store as it found it; a store that fails to
open is not kept, so the next watch tries again.

What a store is opened with is looked at again for every watch: the home, the database (`$POLLWARDEN_DB`), the
audit keys (their variables and files: `key_sources`) and the witness setting. When any of them changed, the
watch gets a store of its own opened with what is there now; watches already running keep theirs to the end.
After the last watch of a store ends nothing stays loaded: the next watch opens the home again.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..audit.keys import key_sources
from ..store.base import Store
from ..store.witness import WITNESS_ENV
from .directory import witness_config_path
from .operating import database_target, open_store

__all__ = ["home_store"]


@dataclass
class _Shared:
    store: Store
    users: int = 1


_SHARED: dict[bytes, _Shared] = {}
"""The open stores, by what each was opened from (`_identity` once it was open)."""
_OPENING: dict[str, threading.Lock] = {}
"""Per home and database: the watches that start together wait for the first one's store, not open their own."""
_LOCK = threading.Lock()


def _place(home: Path) -> str:
    return f"{os.path.realpath(home)}\0{database_target(home)}"


def _identity(home: Path) -> bytes:
    """Everything the store of `home` is opened from, hashed: the key variables' values are not kept."""
    try:
        witness_file: object = os.stat(witness_config_path(home)).st_mtime_ns
    except OSError:
        witness_file = None
    parts = [_place(home), os.environ.get(WITNESS_ENV), witness_file, *key_sources(home)]
    return hashlib.sha256(repr(parts).encode()).digest()


def _join(identity: bytes) -> _Shared | None:
    """The open store of this identity with one more user, if there is one (under `_LOCK`)."""
    found = _SHARED.get(identity)
    if found is not None:
        found.users += 1
    return found


def _acquire(home: Path) -> tuple[bytes, _Shared]:
    # Looked at outside the lock: it is a dozen system calls, and fifty watches starting at once queued on it.
    identity = _identity(home)
    with _LOCK:
        if (found := _join(identity)) is not None:
            return identity, found
        opening = _OPENING.setdefault(_place(home), threading.Lock())
    with opening:
        identity = _identity(home)
        with _LOCK:  # opened by the watch this one waited for
            if (found := _join(identity)) is not None:
                return identity, found
        store = open_store(home)
        # Known by what it was opened from once open: the first open of a home creates its keys.
        identity = _identity(home)
        made = _Shared(store)
        with _LOCK:
            _SHARED.setdefault(identity, made)  # one that appeared meanwhile stays; this one is then not shared
        return identity, made


@contextmanager
def home_store(home: Path) -> Iterator[Store]:
    """The store of `home` this process shares while it is in use (opened here if none is); raises HomeError
    as `open_store` does."""
    identity, using = _acquire(home)
    try:
        yield using.store
    finally:
        _release(identity, using)


def _release(identity: bytes, using: _Shared) -> None:
    with _LOCK:
        using.users -= 1
        if using.users:
            return
        if _SHARED.get(identity) is using:
            del _SHARED[identity]
    using.store.close()


def _flush_at_exit() -> None:
    """Watches still running on daemon threads as the interpreter exits: their newest head reaches the home's
    file, as a close would have written it. Their stores are not closed under them; the exit closes the files."""
    with _LOCK:
        stores = [using.store for using in _SHARED.values()]
    for store in stores:
        keeper = getattr(store, "keeper", None)
        if keeper is not None:
            keeper.flush()


def _forget_in_child() -> None:
    """A forked child opens stores of its own: the parent's writer refuses a child (see `sqlite_writer`)."""
    global _LOCK
    _SHARED.clear()
    _OPENING.clear()
    _LOCK = threading.Lock()  # a parent's thread may have held it at the fork


atexit.register(_flush_at_exit)
os.register_at_fork(after_in_child=_forget_in_child)
