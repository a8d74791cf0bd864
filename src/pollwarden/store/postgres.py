"""PostgreSQL backend: one database shared by a fleet of workers on many machines.

It keeps the SQLite backend's records, fenced leases, decisions, submissions and sealed audit chain, with
the same method signatures and results (one store test suite runs against both). What a fleet adds:

- Connections come from a psycopg pool in autocommit mode, so nothing is ever left open in an implicit
  transaction; every write is one explicit `conn.transaction()`.
- Fleet claims (`claim_due`) lock due rows with `FOR UPDATE SKIP LOCKED`: claimers on many machines never
  wait on each other and never take the same row, and the token still grows by one per claim.
- Many processes append to one audit log. Each append takes a transaction-scoped advisory lock on its log
  before reading the head, so two writers cannot both chain onto one head (a fork would look exactly like
  tampering to the verifier). Checkpoint counters come from a sequence, so logs never queue on each other.
- Time: like the SQLite backend, every method takes `now` from its caller, so tests drive time explicitly
  and one suite fits both. The fleet worker passes database time (`db_now()`, which is `SELECT now()`), so
  machines whose clocks disagree still agree on when a lease expires (DESIGN.md: "time for leases comes
  from the database clock where there is one").
- The schema is versioned (`migrations`); a store refuses a database that `pollwarden db upgrade` has not
  brought to this code's version, and one that a newer pollwarden has moved past.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

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
from . import migrations
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
from .sqlite import CHECKPOINT_EVERY, CHECKPOINT_KINDS, _holder_dead

__all__ = ["PostgresStore", "is_postgres_url", "redact_url", "upgrade_database"]

CONNECT_TIMEOUT = 10
"""Seconds to wait for the server when none is given in the URL: a worker should fail, not hang."""

_SECRET_PARAMS = frozenset({"password", "sslpassword"})

Conn = psycopg.Connection[TupleRow]


def is_postgres_url(target: str | Path) -> bool:
    return isinstance(target, str) and target.lower().startswith(("postgresql://", "postgres://"))


def redact_url(url: str) -> str:
    """The URL without its password, for messages and `status` output (passwords never reach a log)."""
    if is_postgres_url(url):
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hosts = netloc.rpartition("@")
            user = userinfo.partition(":")[0]
            netloc = f"{user}@{hosts}" if user else hosts
        query = parts.query
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(key.lower() in _SECRET_PARAMS for key, _ in pairs):
            query = urlencode([(key, value) for key, value in pairs if key.lower() not in _SECRET_PARAMS])
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        return "the PostgreSQL database (unparseable connection string)"
    return make_conninfo("", **{key: value for key, value in params.items() if key not in _SECRET_PARAMS})


def _connect_kwargs(url: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"autocommit": True}
    try:
        if "connect_timeout" not in conninfo_to_dict(url):
            kwargs["connect_timeout"] = CONNECT_TIMEOUT
    except psycopg.Error:
        # libpq's parse error quotes the text around the fault, which may be the password: not repeated.
        raise StoreError(
            f"{redact_url(url)} is not a usable PostgreSQL URL; write it as postgresql://user@host:port/database"
        ) from None
    return kwargs


def upgrade_database(url: str) -> list[int]:
    """`pollwarden db upgrade`: bring the database to this code's schema; returns the versions applied."""
    where = redact_url(url)
    kwargs = _connect_kwargs(url)
    try:
        with psycopg.connect(url, **kwargs) as conn:
            return migrations.upgrade(conn, where)
    except psycopg.Error as exc:
        raise StoreError(f"cannot upgrade {where}: {exc}") from None


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


def _utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def _log_lock_key(log_id: str) -> int:
    """A 64-bit advisory lock key per log, computed here (not by `hashtext` in SQL) so a transaction that
    locks several logs can take them in one global order and never deadlock with another such transaction."""
    digest = hashlib.sha256(b"pollwarden-audit-log\x00" + log_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@dataclass
class _Tx:
    """One write transaction: its connection, the logs it has locked, the checkpoints it signed.

    Kept per transaction (not on the store, as SQLite does) because threads share a PostgresStore.
    """

    conn: Conn
    locked: set[str] = field(default_factory=set)
    checkpoints: list[Checkpoint] = field(default_factory=list)


_COLUMNS = "record, contract, lease_owner, lease_token, lease_expires_at"
_DECISION_COLUMNS = "request, status, decided_by, decided_at, option, note"
_GRANT_COLUMNS = "grant_id, kind, subject, scope, status, requested_at, detail, decided_by, decided_at"

_CLAIM_DUE = """
WITH due AS (
    SELECT operation_id, lease_owner AS previous_owner
    FROM operations
    WHERE phase = 'active' AND next_poll_at <= %(now)s
      AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= %(now)s)
    ORDER BY next_poll_at, operation_id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE operations AS o
SET lease_owner = %(owner)s, lease_token = o.lease_token + 1, lease_expires_at = %(expires)s
FROM due
WHERE o.operation_id = due.operation_id
RETURNING o.operation_id, o.record, o.lease_token, o.next_poll_at, due.previous_owner
"""


class PostgresStore:
    shared_across_threads = True
    """Its pool hands each thread its own connection, so one instance serves a whole worker process."""
    """Records and their audit trail in a shared PostgreSQL database; safe to share between threads.

    `keys` and `trusted_checkpoint_path` mean what they mean for `SQLiteStore`: keys may lack the cipher or
    the signing key (then only what needs them fails, saying which), and the trusted checkpoint file is kept
    on this machine, outside the database, as evidence against a database restored from an older copy.
    """

    def __init__(
        self,
        url: str,
        *,
        keys: AuditKeys | None = None,
        trusted_checkpoint_path: Path | None = None,
        min_size: int = 1,
        max_size: int = 4,
    ) -> None:
        self.path = redact_url(url)
        self.keys = keys
        self._cipher = AuditCipher(keys.cipher_key) if keys is not None and keys.cipher_key else None
        self.trusted_checkpoint_path = trusted_checkpoint_path
        self._checkpoint_file_lock = threading.Lock()
        kwargs = _connect_kwargs(url)
        try:
            with psycopg.connect(url, **kwargs) as conn:
                migrations.check(conn, self.path)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the state database {self.path}: {exc}") from None
        self._pool: ConnectionPool[Conn] = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            open=True,
            kwargs=kwargs,
            name="pollwarden",
            timeout=30.0,
        )

    def close(self) -> None:
        self._pool.close()

    @contextmanager
    def _connection(self) -> Iterator[Conn]:
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.OperationalError as exc:
            # Includes the pool giving up: the server went away or every connection is busy.
            raise StoreError(f"the state database {self.path} is unavailable: {exc}") from None

    @contextmanager
    def _tx(self) -> Iterator[_Tx]:
        with self._connection() as conn:
            tx = _Tx(conn)
            with conn.transaction():
                yield tx
        self._keep_checkpoints_elsewhere(tx.checkpoints)

    def pace(
        self, provider: str, now: datetime, *, interval: timedelta | None, horizon: timedelta
    ) -> tuple[datetime, bool] | None:
        with self._tx() as tx:
            if interval is not None:
                tx.conn.execute(
                    "INSERT INTO provider_pacing (provider, interval_seconds, next_slot_at) VALUES (%s,%s,%s)"
                    " ON CONFLICT (provider) DO UPDATE SET interval_seconds = excluded.interval_seconds",
                    (provider, interval.total_seconds(), now),
                )
            row = tx.conn.execute(
                "SELECT interval_seconds, next_slot_at FROM provider_pacing WHERE provider = %s FOR UPDATE",
                (provider,),
            ).fetchone()
            if row is None:
                return None
            slot = max(now, _utc(row[1]))
            if slot - now > horizon:
                return slot, False
            tx.conn.execute(
                "UPDATE provider_pacing SET next_slot_at = %s WHERE provider = %s",
                (slot + timedelta(seconds=float(row[0])), provider),
            )
            return slot, True

    def next_due(self) -> datetime | None:
        """The earliest next_poll_at among active operations (leased or not): how long a worker may sleep."""
        with self._connection() as conn:
            row = conn.execute("SELECT MIN(next_poll_at) FROM operations WHERE phase = 'active'").fetchone()
        return None if row is None else _utc_or_none(row[0])

    def db_now(self) -> datetime:
        """The database clock: the one time every worker of a fleet agrees on, for leases and due times."""
        with self._connection() as conn:
            row = conn.execute("SELECT now()").fetchone()
        assert row is not None
        return _utc(row[0])

    # -- records -------------------------------------------------------------------------------------

    def create(self, record: OperationRecord, contract_text: str, event: Mapping[str, Any]) -> None:
        with self._tx() as tx:
            self._insert_operation(tx, record, contract_text)
            self._append(tx, record.operation_id, "created", event, record.created_at)

    def _insert_operation(self, tx: _Tx, record: OperationRecord, contract_text: str) -> None:
        # ON CONFLICT, not a prior SELECT: two machines creating one id at once must not both pass a check.
        cursor = tx.conn.execute(
            "INSERT INTO operations (operation_id, job_id, contract_name, phase, next_poll_at, deadline_at,"
            " status_requests_used, max_status_requests, record, contract, created_at, updated_at)"
            " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (operation_id) DO NOTHING",
            (
                record.operation_id,
                record.job_id,
                record.contract_name,
                record.phase.value,
                record.next_poll_at,
                record.deadline_at,
                record.status_requests_used,
                record.plan.max_status_requests,
                json.dumps(record_to_json(record)),
                contract_text,
                record.created_at,
                record.created_at,
            ),
        )
        if cursor.rowcount != 1:
            raise OperationExists(f"operation {record.operation_id} already exists")

    @staticmethod
    def _stored(row: Sequence[Any]) -> Stored:
        record_text, contract_text, owner, token, expires = row
        return Stored(
            record=record_from_json(json.loads(record_text)),
            contract_text=contract_text,
            lease_owner=owner,
            lease_token=int(token),
            lease_expires_at=_utc_or_none(expires),
        )

    def get(self, operation_id: str) -> Stored | None:
        with self._connection() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM operations WHERE operation_id = %s", (operation_id,)).fetchone()
        return None if row is None else self._stored(row)

    def all(self) -> list[Stored]:
        # operation_id breaks ties that SQLite leaves to its scan order; a listing should not shuffle.
        with self._connection() as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM operations ORDER BY created_at, operation_id").fetchall()
        return [self._stored(row) for row in rows]

    # -- leases --------------------------------------------------------------------------------------

    def claim(
        self, operation_id: str, owner: str, now: datetime, ttl: timedelta
    ) -> tuple[Lease, OperationRecord] | None:
        with self._tx() as tx:
            row = tx.conn.execute(
                f"SELECT {_COLUMNS} FROM operations WHERE operation_id = %s FOR UPDATE", (operation_id,)
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
            expires = now + ttl
            updated = tx.conn.execute(
                "UPDATE operations SET lease_owner = %s, lease_token = lease_token + 1, lease_expires_at = %s"
                " WHERE operation_id = %s RETURNING lease_token",
                (owner, expires, operation_id),
            ).fetchone()
            assert updated is not None  # the row is locked FOR UPDATE above
            token = int(updated[0])
            if stored.lease_owner is not None and stored.lease_owner != owner:
                self._append(
                    tx,
                    operation_id,
                    "lease_taken_over",
                    {"previous_owner": stored.lease_owner, "owner": owner, "token": token},
                    now,
                )
            return Lease(operation_id, owner, token, expires), stored.record

    def claim_due(self, owner: str, now: datetime, ttl: timedelta, limit: int) -> list[tuple[Lease, OperationRecord]]:
        """The fleet claim: up to `limit` due operations that are unleased or whose lease expired, earliest
        due first. Rows another claimer holds locked are skipped, not waited for, so no two claimers ever
        get the same operation. A lease of a dead holder is taken only once it expires: a process's death
        can only be seen from its own host, which `claim` covers."""
        if limit <= 0:
            return []
        expires = now + ttl
        with self._tx() as tx:
            rows = tx.conn.execute(
                _CLAIM_DUE, {"now": now, "limit": limit, "owner": owner, "expires": expires}
            ).fetchall()
            rows.sort(key=lambda r: (r[3], r[0]))  # RETURNING has no order; give the due order back
            taken_over = [row for row in rows if row[4] is not None and row[4] != owner]
            self._lock_logs(tx, [row[0] for row in taken_over])
            for operation_id, _, token, _, previous in taken_over:
                self._append(
                    tx,
                    operation_id,
                    "lease_taken_over",
                    {"previous_owner": previous, "owner": owner, "token": int(token)},
                    now,
                )
            return [
                (Lease(operation_id, owner, int(token), expires), record_from_json(json.loads(record_text)))
                for operation_id, record_text, token, _, _ in rows
            ]

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
        with self._tx() as tx:
            if not self._update_fenced(tx, lease, record, now, release=release):
                return False
            for kind, data in events:
                self._append(tx, lease.operation_id, kind, data, now)
            if decision is not None:
                self._insert_decision(tx, decision, now)
            return True

    def _update_fenced(self, tx: _Tx, lease: Lease, record: OperationRecord, now: datetime, *, release: bool) -> bool:
        """The fence: the row changes only while it still carries this writer's token (DESIGN.md step 4)."""
        cursor = tx.conn.execute(
            "UPDATE operations SET phase = %s, next_poll_at = %s, deadline_at = %s, status_requests_used = %s,"
            " max_status_requests = %s, record = %s, updated_at = %s,"
            " lease_owner = CASE WHEN %s THEN NULL ELSE lease_owner END,"
            " lease_expires_at = CASE WHEN %s THEN NULL ELSE lease_expires_at END"
            " WHERE operation_id = %s AND lease_token = %s AND lease_owner = %s",
            (
                record.phase.value,
                record.next_poll_at,
                record.deadline_at,
                record.status_requests_used,
                record.plan.max_status_requests,
                json.dumps(record_to_json(record)),
                now,
                release,
                release,
                lease.operation_id,
                lease.token,
                lease.owner,
            ),
        )
        return cursor.rowcount == 1

    def release(self, lease: Lease) -> None:
        with self._tx() as tx:
            tx.conn.execute(
                "UPDATE operations SET lease_owner = NULL, lease_expires_at = NULL"
                " WHERE operation_id = %s AND lease_token = %s AND lease_owner = %s",
                (lease.operation_id, lease.token, lease.owner),
            )

    # -- decisions ----------------------------------------------------------------------------------------

    def _insert_decision(self, tx: _Tx, request: DecisionRequest, now: datetime) -> None:
        tx.conn.execute(
            "INSERT INTO decisions (decision_id, operation_id, status, created_at, request) VALUES (%s,%s,%s,%s,%s)",
            (request.decision_id, request.operation_id, "open", now, json.dumps(request.to_json())),
        )
        self._append(tx, request.operation_id, "decision_requested", request.to_json(), now)

    @staticmethod
    def _decision(row: Sequence[Any]) -> StoredDecision:
        request, status, by, at, option, note = row
        return StoredDecision(
            request=DecisionRequest.from_json(json.loads(request)),
            status=status,
            decided_by=by,
            decided_at=_utc_or_none(at),
            option=None if option is None else int(option),
            note=note,
        )

    def decisions(self, operation_id: str | None = None, *, open_only: bool = False) -> list[StoredDecision]:
        query = f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE true"
        params: list[Any] = []
        if operation_id is not None:
            query += " AND operation_id = %s"
            params.append(operation_id)
        if open_only:
            query += " AND status = 'open'"
        with self._connection() as conn:
            rows = conn.execute(query + " ORDER BY created_at, decision_id", params).fetchall()
        return [self._decision(row) for row in rows]

    def get_decision(self, decision_id: str) -> StoredDecision | None:
        with self._connection() as conn:
            row = conn.execute(
                f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE decision_id = %s", (decision_id,)
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
        with self._tx() as tx:
            row = tx.conn.execute(
                f"SELECT {_COLUMNS} FROM operations WHERE operation_id = %s FOR UPDATE", (lease.operation_id,)
            ).fetchone()
            target = record if record is not None else (self._stored(row).record if row else None)
            if target is None or not self._update_fenced(tx, lease, target, now, release=True):
                return False
            cursor = tx.conn.execute(
                "UPDATE decisions SET status = %s, decided_by = %s, decided_at = %s, option = %s, note = %s"
                " WHERE decision_id = %s AND status = 'open'",
                (status, by, now, option, note, decision_id),
            )
            if cursor.rowcount != 1:
                raise DecisionTaken(f"decision {decision_id} was decided by someone else a moment ago")
            if record is not None:
                # The operation moved on: every other question about the old stop is void.
                tx.conn.execute(
                    "UPDATE decisions SET status = 'expired' WHERE operation_id = %s AND status = 'open'",
                    (lease.operation_id,),
                )
            for kind, data in events:
                self._append(tx, lease.operation_id, kind, data, now)
            return True

    # -- submissions --------------------------------------------------------------------------------------

    def record_submission(self, submission: Submission, event: Mapping[str, Any]) -> None:
        exists = OperationExists(f"operation {submission.operation_id} already exists")
        with self._tx() as tx:
            found = tx.conn.execute(
                "SELECT 1 FROM operations WHERE operation_id = %s", (submission.operation_id,)
            ).fetchone()
            if found:
                raise exists
            cursor = tx.conn.execute(
                "INSERT INTO submissions (operation_id, fingerprint, idempotency_token, body, state, job_id,"
                " status_location, created_at, updated_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)"
                " ON CONFLICT (operation_id) DO NOTHING",
                (
                    submission.operation_id,
                    submission.fingerprint,
                    submission.idempotency_token,
                    submission.body,
                    submission.state,
                    submission.job_id,
                    submission.status_location,
                    submission.created_at,
                    submission.created_at,
                ),
            )
            if cursor.rowcount != 1:
                raise exists
            self._append(tx, submission.operation_id, "submission_intent", event, submission.created_at)

    def get_submission(self, operation_id: str) -> Submission | None:
        with self._connection() as conn:
            row = conn.execute(
                "SELECT operation_id, fingerprint, idempotency_token, body, state, job_id, status_location,"
                " created_at FROM submissions WHERE operation_id = %s",
                (operation_id,),
            ).fetchone()
        if row is None:
            return None
        return Submission(row[0], row[1], row[2], bytes(row[3]), row[4], row[5], row[6], _utc(row[7]))

    def accept_submission(
        self, submission: Submission, record: OperationRecord, contract_text: str, event: Mapping[str, Any]
    ) -> None:
        with self._tx() as tx:
            tx.conn.execute(
                "UPDATE submissions SET state = 'accepted', job_id = %s, status_location = %s, updated_at = %s"
                " WHERE operation_id = %s",
                (record.job_id, record.status_location, record.created_at, submission.operation_id),
            )
            self._insert_operation(tx, record, contract_text)
            self._append(tx, record.operation_id, "submitted", event, record.created_at)

    def mark_submission(self, operation_id: str, state: str, event: Mapping[str, Any], at: datetime) -> None:
        with self._tx() as tx:
            tx.conn.execute(
                "UPDATE submissions SET state = %s, updated_at = %s WHERE operation_id = %s",
                (state, at, operation_id),
            )
            self._append(tx, operation_id, f"submission_{state}", event, at)

    # -- grants (agent approvals) ------------------------------------------------------------------------

    def request_grant(self, grant: Grant, log_id: str) -> None:
        with self._tx() as tx:
            tx.conn.execute(
                "INSERT INTO grants (grant_id, kind, subject, scope, status, requested_at, detail)"
                " VALUES (%s,%s,%s,%s,%s,%s,%s)",
                (
                    grant.grant_id,
                    grant.kind,
                    grant.subject,
                    grant.scope,
                    grant.status,
                    grant.requested_at,
                    json.dumps(dict(grant.detail), sort_keys=True),
                ),
            )
            self._append(tx, log_id, f"{grant.kind}_approval_requested", grant.to_json(), grant.requested_at)

    @staticmethod
    def _grant(row: Sequence[Any]) -> Grant:
        return Grant(
            grant_id=row[0],
            kind=row[1],
            subject=row[2],
            scope=row[3],
            status=row[4],
            requested_at=_utc(row[5]),
            detail=json.loads(row[6]),
            decided_by=row[7],
            decided_at=_utc_or_none(row[8]),
        )

    def get_grant(self, grant_id: str) -> Grant | None:
        with self._connection() as conn:
            row = conn.execute(f"SELECT {_GRANT_COLUMNS} FROM grants WHERE grant_id = %s", (grant_id,)).fetchone()
        return None if row is None else self._grant(row)

    def grants(self, *, kind: str | None = None, status: str | None = None, subject: str | None = None) -> list[Grant]:
        query = f"SELECT {_GRANT_COLUMNS} FROM grants WHERE true"
        params: list[Any] = []
        for column, value in (("kind", kind), ("status", status), ("subject", subject)):
            if value is not None:
                query += f" AND {column} = %s"
                params.append(value)
        with self._connection() as conn:
            rows = conn.execute(query + " ORDER BY requested_at, grant_id", params).fetchall()
        return [self._grant(row) for row in rows]

    def decide_grant(
        self, grant_id: str, *, expect: str, status: str, by: str, at: datetime, log_id: str, note: str | None = None
    ) -> bool:
        """Once only across machines: the UPDATE's `status = expect` is the check, so two deciders cannot
        both win, and the loser writes no audit event."""
        with self._tx() as tx:
            cursor = tx.conn.execute(
                "UPDATE grants SET status = %s, decided_by = %s, decided_at = %s WHERE grant_id = %s AND status = %s",
                (status, by, at, grant_id, expect),
            )
            if cursor.rowcount != 1:
                return False
            self._append(tx, log_id, f"approval_{status}", {"grant_id": grant_id, "by": by, "note": note}, at)
            return True

    # -- the audit trail --------------------------------------------------------------------------------

    def append(self, operation_id: str, kind: str, data: Mapping[str, Any], at: datetime) -> None:
        with self._tx() as tx:
            self._append(tx, operation_id, kind, data, at)

    def _lock_logs(self, tx: _Tx, log_ids: Iterable[str]) -> None:
        """Hold these logs' heads until commit, in key order: the same order every transaction uses."""
        for log_id in sorted(set(log_ids) - tx.locked, key=_log_lock_key):
            tx.conn.execute("SELECT pg_advisory_xact_lock(%s)", (_log_lock_key(log_id),))
            tx.locked.add(log_id)

    def _append(self, tx: _Tx, log_id: str, kind: str, data: Mapping[str, Any], at: datetime) -> None:
        """Seal and chain one event onto its log. The head is read only after the log's lock is held, and
        the lock is held until commit, so the next writer reads this record as its head."""
        if self._cipher is None:
            raise StoreError(
                f"no audit encryption key for {self.path}: the log cannot be written. Keep keys/audit.key in"
                f" the home directory or set {AUDIT_KEY_ENV}"
            )
        self._lock_logs(tx, [log_id])
        head = tx.conn.execute(
            "SELECT seq, this_hash FROM audit_records WHERE log_id = %s ORDER BY seq DESC LIMIT 1", (log_id,)
        ).fetchone()
        seq, prev_hash = (int(head[0]) + 1, str(head[1])) if head else (1, GENESIS_HASH)
        record = seal_record(
            self._cipher, log_id=log_id, seq=seq, at=format_rfc3339(at), kind=kind, prev_hash=prev_hash, payload=data
        )
        tx.conn.execute(
            "INSERT INTO audit_records (log_id, seq, at, kind, prev_hash, ciphertext, this_hash)"
            " VALUES (%s,%s,%s,%s,%s,%s,%s)",
            (record.log_id, record.seq, record.at, record.kind, record.prev_hash, record.ciphertext, record.this_hash),
        )
        if kind in CHECKPOINT_KINDS or seq % CHECKPOINT_EVERY == 0:
            self._checkpoint(tx, log_id, seq, record.this_hash, record.at)

    def _checkpoint(self, tx: _Tx, log_id: str, seq: int, head_hash: str, at: str) -> Checkpoint:
        if self.keys is None or self.keys.signing_key is None:
            raise StoreError(
                f"no audit signing key for {self.path}: checkpoints cannot be signed. Keep keys/signing.key in"
                f" the home directory or set {SIGNING_KEY_ENV}"
            )
        row = tx.conn.execute("SELECT nextval('audit_checkpoint_counter')").fetchone()
        assert row is not None
        cp = sign_checkpoint(
            self.keys.signing_key, log_id=log_id, seq=seq, head_hash=head_hash, counter=int(row[0]), at=at
        )
        tx.conn.execute(
            "INSERT INTO audit_checkpoints (counter, log_id, seq, head_hash, at, key_id, signature)"
            " VALUES (%s,%s,%s,%s,%s,%s,%s)",
            (cp.counter, cp.log_id, cp.seq, cp.head_hash, cp.at, cp.key_id, cp.signature),
        )
        tx.checkpoints.append(cp)
        return cp

    def checkpoint_heads(self, at: datetime, log_ids: Sequence[str] | None = None) -> list[Checkpoint]:
        """Sign the current head of each log (all, or the named ones): done before every export.

        The heads are read without taking the logs' locks: a record appended meanwhile comes after a head
        that is still valid, and locking every log of a large fleet at once would exhaust the lock table.
        """
        made: list[Checkpoint] = []
        query = "SELECT DISTINCT ON (log_id) log_id, seq, this_hash FROM audit_records"
        params: list[Any] = []
        if log_ids is not None:
            query += " WHERE log_id = ANY(%s)"
            params.append(list(log_ids))
        with self._tx() as tx:
            rows = tx.conn.execute(query + " ORDER BY log_id, seq DESC", params).fetchall()
            for log_id, seq, head_hash in rows:
                made.append(self._checkpoint(tx, log_id, int(seq), head_hash, format_rfc3339(at)))
        return made

    def _keep_checkpoints_elsewhere(self, pending: list[Checkpoint]) -> None:
        """After commit, the newest checkpoint also goes to a file outside the database (rollback evidence)."""
        if not pending or self.trusted_checkpoint_path is None:
            return
        newest = max(pending, key=lambda cp: cp.counter)
        path = self.trusted_checkpoint_path
        with self._checkpoint_file_lock:  # threads of this process; the file only ever moves forward
            try:
                if path.exists() and read_checkpoint_file(path).counter >= newest.counter:
                    return
            except AuditError:
                pass  # a damaged file is replaced by a good one; verify reports what it read before
            write_checkpoint_file(path, newest)

    def audit_records(self, log_id: str | None = None) -> Iterator[AuditRecord]:
        """Streams through a server-side cursor: an export of a fleet's whole history need not fit in memory."""
        query = "SELECT log_id, seq, at, kind, prev_hash, ciphertext, this_hash FROM audit_records"
        params: tuple[str, ...] = ()
        if log_id is not None:
            query += " WHERE log_id = %s"
            params = (log_id,)
        with self._connection() as conn, conn.transaction(), conn.cursor(name="pollwarden_audit_records") as cursor:
            cursor.itersize = 2000
            cursor.execute(query + " ORDER BY log_id, seq", params)
            for row in cursor:
                yield AuditRecord(row[0], int(row[1]), row[2], row[3], row[4], bytes(row[5]), row[6])

    def audit_checkpoints(self, log_id: str | None = None) -> list[Checkpoint]:
        query = "SELECT log_id, seq, head_hash, counter, at, key_id, signature FROM audit_checkpoints"
        params: tuple[str, ...] = ()
        if log_id is not None:
            query += " WHERE log_id = %s"
            params = (log_id,)
        with self._connection() as conn:
            rows = conn.execute(query + " ORDER BY counter", params).fetchall()
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
