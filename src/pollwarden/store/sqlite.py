"""SQLite backend: the embedded default for one machine.

WAL for readers beside one writer, `synchronous=FULL` because an audit trail is a promise, STRICT
tables, and explicit `BEGIN IMMEDIATE` for every write: a deferred transaction that later writes gets
SQLITE_BUSY without waiting on busy_timeout, which is exactly when two watchers collide.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..audit import AuditKeys, AuditRecord, Checkpoint, sign_checkpoint
from ..core.durations import format_rfc3339
from ..core.escalation import DecisionRequest
from ..core.record import OperationRecord
from .base import DecisionTaken, Grant, Lease, NewEvent, OperationExists, Stored, StoredDecision, StoreError, Submission
from .common import (
    AUDIT_RECORD_COLUMNS,
    CHECKPOINT_COLUMNS,
    CHECKPOINT_EVERY,
    CHECKPOINT_KINDS,
    DECISION_COLUMNS,
    GRANT_COLUMNS,
    STORED_COLUMNS,
    SUBMISSION_COLUMNS,
    AuditedStore,
    audit_record_from_row,
    audit_record_values,
    checkpoint_from_row,
    checkpoint_values,
    decision_from_row,
    decision_request_text,
    grant_detail_text,
    grant_from_row,
    lease_held,
    process_owner,
    record_values,
    seal_next,
    stored_from_row,
    submission_from_row,
    taken_over,
    takeover_event,
    this_host,
)

__all__ = ["CHECKPOINT_EVERY", "CHECKPOINT_KINDS", "SCHEMA_VERSION", "SQLiteStore", "process_owner", "this_host"]

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
CREATE TABLE IF NOT EXISTS audit_records (
    log_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    ciphertext BLOB NOT NULL,
    this_hash TEXT NOT NULL,
    PRIMARY KEY (log_id, seq)
) STRICT;
CREATE TABLE IF NOT EXISTS decisions (
    decision_id TEXT PRIMARY KEY,
    operation_id TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    request TEXT NOT NULL,
    decided_by TEXT,
    decided_at REAL,
    option INTEGER,
    note TEXT
) STRICT;
CREATE INDEX IF NOT EXISTS decisions_open ON decisions (operation_id) WHERE status = 'open';
CREATE TABLE IF NOT EXISTS submissions (
    operation_id TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    idempotency_token TEXT,
    body BLOB NOT NULL,
    state TEXT NOT NULL,
    job_id TEXT,
    status_location TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS grants (
    grant_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    scope TEXT NOT NULL,
    status TEXT NOT NULL,
    requested_at REAL NOT NULL,
    detail TEXT NOT NULL,
    decided_by TEXT,
    decided_at REAL
) STRICT;
CREATE TABLE IF NOT EXISTS provider_pacing (
    provider TEXT PRIMARY KEY,
    interval_seconds REAL NOT NULL,
    next_slot_at REAL NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS audit_checkpoints (
    counter INTEGER PRIMARY KEY,
    log_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    head_hash TEXT NOT NULL,
    at TEXT NOT NULL,
    key_id TEXT NOT NULL,
    signature TEXT NOT NULL
) STRICT;
"""


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


def _epoch(moment: datetime) -> float:
    return moment.timestamp()


def _at(value: float) -> datetime:
    return datetime.fromtimestamp(value, tz=UTC)


class SQLiteStore(AuditedStore):
    """Records and their audit trail in one file; events are sealed and chained in the same transaction.

    `keys` and `trusted_checkpoint_path` are as described on `AuditedStore`; here the trusted checkpoint
    file is kept beside the database (not in it).
    """

    path: Path

    def __init__(
        self,
        path: Path,
        *,
        keys: AuditKeys | None = None,
        trusted_checkpoint_path: Path | None = None,
        synchronous: str = "FULL",
    ) -> None:
        self.path = path
        super().__init__(keys=keys, trusted_checkpoint_path=trusted_checkpoint_path)
        self._pending_checkpoints: list[Checkpoint] = []
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(path, isolation_level=None, timeout=30.0, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the state database {path}: {exc}") from None
        try:
            self._conn.execute("PRAGMA busy_timeout=30000")
            _use_wal(self._conn)
            self._conn.execute(f"PRAGMA synchronous={synchronous}")
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
        self._pending_checkpoints = []
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            self._pending_checkpoints = []
            raise
        else:
            self._conn.execute("COMMIT")
            pending, self._pending_checkpoints = self._pending_checkpoints, []
            self._keep_checkpoints_elsewhere(pending)

    def close(self) -> None:
        self._conn.close()

    def pace(
        self, provider: str, now: datetime, *, interval: timedelta | None, horizon: timedelta
    ) -> tuple[datetime, bool] | None:
        with self._tx() as conn:
            if interval is not None:
                conn.execute(
                    "INSERT INTO provider_pacing (provider, interval_seconds, next_slot_at) VALUES (?,?,?)"
                    " ON CONFLICT (provider) DO UPDATE SET interval_seconds = excluded.interval_seconds",
                    (provider, interval.total_seconds(), _epoch(now)),
                )
            row = conn.execute(
                "SELECT interval_seconds, next_slot_at FROM provider_pacing WHERE provider = ?", (provider,)
            ).fetchone()
            if row is None:
                return None
            slot = max(_epoch(now), float(row[1]))
            if slot - _epoch(now) > horizon.total_seconds():
                return _at(slot), False
            conn.execute(
                "UPDATE provider_pacing SET next_slot_at = ? WHERE provider = ?", (slot + float(row[0]), provider)
            )
            return _at(slot), True

    def next_due(self) -> datetime | None:
        row = self._conn.execute("SELECT MIN(next_poll_at) FROM operations WHERE phase = 'active'").fetchone()
        return _at(row[0]) if row and row[0] is not None else None

    def db_now(self) -> datetime:
        """One machine, one clock: the fleet worker asks the store for time, and here that is this clock."""
        return datetime.now(UTC)

    # -- records -------------------------------------------------------------------------------------

    def create(self, record: OperationRecord, contract_text: str, event: Mapping[str, Any]) -> None:
        with self._tx() as conn:
            self._insert_operation(conn, record, contract_text)
            self._append(conn, record.operation_id, "created", event, record.created_at)

    def _insert_operation(self, conn: sqlite3.Connection, record: OperationRecord, contract_text: str) -> None:
        exists = conn.execute("SELECT 1 FROM operations WHERE operation_id = ?", (record.operation_id,)).fetchone()
        if exists:
            raise OperationExists(f"operation {record.operation_id} already exists")
        now = _epoch(record.created_at)
        conn.execute(
            "INSERT INTO operations (operation_id, job_id, contract_name, phase, next_poll_at, deadline_at,"
            " status_requests_used, max_status_requests, record, contract, created_at, updated_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                record.operation_id,
                record.job_id,
                record.contract_name,
                *record_values(record, _epoch),
                contract_text,
                now,
                now,
            ),
        )

    def get(self, operation_id: str) -> Stored | None:
        row = self._conn.execute(
            f"SELECT {STORED_COLUMNS} FROM operations WHERE operation_id = ?", (operation_id,)
        ).fetchone()
        return None if row is None else stored_from_row(row, _at)

    def all(self) -> list[Stored]:
        rows = self._conn.execute(f"SELECT {STORED_COLUMNS} FROM operations ORDER BY created_at").fetchall()
        return [stored_from_row(row, _at) for row in rows]

    # -- leases --------------------------------------------------------------------------------------

    def claim(
        self, operation_id: str, owner: str, now: datetime, ttl: timedelta
    ) -> tuple[Lease, OperationRecord] | None:
        with self._tx() as conn:
            row = conn.execute(
                f"SELECT {STORED_COLUMNS} FROM operations WHERE operation_id = ?", (operation_id,)
            ).fetchone()
            if row is None:
                raise StoreError(f"operation {operation_id} does not exist")
            stored = stored_from_row(row, _at)
            if lease_held(stored, owner, now):
                return None
            return self._take_lease(conn, operation_id, stored, owner, now + ttl, now), stored.record

    def claim_due(self, owner: str, now: datetime, ttl: timedelta, limit: int) -> list[tuple[Lease, OperationRecord]]:
        """The fleet claim: up to `limit` due operations, unleased or with an expired lease, earliest first.

        One `BEGIN IMMEDIATE` holds the write lock from the select to the last update, so two claimers never
        take the same row (PostgreSQL gets the same from `FOR UPDATE SKIP LOCKED`)."""
        if limit <= 0:
            return []
        expires = now + ttl
        claimed: list[tuple[Lease, OperationRecord]] = []
        with self._tx() as conn:
            rows = conn.execute(
                f"SELECT operation_id, {STORED_COLUMNS} FROM operations WHERE phase = 'active' AND next_poll_at <= ?"
                " AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= ?)"
                " ORDER BY next_poll_at, operation_id LIMIT ?",
                (_epoch(now), _epoch(now), limit),
            ).fetchall()
            for operation_id, *columns in rows:
                stored = stored_from_row(columns, _at)
                claimed.append((self._take_lease(conn, operation_id, stored, owner, expires, now), stored.record))
        return claimed

    def _take_lease(
        self, conn: sqlite3.Connection, operation_id: str, stored: Stored, owner: str, expires: datetime, now: datetime
    ) -> Lease:
        """The next token to `owner`, in the caller's transaction; taking it from another owner is logged."""
        token = stored.lease_token + 1
        conn.execute(
            "UPDATE operations SET lease_owner = ?, lease_token = ?, lease_expires_at = ? WHERE operation_id = ?",
            (owner, token, _epoch(expires), operation_id),
        )
        if taken_over(stored.lease_owner, owner):
            self._append(conn, operation_id, "lease_taken_over", takeover_event(stored.lease_owner, owner, token), now)
        return Lease(operation_id, owner, token, expires)

    def write(
        self,
        lease: Lease,
        record: OperationRecord,
        events: Sequence[NewEvent],
        now: datetime,
        *,
        release: bool,
        decision: DecisionRequest | None = None,
        hold_until: datetime | None = None,
    ) -> bool:
        with self._tx() as conn:
            if not self._update_fenced(conn, lease, record, now, release=release, hold_until=hold_until):
                return False
            for kind, data in events:
                self._append(conn, lease.operation_id, kind, data, now)
            if decision is not None:
                self._insert_decision(conn, decision, now)
            return True

    def _update_fenced(
        self,
        conn: sqlite3.Connection,
        lease: Lease,
        record: OperationRecord,
        now: datetime,
        *,
        release: bool,
        hold_until: datetime | None = None,
    ) -> bool:
        """The fence: the row changes only while it still carries this writer's token (DESIGN.md step 4)."""
        cursor = conn.execute(
            "UPDATE operations SET phase = ?, next_poll_at = ?, deadline_at = ?, status_requests_used = ?,"
            " max_status_requests = ?, record = ?, updated_at = ?,"
            " lease_owner = CASE WHEN ? THEN NULL ELSE lease_owner END,"
            " lease_expires_at = CASE WHEN ? THEN NULL ELSE COALESCE(?, lease_expires_at) END"
            " WHERE operation_id = ? AND lease_token = ? AND lease_owner = ?",
            (
                *record_values(record, _epoch),
                _epoch(now),
                release,
                release,
                None if hold_until is None else _epoch(hold_until),
                lease.operation_id,
                lease.token,
                lease.owner,
            ),
        )
        return cursor.rowcount == 1

    def release(self, lease: Lease) -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE operations SET lease_owner = NULL, lease_expires_at = NULL"
                " WHERE operation_id = ? AND lease_token = ? AND lease_owner = ?",
                (lease.operation_id, lease.token, lease.owner),
            )

    # -- decisions ----------------------------------------------------------------------------------------

    def _insert_decision(self, conn: sqlite3.Connection, request: DecisionRequest, now: datetime) -> None:
        conn.execute(
            "INSERT INTO decisions (decision_id, operation_id, status, created_at, request) VALUES (?,?,?,?,?)",
            (request.decision_id, request.operation_id, "open", _epoch(now), decision_request_text(request)),
        )
        self._append(conn, request.operation_id, "decision_requested", request.to_json(), now)

    def decisions(self, operation_id: str | None = None, *, open_only: bool = False) -> list[StoredDecision]:
        query = f"SELECT {DECISION_COLUMNS} FROM decisions WHERE 1=1"
        params: list[Any] = []
        if operation_id is not None:
            query += " AND operation_id = ?"
            params.append(operation_id)
        if open_only:
            query += " AND status = 'open'"
        rows = self._conn.execute(query + " ORDER BY created_at, decision_id", params).fetchall()
        return [decision_from_row(row, _at) for row in rows]

    def get_decision(self, decision_id: str) -> StoredDecision | None:
        row = self._conn.execute(
            f"SELECT {DECISION_COLUMNS} FROM decisions WHERE decision_id = ?", (decision_id,)
        ).fetchone()
        return None if row is None else decision_from_row(row, _at)

    def resolve_decision(
        self,
        lease: Lease,
        decision_id: str,
        *,
        status: str,
        by: str,
        note: str | None,
        option: int | None,
        record: OperationRecord | None,
        events: Sequence[NewEvent],
        now: datetime,
    ) -> bool:
        with self._tx() as conn:
            row = conn.execute(
                f"SELECT {STORED_COLUMNS} FROM operations WHERE operation_id = ?", (lease.operation_id,)
            ).fetchone()
            target = record if record is not None else (stored_from_row(row, _at).record if row else None)
            if target is None or not self._update_fenced(conn, lease, target, now, release=True):
                return False
            cursor = conn.execute(
                "UPDATE decisions SET status = ?, decided_by = ?, decided_at = ?, option = ?, note = ?"
                " WHERE decision_id = ? AND status = 'open'",
                (status, by, _epoch(now), option, note, decision_id),
            )
            if cursor.rowcount != 1:
                raise DecisionTaken(f"decision {decision_id} was decided by someone else a moment ago")
            if record is not None:
                # The operation moved on: every other question about the old stop is void.
                conn.execute(
                    "UPDATE decisions SET status = 'expired' WHERE operation_id = ? AND status = 'open'",
                    (lease.operation_id,),
                )
            for kind, data in events:
                self._append(conn, lease.operation_id, kind, data, now)
            return True

    # -- submissions --------------------------------------------------------------------------------------

    def record_submission(self, submission: Submission, event: Mapping[str, Any]) -> None:
        with self._tx() as conn:
            for table in ("submissions", "operations"):
                found = conn.execute(
                    f"SELECT 1 FROM {table} WHERE operation_id = ?", (submission.operation_id,)
                ).fetchone()
                if found:
                    raise OperationExists(f"operation {submission.operation_id} already exists")
            conn.execute(
                "INSERT INTO submissions (operation_id, fingerprint, idempotency_token, body, state, job_id,"
                " status_location, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    submission.operation_id,
                    submission.fingerprint,
                    submission.idempotency_token,
                    submission.body,
                    submission.state,
                    submission.job_id,
                    submission.status_location,
                    _epoch(submission.created_at),
                    _epoch(submission.created_at),
                ),
            )
            self._append(conn, submission.operation_id, "submission_intent", event, submission.created_at)

    def get_submission(self, operation_id: str) -> Submission | None:
        row = self._conn.execute(
            f"SELECT {SUBMISSION_COLUMNS} FROM submissions WHERE operation_id = ?", (operation_id,)
        ).fetchone()
        return None if row is None else submission_from_row(row, _at)

    def accept_submission(
        self, submission: Submission, record: OperationRecord, contract_text: str, event: Mapping[str, Any]
    ) -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE submissions SET state = 'accepted', job_id = ?, status_location = ?, updated_at = ?"
                " WHERE operation_id = ?",
                (record.job_id, record.status_location, _epoch(record.created_at), submission.operation_id),
            )
            self._insert_operation(conn, record, contract_text)
            self._append(conn, record.operation_id, "submitted", event, record.created_at)

    def mark_submission(self, operation_id: str, state: str, event: Mapping[str, Any], at: datetime) -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE submissions SET state = ?, updated_at = ? WHERE operation_id = ?",
                (state, _epoch(at), operation_id),
            )
            self._append(conn, operation_id, f"submission_{state}", event, at)

    # -- grants (agent approvals) ------------------------------------------------------------------------

    def request_grant(self, grant: Grant, log_id: str) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO grants (grant_id, kind, subject, scope, status, requested_at, detail)"
                " VALUES (?,?,?,?,?,?,?)",
                (
                    grant.grant_id,
                    grant.kind,
                    grant.subject,
                    grant.scope,
                    grant.status,
                    _epoch(grant.requested_at),
                    grant_detail_text(grant),
                ),
            )
            self._append(conn, log_id, f"{grant.kind}_approval_requested", grant.to_json(), grant.requested_at)

    def get_grant(self, grant_id: str) -> Grant | None:
        row = self._conn.execute(f"SELECT {GRANT_COLUMNS} FROM grants WHERE grant_id = ?", (grant_id,)).fetchone()
        return None if row is None else grant_from_row(row, _at)

    def grants(self, *, kind: str | None = None, status: str | None = None, subject: str | None = None) -> list[Grant]:
        query = f"SELECT {GRANT_COLUMNS} FROM grants WHERE 1=1"
        params: list[Any] = []
        for column, value in (("kind", kind), ("status", status), ("subject", subject)):
            if value is not None:
                query += f" AND {column} = ?"
                params.append(value)
        rows = self._conn.execute(query + " ORDER BY requested_at, grant_id", params).fetchall()
        return [grant_from_row(row, _at) for row in rows]

    def decide_grant(
        self, grant_id: str, *, expect: str, status: str, by: str, at: datetime, log_id: str, note: str | None = None
    ) -> bool:
        with self._tx() as conn:
            cursor = conn.execute(
                "UPDATE grants SET status = ?, decided_by = ?, decided_at = ? WHERE grant_id = ? AND status = ?",
                (status, by, _epoch(at), grant_id, expect),
            )
            if cursor.rowcount != 1:
                return False
            self._append(conn, log_id, f"approval_{status}", {"grant_id": grant_id, "by": by, "note": note}, at)
            return True

    # -- the audit trail --------------------------------------------------------------------------------

    def append(self, operation_id: str, kind: str, data: Mapping[str, Any], at: datetime) -> None:
        with self._tx() as conn:
            self._append(conn, operation_id, kind, data, at)

    def _append(self, conn: sqlite3.Connection, log_id: str, kind: str, data: Mapping[str, Any], at: datetime) -> None:
        """Seal and chain one event onto its log; the head is read inside the caller's write transaction."""
        cipher = self._writing_cipher()
        head = conn.execute(
            "SELECT seq, this_hash FROM audit_records WHERE log_id = ? ORDER BY seq DESC LIMIT 1", (log_id,)
        ).fetchone()
        record, checkpoint = seal_next(cipher, head, log_id=log_id, kind=kind, data=data, at=at)
        conn.execute(
            f"INSERT INTO audit_records ({AUDIT_RECORD_COLUMNS}) VALUES (?,?,?,?,?,?,?)", audit_record_values(record)
        )
        if checkpoint:
            self._checkpoint(conn, log_id, record.seq, record.this_hash, record.at)

    def _checkpoint(self, conn: sqlite3.Connection, log_id: str, seq: int, head_hash: str, at: str) -> Checkpoint:
        signing_key = self._signing_key()
        counter = int(conn.execute("SELECT COALESCE(MAX(counter), 0) + 1 FROM audit_checkpoints").fetchone()[0])
        cp = sign_checkpoint(signing_key, log_id=log_id, seq=seq, head_hash=head_hash, counter=counter, at=at)
        conn.execute(
            f"INSERT INTO audit_checkpoints ({CHECKPOINT_COLUMNS}) VALUES (?,?,?,?,?,?,?)", checkpoint_values(cp)
        )
        self._pending_checkpoints.append(cp)
        return cp

    def checkpoint_heads(self, at: datetime, log_ids: Sequence[str] | None = None) -> list[Checkpoint]:
        """Sign the current head of each log (all, or the named ones): done before every export."""
        made: list[Checkpoint] = []
        with self._tx() as conn:
            rows = conn.execute(
                "SELECT r.log_id, r.seq, r.this_hash FROM audit_records r"
                " JOIN (SELECT log_id, MAX(seq) AS seq FROM audit_records GROUP BY log_id) h"
                " ON r.log_id = h.log_id AND r.seq = h.seq ORDER BY r.log_id"
            ).fetchall()
            for log_id, seq, head_hash in rows:
                if log_ids is None or log_id in log_ids:
                    made.append(self._checkpoint(conn, log_id, int(seq), head_hash, format_rfc3339(at)))
        return made

    def audit_records(self, log_id: str | None = None) -> Iterator[AuditRecord]:
        query = f"SELECT {AUDIT_RECORD_COLUMNS} FROM audit_records"
        params: tuple[str, ...] = ()
        if log_id is not None:
            query += " WHERE log_id = ?"
            params = (log_id,)
        for row in self._conn.execute(query + " ORDER BY log_id, seq", params):
            yield audit_record_from_row(row)

    def audit_checkpoints(self, log_id: str | None = None) -> list[Checkpoint]:
        query = f"SELECT {CHECKPOINT_COLUMNS} FROM audit_checkpoints"
        params: tuple[str, ...] = ()
        if log_id is not None:
            query += " WHERE log_id = ?"
            params = (log_id,)
        rows = self._conn.execute(query + " ORDER BY counter", params).fetchall()
        return [checkpoint_from_row(row) for row in rows]
