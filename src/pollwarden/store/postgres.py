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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.abc import Params
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from ..audit import AuditKeys, AuditRecord, Checkpoint, sign_checkpoint
from ..core.durations import format_rfc3339
from ..core.escalation import DecisionRequest
from ..core.record import OperationRecord
from . import migrations
from .base import DecisionTaken, Grant, Lease, NewEvent, OperationExists, Stored, StoredDecision, StoreError, Submission
from .common import (
    AUDIT_RECORD_COLUMNS,
    CHECKPOINT_COLUMNS,
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
    record_from_text,
    record_values,
    seal_next,
    stored_from_row,
    submission_from_row,
    taken_over,
    takeover_event,
)

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


def _timestamptz(value: datetime) -> datetime:
    """A time as a timestamptz parameter: psycopg adapts an aware datetime as it is."""
    return value


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


class PostgresStore(AuditedStore):
    shared_across_threads = True
    """Its pool hands each thread its own connection, so one instance serves a whole worker process."""
    """Records and their audit trail in a shared PostgreSQL database; safe to share between threads.

    `keys` and `trusted_checkpoint_path` mean what they mean for `SQLiteStore` (see `AuditedStore`): the
    trusted checkpoint file is kept on this machine, outside the database, as evidence against a database
    restored from an older copy.
    """

    path: str

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
        super().__init__(keys=keys, trusted_checkpoint_path=trusted_checkpoint_path)
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

    def _fetchone(self, query: str, params: Params | None = None) -> TupleRow | None:
        """One read outside any write transaction (autocommit: nothing stays open after it)."""
        with self._connection() as conn:
            return conn.execute(query, params).fetchone()

    def _fetchall(self, query: str, params: Params | None = None) -> list[TupleRow]:
        with self._connection() as conn:
            return conn.execute(query, params).fetchall()

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
        row = self._fetchone("SELECT MIN(next_poll_at) FROM operations WHERE phase = 'active'")
        return None if row is None or row[0] is None else _utc(row[0])

    def db_now(self) -> datetime:
        """The database clock: the one time every worker of a fleet agrees on, for leases and due times."""
        row = self._fetchone("SELECT now()")
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
                *record_values(record, _timestamptz),
                contract_text,
                record.created_at,
                record.created_at,
            ),
        )
        if cursor.rowcount != 1:
            raise OperationExists(f"operation {record.operation_id} already exists")

    def get(self, operation_id: str) -> Stored | None:
        row = self._fetchone(f"SELECT {STORED_COLUMNS} FROM operations WHERE operation_id = %s", (operation_id,))
        return None if row is None else stored_from_row(row, _utc)

    def all(self) -> list[Stored]:
        # operation_id breaks ties that SQLite leaves to its scan order; a listing should not shuffle.
        rows = self._fetchall(f"SELECT {STORED_COLUMNS} FROM operations ORDER BY created_at, operation_id")
        return [stored_from_row(row, _utc) for row in rows]

    # -- leases --------------------------------------------------------------------------------------

    def claim(
        self, operation_id: str, owner: str, now: datetime, ttl: timedelta
    ) -> tuple[Lease, OperationRecord] | None:
        with self._tx() as tx:
            row = tx.conn.execute(
                f"SELECT {STORED_COLUMNS} FROM operations WHERE operation_id = %s FOR UPDATE", (operation_id,)
            ).fetchone()
            if row is None:
                raise StoreError(f"operation {operation_id} does not exist")
            stored = stored_from_row(row, _utc)
            if lease_held(stored, owner, now):
                return None
            expires = now + ttl
            updated = tx.conn.execute(
                "UPDATE operations SET lease_owner = %s, lease_token = lease_token + 1, lease_expires_at = %s"
                " WHERE operation_id = %s RETURNING lease_token",
                (owner, expires, operation_id),
            ).fetchone()
            assert updated is not None  # the row is locked FOR UPDATE above
            token = int(updated[0])
            if taken_over(stored.lease_owner, owner):
                self._append(
                    tx, operation_id, "lease_taken_over", takeover_event(stored.lease_owner, owner, token), now
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
            takeovers = [row for row in rows if taken_over(row[4], owner)]
            self._lock_logs(tx, [row[0] for row in takeovers])
            for operation_id, _, token, _, previous in takeovers:
                self._append(tx, operation_id, "lease_taken_over", takeover_event(previous, owner, int(token)), now)
            return [
                (Lease(operation_id, owner, int(token), expires), record_from_text(text))
                for operation_id, text, token, _, _ in rows
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
        hold_until: datetime | None = None,
    ) -> bool:
        with self._tx() as tx:
            if not self._update_fenced(tx, lease, record, now, release=release, hold_until=hold_until):
                return False
            for kind, data in events:
                self._append(tx, lease.operation_id, kind, data, now)
            if decision is not None:
                self._insert_decision(tx, decision, now)
            return True

    def _update_fenced(
        self,
        tx: _Tx,
        lease: Lease,
        record: OperationRecord,
        now: datetime,
        *,
        release: bool,
        hold_until: datetime | None = None,
    ) -> bool:
        """The fence: the row changes only while it still carries this writer's token (DESIGN.md step 4)."""
        cursor = tx.conn.execute(
            "UPDATE operations SET phase = %s, next_poll_at = %s, deadline_at = %s, status_requests_used = %s,"
            " max_status_requests = %s, record = %s, updated_at = %s,"
            " lease_owner = CASE WHEN %s THEN NULL ELSE lease_owner END,"
            " lease_expires_at = CASE WHEN %s THEN NULL ELSE COALESCE(%s, lease_expires_at) END"
            " WHERE operation_id = %s AND lease_token = %s AND lease_owner = %s",
            (
                *record_values(record, _timestamptz),
                now,
                release,
                release,
                None if hold_until is None else _timestamptz(hold_until),
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
            (request.decision_id, request.operation_id, "open", now, decision_request_text(request)),
        )
        self._append(tx, request.operation_id, "decision_requested", request.to_json(), now)

    def decisions(self, operation_id: str | None = None, *, open_only: bool = False) -> list[StoredDecision]:
        query = f"SELECT {DECISION_COLUMNS} FROM decisions WHERE true"
        params: list[Any] = []
        if operation_id is not None:
            query += " AND operation_id = %s"
            params.append(operation_id)
        if open_only:
            query += " AND status = 'open'"
        rows = self._fetchall(query + " ORDER BY created_at, decision_id", params)
        return [decision_from_row(row, _utc) for row in rows]

    def get_decision(self, decision_id: str) -> StoredDecision | None:
        row = self._fetchone(f"SELECT {DECISION_COLUMNS} FROM decisions WHERE decision_id = %s", (decision_id,))
        return None if row is None else decision_from_row(row, _utc)

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
                f"SELECT {STORED_COLUMNS} FROM operations WHERE operation_id = %s FOR UPDATE", (lease.operation_id,)
            ).fetchone()
            target = record if record is not None else (stored_from_row(row, _utc).record if row else None)
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
        row = self._fetchone(f"SELECT {SUBMISSION_COLUMNS} FROM submissions WHERE operation_id = %s", (operation_id,))
        return None if row is None else submission_from_row(row, _utc)

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
                    grant_detail_text(grant),
                ),
            )
            self._append(tx, log_id, f"{grant.kind}_approval_requested", grant.to_json(), grant.requested_at)

    def get_grant(self, grant_id: str) -> Grant | None:
        row = self._fetchone(f"SELECT {GRANT_COLUMNS} FROM grants WHERE grant_id = %s", (grant_id,))
        return None if row is None else grant_from_row(row, _utc)

    def grants(self, *, kind: str | None = None, status: str | None = None, subject: str | None = None) -> list[Grant]:
        query = f"SELECT {GRANT_COLUMNS} FROM grants WHERE true"
        params: list[Any] = []
        for column, value in (("kind", kind), ("status", status), ("subject", subject)):
            if value is not None:
                query += f" AND {column} = %s"
                params.append(value)
        rows = self._fetchall(query + " ORDER BY requested_at, grant_id", params)
        return [grant_from_row(row, _utc) for row in rows]

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
        cipher = self._writing_cipher()
        self._lock_logs(tx, [log_id])
        head = tx.conn.execute(
            "SELECT seq, this_hash FROM audit_records WHERE log_id = %s ORDER BY seq DESC LIMIT 1", (log_id,)
        ).fetchone()
        record, checkpoint = seal_next(cipher, head, log_id=log_id, kind=kind, data=data, at=at)
        tx.conn.execute(
            f"INSERT INTO audit_records ({AUDIT_RECORD_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s)",
            audit_record_values(record),
        )
        if checkpoint:
            self._checkpoint(tx, log_id, record.seq, record.this_hash, record.at)

    def _checkpoint(self, tx: _Tx, log_id: str, seq: int, head_hash: str, at: str) -> Checkpoint:
        signing_key = self._signing_key()
        row = tx.conn.execute("SELECT nextval('audit_checkpoint_counter')").fetchone()
        assert row is not None
        cp = sign_checkpoint(signing_key, log_id=log_id, seq=seq, head_hash=head_hash, counter=int(row[0]), at=at)
        tx.conn.execute(
            f"INSERT INTO audit_checkpoints ({CHECKPOINT_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s)",
            checkpoint_values(cp),
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

    def audit_records(self, log_id: str | None = None) -> Iterator[AuditRecord]:
        """Streams through a server-side cursor: an export of a fleet's whole history need not fit in memory."""
        query = f"SELECT {AUDIT_RECORD_COLUMNS} FROM audit_records"
        params: tuple[str, ...] = ()
        if log_id is not None:
            query += " WHERE log_id = %s"
            params = (log_id,)
        with self._connection() as conn, conn.transaction(), conn.cursor(name="pollwarden_audit_records") as cursor:
            cursor.itersize = 2000
            cursor.execute(query + " ORDER BY log_id, seq", params)
            for row in cursor:
                yield audit_record_from_row(row)

    def audit_checkpoints(self, log_id: str | None = None) -> list[Checkpoint]:
        query = f"SELECT {CHECKPOINT_COLUMNS} FROM audit_checkpoints"
        params: tuple[str, ...] = ()
        if log_id is not None:
            query += " WHERE log_id = %s"
            params = (log_id,)
        rows = self._fetchall(query + " ORDER BY counter", params)
        return [checkpoint_from_row(row) for row in rows]
