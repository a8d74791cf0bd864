"""Group commit for SQLite: the write transactions of every store of one database file in one process, joined.

A durable commit costs an fsync (3-4 ms on these disks) and SQLite has one write lock per file, so 50 watches
starting at once in one process (`pollwarden.watch` from an agent's threads) each waited for the commits of
all the others before their own: admission, claim and reservation are three commits each, 150 in a row, and
the last first request went out 1.4 s after its call. Here every store of a file shares one writer
connection, and a transaction that starts while another one's commit is under way joins the next batch: the
bodies run one after another in one BEGIN IMMEDIATE ... COMMIT, each inside a SAVEPOINT of its own, and one
fsync makes them all durable. So:

- **isolation per body**: a body that raises is rolled back to its savepoint (its SQL and its changes to the
  shared `Tx`) and raises to its own caller alone; the others commit;
- **durability per caller**: `transaction()` returns only after the COMMIT that holds its body is on disk; if
  that COMMIT fails, every body of the batch raises (nothing of it was written);
- **one head per batch**: the audit head is signed once, just before the batch's COMMIT, over every log the
  batch appended to, which is what part 9 made heads for (one signed head per committed transaction);
- **bounded latency**: a batch commits as soon as no other transaction is waiting to join it, or at 256
  bodies, or 20 ms after it began; a caller waiting for a commit that nobody is about to make makes it itself;
- **a lost batch is said so**: an error after which SQLite rolls back the whole transaction (SQLITE_FULL, an
  I/O error) fails every body of the batch, and no head is ever signed outside a transaction;
- **one signing key per writer**: the writer is per file and signing key, since one member signs the head of
  all; stores with another key (or none) take turns with this one at the file's write turn, as other
  processes do (below);
- **interrupts**: Ctrl-C while queued leaves the queue; while waiting for the batch's COMMIT it leaves the
  wait, and the body commits with its batch (as a lone COMMIT interrupted as it returns would have); in
  the committing thread once COMMIT has returned, the other callers of the batch still return normally.

With one transaction at a time nothing changes: BEGIN, the body, COMMIT, as before. Between writers (other
processes, or stores with another key) a batch starts once it holds the file's write turn, `<db>-writer.lock`
(`sqlite_turn.py`), so the next writer starts within a millisecond of this one's COMMIT instead of at the
busy handler's next step; anything else that writes the file still meets it in SQLite's busy handler.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..audit import AuditKeys, key_id_of
from .base import StoreError
from .common import Dialect, Tx
from .sqlite_turn import Turn

if TYPE_CHECKING:
    from .trail import AuditTrail

__all__ = ["GroupWriter", "group_writer"]

_Key = tuple[str, str, str | None]
"""(the file's real path, `synchronous`, the signing key's id or None)."""

BUSY_TIMEOUT_S = 30.0
"""How long a connection waits for another process's write lock (SQLite's busy handler) before giving up."""
MAX_MEMBERS = 256
MAX_AGE = 0.02
_STALL_CHECK = 0.05


@dataclass
class _Batch:
    tx: Tx
    opened: float
    stores: list[AuditTrail] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
_ENVIRONMENT = _BUSY | {7, 8, 10, 13, 14}  # NOMEM, READONLY, IOERR, FULL, CANTOPEN: the machine, not the code


def _primary(exc: sqlite3.Error) -> int:
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF  # extended codes carry the primary one in the low byte


def _refusal(path: Path | str, exc: sqlite3.Error) -> StoreError:
    """What a person reads when the file refuses a write: another process's lock, a read-only file or volume,
    a full disk. Nothing was written; SQLite's message names the condition and holds no data."""
    if _primary(exc) in _BUSY:
        return _locked(path, str(exc))
    return StoreError(f"the state database {path} refused the write ({exc}); nothing was written")


def _locked(path: Path | str, why: str) -> StoreError:
    return StoreError(
        f"the state database {path} is locked by another process ({why}, after waiting"
        f" {BUSY_TIMEOUT_S:.0f} s); nothing was written. Run the command again once that write ends"
    )


def connect(path: Path) -> sqlite3.Connection:
    """A connection to the file as every one of a store is set up: the readers' and the writer's."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000:.0f}")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


class GroupWriter:
    """One writer connection of one database file, shared by every SQLiteStore of this process that opens it."""

    def __init__(self, key: _Key, path: Path, synchronous: str, dialect: Dialect) -> None:
        self.key = key
        self._dialect = dialect
        try:
            self._conn = connect(path)
            self._conn.execute(f"PRAGMA synchronous={synchronous}")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the state database {path}: {exc}") from None
        self._turn = Turn(path)
        """Taken before BEGIN IMMEDIATE, given after COMMIT or ROLLBACK: other processes' writers of the file
        start as soon as this one ends, not at the busy handler's next step (sqlite_turn.py)."""
        self._mutex = threading.Lock()
        """Whoever holds it may run SQL on the connection: one body, or one COMMIT, at a time."""
        self._count = threading.Lock()
        self._queued = 0
        """Threads waiting for the mutex to run a body: while there are any, a batch waits for them."""
        self._batch: _Batch | None = None
        self._closed = False
        self.refs = 0
        self.pid = os.getpid()
        """The process it belongs to: a child forked from it must not use the parent's connection or locks."""

    @contextmanager
    def transaction(self, store: AuditTrail) -> Iterator[Tx]:
        if self.pid != os.getpid():  # before any lock: a parent's thread may hold them, for good, in this copy
            raise StoreError(
                f"this store of {store.path} was opened by another process (this one is a fork of it):"
                " open a new store in this process"
            )
        with self._count:
            self._queued += 1
        queued = True
        failed: Exception | None = None
        try:
            # A `with` (not acquire() then try): an interrupt that surfaces just as the mutex is taken must
            # still release it, or every later write of the process hangs (CPython runs `__exit__` once a
            # C `__enter__` has returned). No interrupt check falls between the decrement and `queued = False`.
            with self._mutex:
                with self._count:
                    self._queued -= 1
                    queued = False
                if self._closed:
                    raise StoreError(f"the state database {store.path} is closed")
                batch = self._open(store.path)
                tx = batch.tx
                saved = _save(tx)
                self._conn.execute("SAVEPOINT member")
                try:
                    yield tx
                    if tx.appended != saved["appended"]:
                        # its head must be signable: refuse this body alone, as a lone commit would
                        store._signing_key()
                except BaseException as exc:
                    if not self._undo(batch, saved, exc):
                        raise StoreError(f"the state database could not write: {exc}") from exc
                    if isinstance(exc, sqlite3.OperationalError) and _primary(exc) in _ENVIRONMENT:
                        raise _refusal(store.path, exc) from None
                    if not isinstance(exc, Exception):
                        raise
                    failed = exc
                else:
                    self._conn.execute("RELEASE member")
                    batch.stores.append(store)
                    if tx.head is not None:
                        self._commit(batch)  # the body signed a head itself (newest_head): nothing may follow
                    else:
                        self._settle(batch)
        finally:
            if queued:  # interrupted while waiting for the mutex (or just as it was taken): leave the queue
                with self._count:
                    self._queued -= 1
        self._wait(batch)
        if failed is not None:
            # Raised once its batch has ended: a body may have failed on what an earlier member wrote (the job
            # another watch just created), and its caller's next read, outside the batch, must see that.
            raise failed
        if batch.error is not None:
            why = str(batch.error) or type(batch.error).__name__
            raise StoreError(f"the state database could not commit: {why}") from batch.error
        store._committed(tx)

    def _undo(self, batch: _Batch, saved: dict[str, Any], failure: BaseException) -> bool:
        """Roll a failed body back to its savepoint; False when SQLite had already rolled back the whole
        transaction (SQLITE_FULL, an I/O error): every body of the batch is lost, and its callers are told so."""
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK TO member")
                self._conn.execute("RELEASE member")
            except sqlite3.Error:
                pass
            else:
                _restore(batch.tx, saved)
                self._settle(batch)
                return True
        # SQLite's own message says why (a full disk); a body's other exceptions may carry its data, so not theirs.
        why = f": {failure}" if isinstance(failure, sqlite3.Error) else ""
        self._end(batch, StoreError(f"SQLite rolled back the whole transaction after an error in a body{why}"))
        return False

    def _open(self, path: Path | str) -> _Batch:
        if self._batch is None:
            try:
                if not self._turn.take(BUSY_TIMEOUT_S):
                    raise _locked(path, f"{self._turn.path.name} is held")
                self._conn.execute("BEGIN IMMEDIATE")
            except BaseException as exc:
                self._turn.give()  # also after an interrupt just as the turn was taken: never kept by mistake
                if isinstance(exc, sqlite3.Error):
                    raise _refusal(path, exc) from None
                raise
            self._batch = _Batch(Tx(self._conn.execute, self._dialect), time.monotonic())
        return self._batch

    def _settle(self, batch: _Batch) -> None:
        """Commit now unless another transaction is about to join (under the mutex; raises only an interrupt)."""
        with self._count:
            joining = self._queued
        if joining and len(batch.stores) < MAX_MEMBERS and time.monotonic() - batch.opened < MAX_AGE:
            return
        self._commit(batch)

    def _commit(self, batch: _Batch) -> None:
        """Seal and commit the batch, then wake its callers. Raises only an interrupt (KeyboardInterrupt,
        SystemExit) of this thread, after the batch has ended one way or the other."""
        try:
            if not self._conn.in_transaction:
                # Never sign a head outside the batch's transaction: it would commit alone, over nothing.
                raise StoreError("SQLite rolled the transaction back before its COMMIT")
            if batch.stores:
                # Every member signs with the same key (the writer is per signing key); the last one signs.
                batch.stores[-1]._seal_commit(batch.tx)
        except BaseException as exc:
            self._end(batch, exc)
            if not isinstance(exc, Exception):
                raise
            return
        try:
            self._conn.execute("COMMIT")
        except Exception as exc:
            self._end(batch, exc)
        except BaseException:
            # sqlite3 runs no Python code while it commits: an interrupt surfaces only once COMMIT has returned,
            # so the batch is durable. Its other callers are told so; this thread's caller gets the interrupt.
            self._end(batch, None)
            raise
        else:
            self._end(batch, None)

    def _end(self, batch: _Batch, error: BaseException | None) -> None:
        """The batch is over: committed (no error) or lost; its waiting callers wake."""
        if error is not None:
            batch.error = error
            with contextlib.suppress(sqlite3.Error):  # a failed COMMIT may have rolled back already
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
        self._batch = None
        self._turn.give()
        batch.done.set()

    def _wait(self, batch: _Batch) -> None:
        """Until the batch is committed; if the thread that was to join it never did, commit it here."""
        while not batch.done.wait(_STALL_CHECK):
            if self._mutex.acquire(blocking=False):
                try:
                    if self._batch is batch:
                        # By the same rule as the last member's: a joiner still queued (a thread a loaded machine
                        # has not run yet) is waited for while the batch is young, not left to the next batch.
                        self._settle(batch)
                finally:
                    self._mutex.release()

    def close(self) -> None:
        """Under the mutex: a body still running on another thread finishes, and an open batch commits first."""
        with self._mutex:
            if self._batch is not None:
                self._commit(self._batch)
            self._closed = True
            self._conn.close()
            self._turn.close()


def _save(tx: Tx) -> dict[str, Any]:
    return {f.name: copy.copy(getattr(tx, f.name)) for f in dataclasses.fields(tx) if f.name not in ("run", "dialect")}


def _restore(tx: Tx, saved: dict[str, Any]) -> None:
    for name, value in saved.items():
        setattr(tx, name, value)


_GROUPS: dict[_Key, GroupWriter] = {}
_GROUPS_LOCK = threading.Lock()


def group_writer(path: Path, synchronous: str, dialect: Dialect, keys: AuditKeys | None) -> GroupWriter:
    """The shared writer of this file (with this `synchronous` and this signing key), opened by its first store.

    Per signing key because one member signs the head of the whole batch: a store with another key (or none,
    a verifier's) would sign, or fail to sign, the others' records. Such stores take turns at the file's write
    turn, as other processes do."""
    signer = None if keys is None or keys.signing_key is None else key_id_of(keys.signing_key.public_key())
    key = (os.path.realpath(path), synchronous, signer)
    with _GROUPS_LOCK:
        writer = _GROUPS.get(key)
        if writer is None:
            writer = _GROUPS[key] = GroupWriter(key, path, synchronous, dialect)
        writer.refs += 1
        return writer


def release_writer(writer: GroupWriter) -> None:
    """A store closed; the last one closes the connection. A writer inherited across fork is left alone: its
    connection and mutex are the parent's (the mutex may even be held, for good, by a thread of the parent)."""
    if writer.pid != os.getpid():
        return
    with _GROUPS_LOCK:
        writer.refs -= 1
        if writer.refs > 0:
            return
        _GROUPS.pop(writer.key, None)
    writer.close()


def _forget_writers() -> None:
    """In a forked child: stores it opens get writers of their own (multiprocessing forks on Linux)."""
    global _GROUPS_LOCK
    for writer in _GROUPS.values():
        writer._turn.forget()  # closed, not given: a parent's thread may hold it (flock is per open file)
    _GROUPS.clear()
    _GROUPS_LOCK = threading.Lock()  # a parent's thread may have held it at the fork


os.register_at_fork(after_in_child=_forget_writers)
