"""SQLite backend: the embedded default for one machine.

WAL for readers beside one writer, `synchronous=FULL` because an audit trail is a promise, STRICT
tables, and explicit `BEGIN IMMEDIATE` for every write: a deferred transaction that later writes gets
SQLITE_BUSY without waiting on busy_timeout, which is exactly when two watchers collide.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..core.codec import record_from_json, record_to_json
from ..core.record import OperationRecord
from .base import Event, Lease, NewEvent, OperationExists, Stored, StoreError

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS operations (
    operation_id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    contract_name TEXT NOT NULL,
    phase TEXT NOT NULL,
    next_poll_at REAL NOT NULL,
    deadline_at REAL NOT NULL,
    status_requests_used INTEGER NOT NULL,
    max_status_requests INTEGER NOT NULL,
    record TEXT NOT NULL,
    contract TEXT NOT NULL,
    lease_owner TEXT,
    lease_token INTEGER NOT NULL DEFAULT 0,
    lease_expires_at REAL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS operations_due ON operations (next_poll_at) WHERE phase = 'active';
CREATE TABLE IF NOT EXISTS events (
    operation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (operation_id, seq)
) STRICT;
"""


def this_host() -> str:
    return socket.gethostname()


def process_owner() -> str:
    """host:pid:nonce — the nonce tells two incarnations of one pid apart."""
    return f"{this_host()}:{os.getpid()}:{os.urandom(4).hex()}"


def _holder_dead(owner: str) -> bool:
    """A holder on this host whose process is gone cannot be sending: its lease need not be waited out."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != this_host() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return False


def _epoch(moment: datetime) -> float:
    return moment.timestamp()


def _from_epoch(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, tz=UTC)


class SQLiteStore:
    def __init__(self, path: Path, *, synchronous: str = "FULL") -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(path, isolation_level=None, timeout=30.0, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the state database {path}: {exc}") from None
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(f"PRAGMA synchronous={synchronous}")
            self._conn.execute("PRAGMA busy_timeout=30000")
            self._conn.execute("PRAGMA foreign_keys=ON")
            with self._tx():
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._conn.execute(statement)
                row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                if row is None:
                    self._conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                elif int(row[0]) > SCHEMA_VERSION:
                    raise StoreError(
                        f"{path} was written by a newer pollwarden (schema {row[0]}, this one knows"
                        f" {SCHEMA_VERSION}); upgrade pollwarden instead of downgrading the data"
                    )
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise StoreError(f"{path} is not a usable pollwarden database: {exc}") from None

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        else:
            self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()

    # -- records -------------------------------------------------------------------------------------

    def create(self, record: OperationRecord, contract_text: str, event: Mapping[str, Any]) -> None:
        now = _epoch(record.created_at)
        with self._tx() as conn:
            exists = conn.execute("SELECT 1 FROM operations WHERE operation_id = ?", (record.operation_id,)).fetchone()
            if exists:
                raise OperationExists(f"operation {record.operation_id} already exists")
            conn.execute(
                "INSERT INTO operations (operation_id, job_id, contract_name, phase, next_poll_at, deadline_at,"
                " status_requests_used, max_status_requests, record, contract, created_at, updated_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    record.operation_id,
                    record.job_id,
                    record.contract_name,
                    record.phase.value,
                    _epoch(record.next_poll_at),
                    _epoch(record.deadline_at),
                    record.status_requests_used,
                    record.plan.max_status_requests,
                    json.dumps(record_to_json(record)),
                    contract_text,
                    now,
                    now,
                ),
            )
            self._append(conn, record.operation_id, "created", event, record.created_at)

    def _stored(self, row: sqlite3.Row | tuple[Any, ...]) -> Stored:
        record_text, contract_text, owner, token, expires = row
        return Stored(
            record=record_from_json(json.loads(record_text)),
            contract_text=contract_text,
            lease_owner=owner,
            lease_token=int(token),
            lease_expires_at=_from_epoch(expires),
        )

    _COLUMNS = "record, contract, lease_owner, lease_token, lease_expires_at"

    def get(self, operation_id: str) -> Stored | None:
        row = self._conn.execute(
            f"SELECT {self._COLUMNS} FROM operations WHERE operation_id = ?", (operation_id,)
        ).fetchone()
        return None if row is None else self._stored(row)

    def all(self) -> list[Stored]:
        rows = self._conn.execute(f"SELECT {self._COLUMNS} FROM operations ORDER BY created_at").fetchall()
        return [self._stored(row) for row in rows]

    # -- leases --------------------------------------------------------------------------------------

    def claim(
        self, operation_id: str, owner: str, now: datetime, ttl: timedelta
    ) -> tuple[Lease, OperationRecord] | None:
        with self._tx() as conn:
            row = conn.execute(
                f"SELECT {self._COLUMNS} FROM operations WHERE operation_id = ?", (operation_id,)
            ).fetchone()
            if row is None:
                raise StoreError(f"operation {operation_id} does not exist")
            stored = self._stored(row)
            held = (
                stored.lease_owner is not None
                and stored.lease_owner != owner
                and stored.lease_expires_at is not None
                and stored.lease_expires_at > now
                and not _holder_dead(stored.lease_owner)
            )
            if held:
                return None
            token = stored.lease_token + 1
            expires = now + ttl
            conn.execute(
                "UPDATE operations SET lease_owner = ?, lease_token = ?, lease_expires_at = ? WHERE operation_id = ?",
                (owner, token, _epoch(expires), operation_id),
            )
            if stored.lease_owner is not None and stored.lease_owner != owner:
                self._append(
                    conn,
                    operation_id,
                    "lease_taken_over",
                    {"previous_owner": stored.lease_owner, "owner": owner, "token": token},
                    now,
                )
            return Lease(operation_id, owner, token, expires), stored.record

    def write(
        self,
        lease: Lease,
        record: OperationRecord,
        events: Sequence[NewEvent],
        now: datetime,
        *,
        release: bool,
    ) -> bool:
        with self._tx() as conn:
            cursor = conn.execute(
                "UPDATE operations SET phase = ?, next_poll_at = ?, deadline_at = ?, status_requests_used = ?,"
                " max_status_requests = ?, record = ?, updated_at = ?,"
                " lease_owner = CASE WHEN ? THEN NULL ELSE lease_owner END,"
                " lease_expires_at = CASE WHEN ? THEN NULL ELSE lease_expires_at END"
                " WHERE operation_id = ? AND lease_token = ? AND lease_owner = ?",
                (
                    record.phase.value,
                    _epoch(record.next_poll_at),
                    _epoch(record.deadline_at),
                    record.status_requests_used,
                    record.plan.max_status_requests,
                    json.dumps(record_to_json(record)),
                    _epoch(now),
                    release,
                    release,
                    lease.operation_id,
                    lease.token,
                    lease.owner,
                ),
            )
            if cursor.rowcount != 1:
                return False
            for kind, data in events:
                self._append(conn, lease.operation_id, kind, data, now)
            return True

    def release(self, lease: Lease) -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE operations SET lease_owner = NULL, lease_expires_at = NULL"
                " WHERE operation_id = ? AND lease_token = ? AND lease_owner = ?",
                (lease.operation_id, lease.token, lease.owner),
            )

    # -- events --------------------------------------------------------------------------------------

    def append(self, operation_id: str, kind: str, data: Mapping[str, Any], at: datetime) -> None:
        with self._tx() as conn:
            self._append(conn, operation_id, kind, data, at)

    def _append(
        self, conn: sqlite3.Connection, operation_id: str, kind: str, data: Mapping[str, Any], at: datetime
    ) -> None:
        row = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM events WHERE operation_id = ?", (operation_id,))
        seq = int(row.fetchone()[0]) + 1
        conn.execute(
            "INSERT INTO events (operation_id, seq, at, kind, data) VALUES (?,?,?,?,?)",
            (operation_id, seq, _epoch(at), kind, json.dumps(data, sort_keys=True)),
        )

    def events(self, operation_id: str) -> list[Event]:
        rows = self._conn.execute(
            "SELECT seq, at, kind, data FROM events WHERE operation_id = ? ORDER BY seq", (operation_id,)
        ).fetchall()
        return [
            Event(operation_id, int(seq), datetime.fromtimestamp(at, tz=UTC), kind, json.loads(data))
            for seq, at, kind, data in rows
        ]
