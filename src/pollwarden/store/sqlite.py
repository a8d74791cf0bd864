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

from ..audit import (
    AUDIT_KEY_ENV,
    GENESIS_HASH,
    SIGNING_KEY_ENV,
    AuditCipher,
    AuditError,
    AuditKeys,
    AuditRecord,
    Checkpoint,
    open_record,
    read_checkpoint_file,
    seal_record,
    sign_checkpoint,
    write_checkpoint_file,
)
from ..core.codec import record_from_json, record_to_json
from ..core.durations import format_rfc3339, parse_rfc3339
from ..core.escalation import DecisionRequest
from ..core.record import OperationRecord
from .base import (
    DecisionTaken,
    Event,
    Grant,
    Lease,
    NewEvent,
    OperationExists,
    Stored,
    StoredDecision,
    StoreError,
    Submission,
)

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

CHECKPOINT_EVERY = 32
"""A log gets a signed checkpoint at every outcome and at least every this many records."""

CHECKPOINT_KINDS = frozenset({"succeeded", "job_ended", "escalated", "decided", "extended", "action"})


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
    """Records and their audit trail in one file; events are sealed and chained in the same transaction.

    `keys` may lack the cipher key (a verifier's machine) or the signing key; then only the operations
    that need them fail, each with a message saying which key is missing. `trusted_checkpoint_path` is the
    file kept beside the database (not in it) that holds the newest checkpoint, so that replacing the
    database with an older copy is detected as a rollback.
    """

    def __init__(
        self,
        path: Path,
        *,
        keys: AuditKeys | None = None,
        trusted_checkpoint_path: Path | None = None,
        synchronous: str = "FULL",
    ) -> None:
        self.path = path
        self.keys = keys
        self._cipher = AuditCipher(keys.cipher_key) if keys is not None and keys.cipher_key else None
        self.trusted_checkpoint_path = trusted_checkpoint_path
        self._pending_checkpoints: list[Checkpoint] = []
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
        self._pending_checkpoints = []
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            self._pending_checkpoints = []
            raise
        else:
            self._conn.execute("COMMIT")
            self._keep_checkpoints_elsewhere()

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
                return datetime.fromtimestamp(slot, tz=UTC), False
            conn.execute(
                "UPDATE provider_pacing SET next_slot_at = ? WHERE provider = ?", (slot + float(row[0]), provider)
            )
            return datetime.fromtimestamp(slot, tz=UTC), True

    def next_due(self) -> datetime | None:
        row = self._conn.execute("SELECT MIN(next_poll_at) FROM operations WHERE phase = 'active'").fetchone()
        return _from_epoch(row[0]) if row and row[0] is not None else None

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
                f"SELECT operation_id, {self._COLUMNS} FROM operations WHERE phase = 'active' AND next_poll_at <= ?"
                " AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= ?)"
                " ORDER BY next_poll_at, operation_id LIMIT ?",
                (_epoch(now), _epoch(now), limit),
            ).fetchall()
            for operation_id, *columns in rows:
                stored = self._stored(tuple(columns))
                token = stored.lease_token + 1
                conn.execute(
                    "UPDATE operations SET lease_owner = ?, lease_token = ?, lease_expires_at = ?"
                    " WHERE operation_id = ?",
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
                claimed.append((Lease(operation_id, owner, token, expires), stored.record))
        return claimed

    def write(
        self,
        lease: Lease,
        record: OperationRecord,
        events: Sequence[NewEvent],
        now: datetime,
        *,
        release: bool,
        decision: DecisionRequest | None = None,
    ) -> bool:
        with self._tx() as conn:
            if not self._update_fenced(conn, lease, record, now, release=release):
                return False
            for kind, data in events:
                self._append(conn, lease.operation_id, kind, data, now)
            if decision is not None:
                self._insert_decision(conn, decision, now)
            return True

    def _update_fenced(
        self, conn: sqlite3.Connection, lease: Lease, record: OperationRecord, now: datetime, *, release: bool
    ) -> bool:
        """The fence: the row changes only while it still carries this writer's token (DESIGN.md step 4)."""
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
            (request.decision_id, request.operation_id, "open", _epoch(now), json.dumps(request.to_json())),
        )
        self._append(conn, request.operation_id, "decision_requested", request.to_json(), now)

    _DECISION_COLUMNS = "request, status, decided_by, decided_at, option, note"

    def _decision(self, row: tuple[Any, ...]) -> StoredDecision:
        request, status, by, at, option, note = row
        return StoredDecision(
            request=DecisionRequest.from_json(json.loads(request)),
            status=status,
            decided_by=by,
            decided_at=_from_epoch(at),
            option=option,
            note=note,
        )

    def decisions(self, operation_id: str | None = None, *, open_only: bool = False) -> list[StoredDecision]:
        query = f"SELECT {self._DECISION_COLUMNS} FROM decisions WHERE 1=1"
        params: list[Any] = []
        if operation_id is not None:
            query += " AND operation_id = ?"
            params.append(operation_id)
        if open_only:
            query += " AND status = 'open'"
        rows = self._conn.execute(query + " ORDER BY created_at, decision_id", params).fetchall()
        return [self._decision(row) for row in rows]

    def get_decision(self, decision_id: str) -> StoredDecision | None:
        row = self._conn.execute(
            f"SELECT {self._DECISION_COLUMNS} FROM decisions WHERE decision_id = ?", (decision_id,)
        ).fetchone()
        return None if row is None else self._decision(row)

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
                f"SELECT {self._COLUMNS} FROM operations WHERE operation_id = ?", (lease.operation_id,)
            ).fetchone()
            target = record if record is not None else (self._stored(row).record if row else None)
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
            "SELECT operation_id, fingerprint, idempotency_token, body, state, job_id, status_location, created_at"
            " FROM submissions WHERE operation_id = ?",
            (operation_id,),
        ).fetchone()
        if row is None:
            return None
        created = datetime.fromtimestamp(row[7], tz=UTC)
        return Submission(row[0], row[1], row[2], bytes(row[3]), row[4], row[5], row[6], created)

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
                    json.dumps(dict(grant.detail), sort_keys=True),
                ),
            )
            self._append(conn, log_id, f"{grant.kind}_approval_requested", grant.to_json(), grant.requested_at)

    _GRANT_COLUMNS = "grant_id, kind, subject, scope, status, requested_at, detail, decided_by, decided_at"

    def _grant(self, row: tuple[Any, ...]) -> Grant:
        return Grant(
            grant_id=row[0],
            kind=row[1],
            subject=row[2],
            scope=row[3],
            status=row[4],
            requested_at=datetime.fromtimestamp(row[5], tz=UTC),
            detail=json.loads(row[6]),
            decided_by=row[7],
            decided_at=_from_epoch(row[8]),
        )

    def get_grant(self, grant_id: str) -> Grant | None:
        row = self._conn.execute(f"SELECT {self._GRANT_COLUMNS} FROM grants WHERE grant_id = ?", (grant_id,)).fetchone()
        return None if row is None else self._grant(row)

    def grants(self, *, kind: str | None = None, status: str | None = None, subject: str | None = None) -> list[Grant]:
        query = f"SELECT {self._GRANT_COLUMNS} FROM grants WHERE 1=1"
        params: list[Any] = []
        for column, value in (("kind", kind), ("status", status), ("subject", subject)):
            if value is not None:
                query += f" AND {column} = ?"
                params.append(value)
        rows = self._conn.execute(query + " ORDER BY requested_at, grant_id", params).fetchall()
        return [self._grant(row) for row in rows]

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
        if self._cipher is None:
            raise StoreError(
                f"no audit encryption key for {self.path}: the log cannot be written. Keep keys/audit.key in"
                f" the home directory or set {AUDIT_KEY_ENV}"
            )
        head = conn.execute(
            "SELECT seq, this_hash FROM audit_records WHERE log_id = ? ORDER BY seq DESC LIMIT 1", (log_id,)
        ).fetchone()
        seq, prev_hash = (int(head[0]) + 1, str(head[1])) if head else (1, GENESIS_HASH)
        record = seal_record(
            self._cipher, log_id=log_id, seq=seq, at=format_rfc3339(at), kind=kind, prev_hash=prev_hash, payload=data
        )
        conn.execute(
            "INSERT INTO audit_records (log_id, seq, at, kind, prev_hash, ciphertext, this_hash)"
            " VALUES (?,?,?,?,?,?,?)",
            (record.log_id, record.seq, record.at, record.kind, record.prev_hash, record.ciphertext, record.this_hash),
        )
        if kind in CHECKPOINT_KINDS or seq % CHECKPOINT_EVERY == 0:
            self._checkpoint(conn, log_id, seq, record.this_hash, record.at)

    def _checkpoint(self, conn: sqlite3.Connection, log_id: str, seq: int, head_hash: str, at: str) -> Checkpoint:
        if self.keys is None or self.keys.signing_key is None:
            raise StoreError(
                f"no audit signing key for {self.path}: checkpoints cannot be signed. Keep keys/signing.key in"
                f" the home directory or set {SIGNING_KEY_ENV}"
            )
        counter = int(conn.execute("SELECT COALESCE(MAX(counter), 0) + 1 FROM audit_checkpoints").fetchone()[0])
        cp = sign_checkpoint(self.keys.signing_key, log_id=log_id, seq=seq, head_hash=head_hash, counter=counter, at=at)
        conn.execute(
            "INSERT INTO audit_checkpoints (counter, log_id, seq, head_hash, at, key_id, signature)"
            " VALUES (?,?,?,?,?,?,?)",
            (cp.counter, cp.log_id, cp.seq, cp.head_hash, cp.at, cp.key_id, cp.signature),
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

    def _keep_checkpoints_elsewhere(self) -> None:
        """After commit, the newest checkpoint also goes to a file outside the database (rollback evidence)."""
        pending, self._pending_checkpoints = self._pending_checkpoints, []
        if not pending or self.trusted_checkpoint_path is None:
            return
        newest = max(pending, key=lambda cp: cp.counter)
        path = self.trusted_checkpoint_path
        try:
            if path.exists() and read_checkpoint_file(path).counter >= newest.counter:
                return
        except AuditError:
            pass  # a damaged file is replaced by a good one; verify reports what it read before
        write_checkpoint_file(path, newest)

    def audit_records(self, log_id: str | None = None) -> Iterator[AuditRecord]:
        query = "SELECT log_id, seq, at, kind, prev_hash, ciphertext, this_hash FROM audit_records"
        params: tuple[str, ...] = ()
        if log_id is not None:
            query += " WHERE log_id = ?"
            params = (log_id,)
        for row in self._conn.execute(query + " ORDER BY log_id, seq", params):
            yield AuditRecord(row[0], int(row[1]), row[2], row[3], row[4], bytes(row[5]), row[6])

    def audit_checkpoints(self, log_id: str | None = None) -> list[Checkpoint]:
        query = "SELECT log_id, seq, head_hash, counter, at, key_id, signature FROM audit_checkpoints"
        params: tuple[str, ...] = ()
        if log_id is not None:
            query += " WHERE log_id = ?"
            params = (log_id,)
        rows = self._conn.execute(query + " ORDER BY counter", params).fetchall()
        return [Checkpoint(r[0], int(r[1]), r[2], int(r[3]), r[4], r[5], r[6]) for r in rows]

    def events(self, operation_id: str) -> list[Event]:
        """The decrypted trail of one log; needs the cipher key, and says so when it is missing."""
        if self._cipher is None:
            raise StoreError(
                f"no audit encryption key for {self.path}: the log is verifiable but not readable here."
                f" Restore keys/audit.key in the home directory or set {AUDIT_KEY_ENV}"
            )
        events = []
        for record in self.audit_records(operation_id):
            try:
                data = open_record(self._cipher, record)
            except AuditError:
                raise StoreError(
                    f"audit record {record.seq} of {operation_id} cannot be decrypted with this key;"
                    " run `pollwarden audit verify` to check the log"
                ) from None
            events.append(Event(operation_id, record.seq, parse_rfc3339(record.at), record.kind, data))
        return events
