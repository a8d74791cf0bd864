"""What both store backends share that is not a transaction body: the dialect a backend speaks, the
transaction it hands the bodies, and the rows they read.

Rows come back in the column order of the `*_COLUMNS` constants below, and each `*_from_row` builds the
value from such a row. The one thing the backends store differently is time (SQLite: epoch seconds,
PostgreSQL: timestamptz), so the converters take the dialect's `Moment` for a non-null time column, and
`record_values` the dialect's way of storing one. The bodies themselves are in `trail.py` (the audit
chain) and `sql.py` (everything else).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any, Protocol

from ..audit import AuditRecord, Checkpoint, Head
from ..core.codec import RecordError, decode_record, record_to_json
from ..core.escalation import DecisionRequest
from ..core.record import OperationRecord
from .owner import holder_dead
from .records import Grant, OutboxEntry, Stored, StoredDecision, Submission, UnreadableRow

Moment = Callable[[Any], datetime]
"""A backend's reading of a non-null time column as an aware UTC datetime."""

Row = Sequence[Any]


# -- dialects and transactions -------------------------------------------------------------------------


@dataclass(frozen=True)
class Dialect:
    """What the transaction bodies need to know about the database they run on, and nothing else.

    Statements are written once with `?` placeholders; `placeholder` is what the driver wants instead.
    The defaults describe a database with one writer at a time (SQLite): a write transaction already
    holds everything, so there is nothing to lock row by row or log by log.
    """

    stamp: Callable[[datetime], Any]
    """A time as this database stores it (a parameter)."""
    moment: Moment
    """A stored time read back as an aware UTC datetime."""
    next_counter: str
    """The next audit checkpoint counter."""
    placeholder: str = "?"
    lock_row: str = ""
    """Appended to a SELECT of rows the transaction will update: the rows stay ours until commit."""
    lock_due: str = ""
    """Appended to the fleet claim's SELECT: rows another claimer holds are skipped, not waited for."""
    names_indexes: bool = False
    """Whether the reads that must use one index name it (`indexed_by`). SQLite's planner has no statistics (no store
    runs ANALYZE) and otherwise took `operations_console` (schema 9) for their `phase =` equality: the fleet claim
    sorted every active row on every claim. PostgreSQL's has statistics (autovacuum), and no such clause."""
    lock_log: str | None = None
    """A statement that holds one audit log's head until commit."""
    lock_logs: str | None = None
    """The same for many logs in one statement: its one parameter is the list of lock keys, taken in list order."""

    now: str = "(julianday('now') - 2440587.5) * 86400.0"
    """The database's own time as a stored time, in SQL (SQLite: epoch seconds): an outbox entry is due from its
    commit, by the clock the delivery loops compare against."""

    json_field: str = "json_extract({column}, '$.{key}')"
    """One top-level field of a JSON text column, as SQL text (NULL when absent): `{column}` and `{key}` are filled
    in by the caller from names it wrote itself, never from input."""
    record_reason: str = "json_extract(record, '$.reason')"
    """The stop reason inside an operation's record, in SQL: the console's filter by reason reads no record here."""

    casts: Mapping[str, str] = field(default_factory=dict)
    """How a parameter is given a type where the database cannot infer one (a VALUES list): kind -> SQL type."""

    def sql(self, query: str) -> str:
        return _placed(query, self.placeholder)

    def typed(self, kind: str) -> str:
        """A parameter of this kind ("text", "bigint", "time", "bool"), cast where the database needs it."""
        cast = self.casts.get(kind)
        return f"CAST(? AS {cast})" if cast else "?"

    def indexed_by(self, index: str) -> str:
        """After a table name: this read uses `index` (see `names_indexes`)."""
        return f" INDEXED BY {index}" if self.names_indexes else ""


@cache
def _placed(query: str, placeholder: str) -> str:
    # No statement of the store has a literal "?" or "%": the swap cannot touch anything but placeholders.
    return query if placeholder == "?" else query.replace("?", placeholder)


def marks(count: int) -> str:
    """`?,?,...` for an IN list or a VALUES row of `count` values."""
    return ",".join("?" * count)


class Cursor(Protocol):
    """The part of a DB-API cursor the bodies use (sqlite3 and psycopg both have it)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Row | None: ...

    def fetchall(self) -> Sequence[Row]: ...


@dataclass
class Tx:
    """One write transaction: how to run a statement in it, the logs it has locked, the checkpoints it
    signed (kept elsewhere after commit). Per transaction, not per store: threads share a PostgresStore."""

    run: Callable[[str, Sequence[Any]], Cursor]
    dialect: Dialect
    locked: set[str] = field(default_factory=set)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    appended: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    """Per log this transaction appended to: (its seq before, its last seq now, that record's hash)."""
    last_at: str = ""
    """The `at` of the latest record appended (RFC 3339 text, which orders as time does)."""
    outcome: bool = False
    """A record of a kind that ends or turns a story (success, stop, decision): its head goes elsewhere now."""
    head: Head | None = None
    """The signed head written just before commit, over every log."""
    heads: dict[str, tuple[int, str]] = field(default_factory=dict)
    """The head (seq, hash) of each log this transaction appended to: a batch appends several events to one
    log, and while the log is locked the head it wrote last is the head, so it is not read again."""
    vouches: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    """Per log, the row this transaction left (`store/vouching.py`): its state's hash, and its identity's when the
    transaction made the row. The head signed at commit vouches for them."""

    def vouch(self, log_id: str, state: str, identity: str | None = None) -> None:
        """The row of `log_id` as this transaction leaves it; an identity vouched earlier in it is kept."""
        known = self.vouches.get(log_id)
        self.vouches[log_id] = (state, identity if identity is not None or known is None else known[1])

    queued: list[str] = field(default_factory=list)
    """The webhook deliveries this transaction put in the outbox: the process's delivery loops are woken for them."""
    witnessed: bool = False
    """This transaction's head is queued for the witness (once, however often it is sealed)."""

    def execute(self, query: str, params: Sequence[Any] = ()) -> Cursor:
        return self.run(self.dialect.sql(query), params)

    def one(self, query: str, params: Sequence[Any] = ()) -> Row | None:
        return self.execute(query, params).fetchone()


# -- rows ----------------------------------------------------------------------------------------------

STORED_COLUMNS = (
    "operation_id, record, contract, lease_owner, lease_token, lease_expires_at, watcher, watcher_since, unreadable,"
    " contract_name"
)
"""An operation's row as `stored_from_row` reads it."""
DECISION_COLUMNS = "request, status, decided_by, decided_at, option, note"
GRANT_COLUMNS = "grant_id, kind, subject, scope, status, requested_at, detail, decided_by, decided_at"
SUBMISSION_COLUMNS = "operation_id, fingerprint, idempotency_token, body, state, job_id, status_location, created_at"
AUDIT_RECORD_COLUMNS = "log_id, seq, at, kind, prev_hash, ciphertext, this_hash"
CHECKPOINT_COLUMNS = "log_id, seq, head_hash, counter, at, key_id, signature"
HEAD_COLUMNS = "counter, prev_hash, changes, logs, records, at, head_hash, key_id, signature, vouches"
OUTBOX_COLUMNS = (
    "delivery_id, kind, subject, operation_id, head, status, attempts, created_at, next_attempt_at, queued_by,"
    " lease_owner, lease_expires_at, last_status, last_error, lease_token"
)
REPLAYED_HEAD_COLUMNS = "counter, prev_hash, changes, logs, records, at, head_hash, vouches"
"""`HEAD_COLUMNS` without the key id and signature: what a verifier replays every head by (`StoredHeads`)."""


def _optional(moment: Moment, value: Any) -> datetime | None:
    return None if value is None else moment(value)


def record_text(record: OperationRecord) -> str:
    """The record as the `record` column holds it."""
    return json.dumps(record_to_json(record))


def record_values(record: OperationRecord, stamp: Callable[[datetime], Any]) -> tuple[Any, ...]:
    """What the operations row copies out of the record, beside its key: phase, next_poll_at, deadline_at,
    status_requests_used, max_status_requests and the record itself, in that order (`stamp` stores a time)."""
    return (
        record.phase.value,
        stamp(record.next_poll_at),
        stamp(record.deadline_at),
        record.status_requests_used,
        record.plan.max_status_requests,
        record_text(record),
    )


def stored_from_row(row: Sequence[Any], moment: Moment) -> Stored | UnreadableRow:
    """A row in `STORED_COLUMNS` order as an operation, or as unreadable: its record cannot be decoded (any way a
    file edited by hand or broken can hold it), or a claim set it aside as such. Never raises for the record."""
    operation_id, record, contract_text, owner, token, expires, watcher, watcher_since, unreadable, name = row
    if unreadable is not None:
        return UnreadableRow(str(operation_id), str(unreadable), str(name))
    try:
        decoded = decode_record(record, str(operation_id))
    except RecordError as exc:
        return UnreadableRow(str(operation_id), str(exc), str(name))
    return Stored(
        record=decoded,
        contract_text=contract_text,
        lease_owner=owner,
        lease_token=int(token),
        lease_expires_at=_optional(moment, expires),
        watcher=watcher,
        watcher_since=_optional(moment, watcher_since),
    )


def decision_request_text(request: DecisionRequest) -> str:
    """The request as the decisions table's `request` column holds it."""
    return json.dumps(request.to_json())


def decision_from_row(row: Sequence[Any], moment: Moment) -> StoredDecision:
    request, status, by, at, option, note = row
    return StoredDecision(
        request=DecisionRequest.from_json(json.loads(request)),
        status=status,
        decided_by=by,
        decided_at=_optional(moment, at),
        option=None if option is None else int(option),
        note=note,
    )


def grant_from_row(row: Sequence[Any], moment: Moment) -> Grant:
    return Grant(
        grant_id=row[0],
        kind=row[1],
        subject=row[2],
        scope=row[3],
        status=row[4],
        requested_at=moment(row[5]),
        detail=json.loads(row[6]),
        decided_by=row[7],
        decided_at=_optional(moment, row[8]),
    )


def grant_detail_text(grant: Grant) -> str:
    """The grant's detail as the `detail` column holds it."""
    return json.dumps(dict(grant.detail), sort_keys=True)


def submission_from_row(row: Sequence[Any], moment: Moment) -> Submission:
    return Submission(row[0], row[1], row[2], bytes(row[3]), row[4], row[5], row[6], moment(row[7]))


def outbox_from_row(row: Sequence[Any], moment: Moment) -> OutboxEntry:
    """An `OUTBOX_COLUMNS` row (its last column, the lease token, is the claimer's to read)."""
    return OutboxEntry(
        delivery_id=row[0],
        kind=row[1],
        subject=row[2],
        operation_id=row[3],
        head=None if row[4] is None else int(row[4]),
        status=row[5],
        attempts=int(row[6]),
        created_at=moment(row[7]),
        next_attempt_at=moment(row[8]),
        queued_by=row[9],
        lease_owner=row[10],
        lease_expires_at=_optional(moment, row[11]),
        last_status=None if row[12] is None else int(row[12]),
        last_error=row[13],
    )


def audit_record_from_row(row: Sequence[Any]) -> AuditRecord:
    return AuditRecord(row[0], int(row[1]), row[2], row[3], row[4], bytes(row[5]), row[6])


def audit_record_values(record: AuditRecord) -> tuple[Any, ...]:
    """The record's values in `AUDIT_RECORD_COLUMNS` order, for an INSERT."""
    return (record.log_id, record.seq, record.at, record.kind, record.prev_hash, record.ciphertext, record.this_hash)


def checkpoint_from_row(row: Sequence[Any]) -> Checkpoint:
    return Checkpoint(row[0], int(row[1]), row[2], int(row[3]), row[4], row[5], row[6])


def checkpoint_values(cp: Checkpoint) -> tuple[Any, ...]:
    """The checkpoint's values in `CHECKPOINT_COLUMNS` order, for an INSERT."""
    return (cp.log_id, cp.seq, cp.head_hash, cp.counter, cp.at, cp.key_id, cp.signature)


# -- leases --------------------------------------------------------------------------------------------


def lease_held(holder: str | None, expires_at: datetime | None, owner: str, now: datetime) -> bool:
    """A claim by `owner` must wait (`claim` and the fleet's `claim_due` alike): another owner holds an unexpired
    lease, and is not a dead process on this host."""
    return (
        holder is not None
        and holder != owner
        and expires_at is not None
        and expires_at > now
        and not holder_dead(holder)
    )


def holders_query(table: str, scope: str) -> str:
    """The holders of unexpired leases on `table`'s rows in `scope` (a WHERE condition), but the claimer's own,
    with the latest expiry of each (parameters: the scope's, the claimer, now)."""
    return (
        f"SELECT lease_owner, MAX(lease_expires_at) FROM {table} WHERE {scope}"
        " AND lease_owner IS NOT NULL AND lease_owner <> ? AND lease_expires_at > ? GROUP BY lease_owner"
    )


def dead_holders(tx: Tx, query: str, params: Sequence[Any], owner: str, now: datetime) -> list[str]:
    """Of the holders `query` (a `holders_query`, with its scope's `params`) reads, those whose leases a claim by
    `owner` takes at once (`lease_held`: proved dead), sorted. Read first, one row a holder and no row locked, so
    that a claim then reads only their rows: live holders' rows, in flight elsewhere, are neither locked nor
    read, nor can they crowd a dead holder's out of the claim's limit."""
    rows = tx.execute(query, (*params, owner, tx.dialect.stamp(now))).fetchall()
    moment = tx.dialect.moment
    return sorted(str(holder) for holder, expires in rows if not lease_held(str(holder), moment(expires), owner, now))


IN_LIST = 500
"""Ids per `IN (...)` list: far below both databases' limits on parameters, few enough to plan quickly."""


def chunks(values: Sequence[str]) -> list[list[str]]:
    return [list(values[start : start + IN_LIST]) for start in range(0, len(values), IN_LIST)]


def taken_over(previous_owner: str | None, owner: str) -> bool:
    """A claim took the lease from someone else: that is an event of the operation's log."""
    return previous_owner is not None and previous_owner != owner
