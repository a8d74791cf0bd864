"""SQLite backend: the embedded default for one machine.

WAL for readers beside one writer, `synchronous=FULL` because an audit trail is a promise, STRICT
tables, and explicit `BEGIN IMMEDIATE` for every write: a deferred transaction that later writes gets
SQLITE_BUSY without waiting on busy_timeout, which is exactly when two watchers collide. That one write
lock is also what the dialect's row and log locks are on PostgreSQL, so here they are empty.

The schema comes from `migrations` like PostgreSQL's; a file is brought to this code's version when it is
opened (one machine: no fleet to keep in step), and one that a newer pollwarden wrote is refused. The
file, its -wal, -shm and -writer.lock are the owner's alone (see `home.py`).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..audit import AuditKeys
from ..home.directory import PRIVATE_DIR, PRIVATE_FILE, create_private, tighten
from . import migrations
from .base import StoreError
from .bell import Bell, FifoBell
from .common import Dialect, Row, Tx
from .sql import SQLStore
from .sql_leases import NAMED_INDEXES
from .sqlite_writer import GroupWriter, connect, group_writer, release_writer
from .witness import Witness

__all__ = ["SQLITE", "SQLiteStore"]


def _at(value: float) -> datetime:
    return datetime.fromtimestamp(value, tz=UTC)


def _epoch(moment: datetime) -> float:
    return moment.timestamp()


SQLITE = Dialect(
    _epoch,
    _at,
    next_counter="SELECT COALESCE(MAX(counter), 0) + 1 FROM audit_checkpoints",
    names_indexes=True,
)
"""One writer at a time (BEGIN IMMEDIATE): the dialect's locks are all empty, and the next counter is safe."""

_META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT"


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switching to WAL takes an exclusive lock and does not wait on busy_timeout: two processes opening a new
    file at once would see "database is locked". WAL is persistent, so only a new file ever needs the switch."""
    for attempt in range(100):
        if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
            return
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == 99:
                raise
            time.sleep(0.05)


class _Readers:
    """The read connections of one store: each read (a query, a stream, a snapshot) takes one that no other
    thread is using and gives it back, so one store serves many threads at once (the Python API's watches of one
    home share a store) without two threads ever sharing a connection's transaction or its cursors. A read never
    waits for another: with none idle it opens one more, and the store keeps as many as were ever in use at
    once (closed with the store). Writes do not come here; they go through the file's `GroupWriter`."""

    def __init__(self, path: Path, first: sqlite3.Connection) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._idle = [first]
        self._closed = False

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise StoreError(f"the state database {self._path} is closed")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            try:
                conn = connect(self._path)
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open the state database {self._path}: {exc}") from None
        try:
            yield conn
        finally:
            with self._lock:
                if self._closed:
                    conn.close()  # the store closed while this read ran: it was left open for it until now
                else:
                    self._idle.append(conn)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _adopt_stored_contracts(tx: Tx) -> None:
    """Schema 6 on an existing file: the contracts its operations carry are installed (`migrations`)."""
    stored = tx.execute("SELECT DISTINCT contract, contract_name FROM operations").fetchall()
    now = _epoch(datetime.now(UTC))

    def insert(digest: str, name: str, text: str) -> None:
        tx.execute(
            "INSERT INTO contracts (digest, name, text, installed_by, installed_at) VALUES (?,?,?,?,?)",
            (digest, name, text, migrations.ADOPTED_BY, now),
        )

    migrations.adopt_stored_contracts(((str(text), str(name)) for text, name in stored), insert)


class SQLiteStore(SQLStore):
    """Records and their audit trail in one file; events are sealed and chained in the same transaction.

    `keys` and `trusted_checkpoint_path` are as described on `AuditTrail`; here the trusted checkpoint
    file is kept beside the database (not in it).
    """

    path: Path
    dialect = SQLITE
    shared_across_threads = False
    """Safe on many threads (each read takes a connection of its own, every write goes through the file's one
    `GroupWriter`), but the worker keeps one per thread: one shared by its 32 threads measured no faster
    (1,150 against 1,190 polls/s, `bench.throughput_ab`, 2026-12-01)."""

    def __init__(
        self,
        path: Path,
        *,
        keys: AuditKeys | None = None,
        trusted_checkpoint_path: Path | None = None,
        synchronous: str = "FULL",
        witness: Witness | None = None,
    ) -> None:
        self.path = path
        super().__init__(keys=keys, trusted_checkpoint_path=trusted_checkpoint_path, witness=witness)
        self._writer: GroupWriter | None = None
        try:
            if not path.parent.exists():
                path.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
                tighten(path.parent, PRIVATE_DIR)
            create_private(path)
            first = connect(path)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the state database {path}: {exc}") from None
        self._readers = _Readers(path, first)
        try:
            _use_wal(first)
            self._tighten_files()
            first.execute(f"PRAGMA synchronous={synchronous}")
            # One writer per database file per process: SQLite has one write lock per file, and threads that
            # all asked for it slept in its busy handler (16 worker threads spent most of their time there).
            # The shared writer hands it over in arrival order and commits whoever is waiting together.
            self._writer = group_writer(path, synchronous, SQLITE, keys)
            self._upgrade()
            self._tighten_files()
        except sqlite3.DatabaseError as exc:
            self._close_connections()
            raise StoreError(f"{path} is not a usable pollwarden database: {exc}") from None
        except BaseException:
            self._close_connections()
            raise

    def _close_connections(self) -> None:
        self._readers.close()
        if self._writer is not None:
            release_writer(self._writer)
            self._writer = None

    def _tighten_files(self) -> None:
        """SQLite makes -wal and -shm itself (with the database's mode); an older file's may be looser."""
        try:
            for suffix in ("", "-wal", "-shm"):
                tighten(self.path.with_name(self.path.name + suffix), PRIVATE_FILE)
        except OSError as exc:
            raise StoreError(f"cannot make the state database {self.path} private: {exc}") from None

    def _upgrade(self) -> None:
        """Apply what is pending, all in one write transaction: a crash leaves the old version whole. A file
        already at this version is only read: opening a store is then no write, and takes no turn at the writer."""
        try:
            found = self._fetchall("SELECT value FROM meta WHERE key = 'schema_version'", ())
        except sqlite3.OperationalError:  # no meta table: a new file
            found = []
        if found and int(found[0][0]) == migrations.LATEST:
            self._restore_named_indexes()
            return
        with self._tx() as tx:
            tx.execute(_META)
            row = tx.one("SELECT value FROM meta WHERE key = 'schema_version'")
            version = 0 if row is None else int(row[0])
            if version > migrations.LATEST:
                raise StoreError(
                    f"{self.path} was written by a newer pollwarden (schema {version}, this one knows"
                    f" {migrations.LATEST}); upgrade pollwarden instead of downgrading the data"
                )
            for migration in migrations.migrations()[version:]:
                for statement in migration.statements("sqlite"):
                    tx.execute(statement)
                if migration.version == migrations.REGISTRY:
                    _adopt_stored_contracts(tx)
            if version < migrations.LATEST:
                tx.execute(
                    "INSERT INTO meta VALUES ('schema_version', ?)"
                    " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(migrations.LATEST),),
                )
        self._restore_named_indexes()  # an older file may have lost one too, and no migration makes it again

    def _restore_named_indexes(self) -> None:
        """A file at this version whose index a read names (`INDEXED BY`) is gone (dropped outside pollwarden):
        the read would fail on every claim, so the index is made again from the migration that first made it."""
        marks = ", ".join("?" for _ in NAMED_INDEXES)
        query = f"SELECT name FROM sqlite_master WHERE type = 'index' AND name IN ({marks})"
        missing = set(NAMED_INDEXES) - {str(row[0]) for row in self._fetchall(query, NAMED_INDEXES)}
        if not missing:
            return
        made = {
            name: statement
            for migration in migrations.migrations()
            for statement in migration.statements("sqlite")
            for name in missing
            if statement.startswith(f"CREATE INDEX {name} ON ")
        }
        try:
            with self._tx() as tx:
                for name in sorted(missing):
                    if name not in made:
                        raise StoreError(f"{self.path} has no index {name}, and no migration makes it")
                    # IF NOT EXISTS: another process opening the file may have made it since the read above.
                    tx.execute(made[name].replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1))
        except StoreError:
            # A reader of a file it cannot write (`status` on a read-only copy) never reads through the index; a
            # writer that cannot make it cannot claim either, and the next open that can write makes it.
            pass

    def _tx(self) -> AbstractContextManager[Tx]:
        if self._writer is None:
            raise StoreError(f"the state database {self.path} is closed")
        return self._writer.transaction(self)  # seals, commits, then tells this store (`_committed`)

    def _fetchall(self, query: str, params: Sequence[Any]) -> Sequence[Row]:
        with self._readers.connection() as conn:
            rows: list[Row] = conn.execute(query, params).fetchall()
        return rows

    def _stream(self, query: str, params: Sequence[Any]) -> Iterator[Row]:
        with self._readers.connection() as conn:
            yield from conn.execute(query, params)

    @contextmanager
    def _snapshot(self) -> Iterator[Callable[[str, Sequence[Any]], Iterator[Row]]]:
        # A deferred transaction in WAL mode reads one snapshot from its first read to COMMIT; the connection
        # is this snapshot's alone until then, so another thread's reads never join or end it.
        with self._readers.connection() as conn:
            conn.execute("BEGIN")
            try:
                yield lambda query, params: iter(conn.execute(query, params))
            finally:
                conn.execute("COMMIT")

    def close(self) -> None:
        self.keeper.flush()
        self._close_connections()

    def bell(self) -> Bell:
        """A FIFO per listener beside the file (`store.bell`): heard by every waiter on this machine."""
        return FifoBell(self.path.with_name(self.path.name + ".bells"))

    def db_now(self) -> datetime:
        """One machine, one clock: the fleet worker asks the store for time, and here that is this clock."""
        return datetime.now(UTC)
