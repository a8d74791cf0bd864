"""The store's transaction bodies, written once for SQLite and PostgreSQL.

Every body is one transaction (`_tx`) or one read, in statements with `?` placeholders; what differs
between the databases is only what the `Dialect` says: how a time is stored, how a row is kept locked
until commit, how the fleet claim skips rows another claimer holds, how an audit log's head is held, and
where checkpoint counters come from. Connections, the schema's version and the clock stay with each
backend (`sqlite.py`, `postgres.py`).

Every write that changes authority or budgets is fenced by the lease token the writer holds: an UPDATE
whose WHERE carries the token changes nothing when the token is stale (docs/design.md, "The step (R37) and the lease").
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from .. import events as ev
from ..audit import AuditRecord
from ..core.contract.vars import text_digest as contract_digest
from ..core.escalation import DecisionRequest
from ..core.reasons import Phase
from ..core.record import OperationRecord
from ..events.base import NewEvent
from .base import (
    PUSH_MEMORY,
    ClaimAnswer,
    Claimed,
    ClaimOf,
    DecisionTaken,
    FencedWrite,
    Grant,
    JobWatched,
    Lease,
    NewOperation,
    OperationExists,
    Resolution,
    StoredDecision,
    Submission,
)
from .common import (
    DECISION_COLUMNS,
    GRANT_COLUMNS,
    SUBMISSION_COLUMNS,
    Cursor,
    Tx,
    chunks,
    decision_from_row,
    decision_request_text,
    grant_detail_text,
    grant_from_row,
    marks,
    record_values,
    submission_from_row,
)
from .sql_contracts import ContractRegistry
from .sql_learning import LearntSamples
from .sql_pages import Pages
from .trail import job_lock_key
from .vouching import operation_identity, state_of_values

_ALREADY = "operation {} already exists"

_ROWS = 100
"""Operations per multi-row INSERT: 1,200 parameters, well within both databases' limits."""


_FENCED_TYPES = ("text", "bigint", "text", "text", "time", "time", "bigint", "bigint", "text", "time", "bool", "time")
"""The columns of one fenced write's VALUES row: id, token, owner, the record's columns, updated_at, release,
hold_until (as `Dialect.typed` names them)."""


class Fenced(NamedTuple):
    """What `_fenced_values` builds: the fence's parameters, and per write the hash of the state it leaves."""

    params: list[Any]
    states: list[str]


def _refuse_silent(write: FencedWrite) -> None:
    """A record changed with no event would change what happens next with nothing in the log to say why, and
    leave a row no head vouches for: every change of a record carries its events (a decision request is one)."""
    if not write.events and write.decision is None:
        raise ValueError(f"a write of operation {write.lease.operation_id} changes its record without an event")


class _Operations(Pages, LearntSamples):
    """Operation records, their leases and the decisions asked about them."""

    # -- records -------------------------------------------------------------------------------------

    def create(self, record: OperationRecord, contract_text: str, event: NewEvent) -> None:
        self.create_many([(record, contract_text, event)])

    def create_many(self, operations: Sequence[NewOperation]) -> None:
        if not operations:
            return
        with self._tx() as tx:
            # Every new log locked up front in the one global order (PostgreSQL): a batch never deadlocks
            # with another transaction that locks several logs.
            logs = [record.operation_id for record, _, _ in operations]
            self._refuse_second_operations(tx, [record for record, _, _ in operations])
            self._lock_logs(tx, logs)
            self._read_heads(tx, logs)  # a log may exist already: a submission's outcome was unknown
            self._insert_operations(tx, [(record, contract_text) for record, contract_text, _ in operations])
            self._append_many(tx, [(r.operation_id, event, r.created_at) for r, _, event in operations])

    def _refuse_second_operations(self, tx: Tx, records: Sequence[OperationRecord]) -> None:
        """OperationExists, with the whole transaction, when a job already has an operation under the same
        contract name or is given twice: admission looked first, but that look is a read, and two creators of one
        job started together (two watches, a watch and an enqueue) both find nothing and would each get a fresh
        budget. Decided in the write: SQLite's one writer orders the creators, PostgreSQL an advisory lock per job
        held to commit (taken before any log's, sorted, as every creating transaction takes them)."""
        jobs: dict[str, set[str]] = {}
        for record in records:
            same = jobs.setdefault(record.contract_name, set())
            if record.job_id in same:
                raise OperationExists(f"job {record.job_id} of {record.contract_name} is given twice")
            same.add(record.job_id)
        if self.dialect.lock_logs is not None:  # the statement takes the keys in list order
            keys = sorted(job_lock_key(name, job) for name, same in jobs.items() for job in same)
            tx.execute(self.dialect.lock_logs, (keys,))
        for name, same in jobs.items():
            for chunk in chunks(sorted(same)):
                found = tx.execute(
                    f"SELECT job_id, operation_id FROM operations WHERE contract_name = ? AND job_id IN"
                    f" ({marks(len(chunk))}) ORDER BY job_id, operation_id LIMIT 1",
                    (name, *chunk),
                ).fetchall()
                if found:
                    watching = str(found[0][1])
                    raise JobWatched(f"job {found[0][0]} of {name} already has operation {watching}", watching)

    def _insert_operations(self, tx: Tx, operations: Sequence[tuple[OperationRecord, str]]) -> None:
        """OperationExists, with the whole transaction, when any id is taken. ON CONFLICT, not a prior SELECT:
        two machines creating one id at once must not both pass a check. Up to _ROWS rows per statement: a
        bulk enqueue on PostgreSQL pays one round trip per chunk, not per operation."""
        stamp, moment = self.dialect.stamp, self.dialect.moment
        digests: dict[str, str] = {}
        for start in range(0, len(operations), _ROWS):
            chunk = operations[start : start + _ROWS]
            values: list[Any] = []
            for record, contract_text in chunk:
                created = stamp(record.created_at)
                copied = record_values(record, stamp)
                values += (record.operation_id, record.job_id, record.contract_name, *copied)
                values += (contract_text, created, created)
                digest = digests.get(contract_text) or digests.setdefault(contract_text, contract_digest(contract_text))
                op = record.operation_id
                identity = operation_identity(op, record.job_id, record.contract_name, digest, moment(created))
                tx.vouch(op, state_of_values(op, copied, moment), identity)
            inserted = tx.execute(
                "INSERT INTO operations (operation_id, job_id, contract_name, phase, next_poll_at, deadline_at,"
                " status_requests_used, max_status_requests, record, contract, created_at, updated_at) VALUES "
                + ",".join([f"({marks(12)})"] * len(chunk))
                + " ON CONFLICT (operation_id) DO NOTHING RETURNING operation_id",
                values,
            ).fetchall()
            if len(inserted) != len(chunk):
                new = {str(row[0]) for row in inserted}
                taken = next(record.operation_id for record, _ in chunk if record.operation_id not in new)
                raise OperationExists(_ALREADY.format(taken))

    # -- leases --------------------------------------------------------------------------------------

    def claim_then_write(
        self,
        claims: Sequence[ClaimOf],
        now: datetime,
        then: Callable[[list[ClaimAnswer]], Sequence[FencedWrite]],
    ) -> tuple[list[ClaimAnswer], list[bool]]:
        """`claim_many`, then the fenced writes `then` makes of its answers, in one transaction (one commit).
        The logs of every claimed operation are locked with the claim, in key order, before any is appended
        to: the writes' logs are among them, so no log is locked out of the one global order."""
        with self._tx() as tx:
            claimed = self._claim_in(tx, claims, now, lock_logs=True)
            writes = then(claimed)
            written = self._write_in(tx, writes, self._fenced_values(writes, now), now)
        return claimed, written

    def claim_due_then_write(
        self,
        owner: str,
        now: datetime,
        ttl: timedelta,
        limit: int,
        then: Callable[[list[Claimed]], Sequence[FencedWrite]],
        *,
        skip: Collection[str] = (),
    ) -> tuple[list[Claimed], list[bool]]:
        """`claim_due`, then the fenced writes `then` makes of what it claimed, in one transaction (one commit):
        the fleet's claims and the reservations they lead to. The claimed operations' logs are locked with the
        claim, in key order, as `claim_then_write` locks them."""
        if limit <= 0:
            return [], []
        with self._tx() as tx:
            claimed = self._claim_due_in(tx, owner, now, ttl, limit, lock_logs=True, skip=skip)
            writes = then(claimed)
            written = self._write_in(tx, writes, self._fenced_values(writes, now), now)
        return claimed, written

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
        (written,) = self.write_many([FencedWrite(lease, record, events, release, decision, hold_until)], now)
        return written

    def write_many(self, writes: Sequence[FencedWrite], now: datetime) -> list[bool]:
        """One transaction, so one commit (one fsync on SQLite) for a whole batch of polls. Rows are changed
        in operation-id order and only then are the writes' logs locked, in key order: a claim also takes rows
        before logs, so no two transactions can wait on each other in a circle."""
        if not writes:
            return []
        values = self._fenced_values(writes, now)
        with self._tx() as tx:
            return self._write_in(tx, writes, values, now)

    def _write_in(self, tx: Tx, writes: Sequence[FencedWrite], values: Fenced, now: datetime) -> list[bool]:
        """`write_many`'s body in the caller's transaction; `values` are `_fenced_values(writes, now)`. Every
        write's log is locked and its head read before the fence's answer is: on PostgreSQL the three go in one
        round trip, and a write that lost its lease (rare) appends nothing to the log it locked. Each row a
        write changed is vouched for by the commit's head, with the events that say why it changed."""
        order = sorted(range(len(writes)), key=lambda i: writes[i].lease.operation_id)
        written = [False] * len(writes)
        if not writes:
            return written
        fenced = self._update_fenced_many(tx, writes, values)
        logs = [writes[i].lease.operation_id for i in order]
        self._lock_logs(tx, logs)
        self._read_heads(tx, logs)
        changed = {str(row[0]) for row in fenced.fetchall()}
        for i in order:
            written[i] = writes[i].lease.operation_id in changed
            if written[i]:
                _refuse_silent(writes[i])
                tx.vouch(writes[i].lease.operation_id, values.states[i])
        sealed: list[AuditRecord] = []  # inserted together, before any statement that could read them
        for i in order:
            w = writes[i]
            if not written[i]:
                continue
            sealed += [self._seal_onto(tx, w.lease.operation_id, event, now) for event in w.events]
            if w.decision is not None or w.record.phase is Phase.SUCCEEDED:
                self._insert_records(tx, sealed)
                sealed = []
            if w.decision is not None:
                self._insert_decision(tx, w.decision, now)
            elif w.record.phase is Phase.SUCCEEDED:
                # A question about the running job (an agent's cancel request) has no answer left to give.
                self._expire_open(tx, w.lease.operation_id)
        self._insert_records(tx, sealed)
        self._insert_samples(tx, [writes[i].record for i in order if written[i] and writes[i].record.is_final], now)
        return written

    def _update_fenced(
        self,
        tx: Tx,
        lease: Lease,
        record: OperationRecord,
        now: datetime,
        *,
        release: bool,
        hold_until: datetime | None = None,
    ) -> bool:
        """The fence for one write (docs/design.md, "The step (R37) and the lease", steps 3 and 5): see
        `_update_fenced_many`. The row it changes is vouched for."""
        one = [FencedWrite(lease, record, (), release, None, hold_until)]
        fenced = self._fenced_values(one, now)
        if not self._update_fenced_many(tx, one, fenced).fetchall():
            return False
        tx.vouch(lease.operation_id, fenced.states[0])
        return True

    def _release_fenced(self, tx: Tx, lease: Lease, now: datetime) -> bool:
        """The fence of a write that leaves the record as it is: the lease is given back, if it is still ours."""
        return bool(
            tx.execute(
                "UPDATE operations SET lease_owner = NULL, lease_expires_at = NULL, updated_at = ?"
                " WHERE operation_id = ? AND lease_token = ? AND lease_owner = ? RETURNING operation_id",
                (self.dialect.stamp(now), lease.operation_id, lease.token, lease.owner),
            ).fetchall()
        )

    def _fenced_values(self, writes: Sequence[FencedWrite], now: datetime) -> Fenced:
        """The parameters of `_update_fenced_many` and the state each write leaves its row in (what the commit's
        head vouches for), built before the transaction: encoding the records is the costliest part of them, and
        nothing else may write while a SQLite write transaction is open."""
        stamp, moment = self.dialect.stamp, self.dialect.moment
        params: list[Any] = []
        states: list[str] = []
        for w in writes:
            hold = None if w.hold_until is None else stamp(w.hold_until)
            copied = record_values(w.record, stamp)
            params += (w.lease.operation_id, w.lease.token, w.lease.owner, *copied)
            params += (stamp(now), w.release, hold)
            states.append(state_of_values(w.lease.operation_id, copied, moment))
        return Fenced(params, states)

    def _update_fenced_many(self, tx: Tx, writes: Sequence[FencedWrite], fenced: Fenced) -> Cursor:
        """The fence: a row changes only while it still carries its writer's token and owner; the cursor's rows
        are the ids of the rows that changed, read when the caller needs them. One statement for a whole batch
        (`UPDATE ... FROM (VALUES ...)`), not one per write; `params` are `_fenced_values(writes, now)`. Where
        rows are locked one by one (PostgreSQL) they are locked first in id order, as every batch does, so two
        batches never wait on each other in a circle."""
        ids = sorted(w.lease.operation_id for w in writes)  # never empty: both callers have a write at least
        if len(writes) > 1 and self.dialect.lock_row:
            tx.execute(
                f"SELECT 1 FROM operations WHERE operation_id IN ({marks(len(ids))})"
                f" ORDER BY operation_id{self.dialect.lock_row}",
                ids,
            )
        # The first row carries the types (PostgreSQL would take untyped VALUES parameters as text).
        typed = "(" + ",".join(self.dialect.typed(kind) for kind in _FENCED_TYPES) + ")"
        values = ",".join([typed] + [f"({marks(len(_FENCED_TYPES))})"] * (len(writes) - 1))
        params = fenced.params
        return tx.execute(
            "UPDATE operations SET phase = v.column4, next_poll_at = v.column5, deadline_at = v.column6,"
            " status_requests_used = v.column7, max_status_requests = v.column8, record = v.column9,"
            " updated_at = v.column10, paced_until = NULL,"
            " lease_owner = CASE WHEN v.column11 THEN NULL ELSE operations.lease_owner END,"
            " lease_expires_at = CASE WHEN v.column11 THEN NULL"
            " ELSE COALESCE(v.column12, operations.lease_expires_at) END"
            f" FROM (VALUES {values}) AS v WHERE operations.operation_id = v.column1"
            " AND operations.lease_token = v.column2 AND operations.lease_owner = v.column3"
            " RETURNING operations.operation_id",
            params,
        )

    def release(self, lease: Lease) -> None:
        with self._tx() as tx:
            tx.execute(
                "UPDATE operations SET lease_owner = NULL, lease_expires_at = NULL"
                " WHERE operation_id = ? AND lease_token = ? AND lease_owner = ?",
                (lease.operation_id, lease.token, lease.owner),
            )

    # -- decisions ----------------------------------------------------------------------------------------

    def _expire_open(self, tx: Tx, operation_id: str) -> None:
        """Every open question about the operation is void: it has moved on to a state none of them describes."""
        tx.execute(
            "UPDATE decisions SET status = 'expired' WHERE operation_id = ? AND status = 'open'", (operation_id,)
        )

    def _insert_decision(self, tx: Tx, request: DecisionRequest, now: datetime) -> None:
        # One open question per operation: a new one is asked only about a state no open one describes (a new
        # stop, or an agent's cancel request on a running job that has since stopped), so the old ones are void.
        self._expire_open(tx, request.operation_id)
        tx.execute(
            "INSERT INTO decisions (decision_id, operation_id, status, created_at, request, reason)"
            f" VALUES ({marks(6)})",
            (
                request.decision_id,
                request.operation_id,
                "open",
                self.dialect.stamp(now),
                decision_request_text(request),
                request.why,
            ),
        )
        self._append(tx, request.operation_id, ev.DecisionRequested.prepared(request.to_json()), now)
        if request.announce:  # its webhook goes out from the outbox, committed with the request it tells of
            self._queue_webhook(tx, request)

    def decisions(self, operation_id: str | None = None, *, open_only: bool = False) -> list[StoredDecision]:
        query = f"SELECT {DECISION_COLUMNS} FROM decisions WHERE 1=1"
        params: list[Any] = []
        if operation_id is not None:
            query += " AND operation_id = ?"
            params.append(operation_id)
        if open_only:
            query += " AND status = 'open'"
        rows = self._rows(query + " ORDER BY created_at, decision_id", params)
        return [decision_from_row(row, self.dialect.moment) for row in rows]

    def get_decision(self, decision_id: str) -> StoredDecision | None:
        row = self._row(f"SELECT {DECISION_COLUMNS} FROM decisions WHERE decision_id = ?", (decision_id,))
        return None if row is None else decision_from_row(row, self.dialect.moment)

    def resolve_decision(
        self,
        lease: Lease,
        resolution: Resolution,
        *,
        record: OperationRecord | None,
        events: Sequence[NewEvent],
        now: datetime,
    ) -> bool:
        decision_id = resolution.decision_id
        with self._tx() as tx:
            row = tx.one(
                f"SELECT 1 FROM operations WHERE operation_id = ?{self.dialect.lock_row}", (lease.operation_id,)
            )
            if row is None:
                return False
            if record is None:
                # The record stays as it is (and as its last head vouched for): only the lease is given back.
                if not self._release_fenced(tx, lease, now):
                    return False
            elif not self._update_fenced(tx, lease, record, now, release=True):
                return False
            elif not events:
                raise ValueError(f"deciding {decision_id} changes operation {lease.operation_id} without an event")
            cursor = tx.execute(
                "UPDATE decisions SET status = ?, decided_by = ?, decided_at = ?, option = ?, note = ?"
                " WHERE decision_id = ? AND status = 'open'",
                (
                    resolution.status,
                    resolution.by,
                    self.dialect.stamp(now),
                    resolution.option,
                    resolution.note,
                    decision_id,
                ),
            )
            if cursor.rowcount != 1:
                raise DecisionTaken(f"decision {decision_id} was decided by someone else a moment ago")
            if record is not None:
                # The operation moved on: every other question about the old stop is void.
                self._expire_open(tx, lease.operation_id)
            for event in events:
                self._append(tx, lease.operation_id, event, now)
            return True


class SQLStore(_Operations, ContractRegistry):
    """The whole store over a backend's transactions: `_Operations`, the contracts registry, and submissions,
    grants and pacing."""

    shared_across_threads = False
    """Whether the worker shares one instance between its threads (each backend says why it does or not)."""

    # -- submissions --------------------------------------------------------------------------------------

    def record_submission(self, submission: Submission, event: ev.SubmissionIntent) -> None:
        stamp = self.dialect.stamp
        with self._tx() as tx:
            if tx.one("SELECT 1 FROM operations WHERE operation_id = ?", (submission.operation_id,)):
                raise OperationExists(_ALREADY.format(submission.operation_id))
            cursor = tx.execute(
                "INSERT INTO submissions (operation_id, fingerprint, idempotency_token, body, state, job_id,"
                f" status_location, created_at, updated_at) VALUES ({marks(9)}) ON CONFLICT (operation_id) DO NOTHING",
                (
                    submission.operation_id,
                    submission.fingerprint,
                    submission.idempotency_token,
                    submission.body,
                    submission.state,
                    submission.job_id,
                    submission.status_location,
                    stamp(submission.created_at),
                    stamp(submission.created_at),
                ),
            )
            if cursor.rowcount != 1:
                raise OperationExists(_ALREADY.format(submission.operation_id))
            self._append(tx, submission.operation_id, event, submission.created_at)

    def get_submission(self, operation_id: str) -> Submission | None:
        row = self._row(f"SELECT {SUBMISSION_COLUMNS} FROM submissions WHERE operation_id = ?", (operation_id,))
        return None if row is None else submission_from_row(row, self.dialect.moment)

    def accept_submission(
        self,
        submission: Submission,
        record: OperationRecord,
        contract_text: str,
        event: ev.Submitted,
        also: Sequence[NewEvent] = (),
    ) -> None:
        with self._tx() as tx:
            tx.execute(
                "UPDATE submissions SET state = 'accepted', job_id = ?, status_location = ?, updated_at = ?"
                " WHERE operation_id = ?",
                (record.job_id, record.status_location, self.dialect.stamp(record.created_at), submission.operation_id),
            )
            self._refuse_second_operations(tx, [record])
            self._insert_operations(tx, [(record, contract_text)])
            self._append(tx, record.operation_id, event, record.created_at)
            for one in also:
                self._append(tx, record.operation_id, one, record.created_at)

    def mark_submission(self, operation_id: str, event: ev.SubmissionMarked, at: datetime) -> None:
        with self._tx() as tx:
            tx.execute(
                "UPDATE submissions SET state = ?, updated_at = ? WHERE operation_id = ?",
                (event.state, self.dialect.stamp(at), operation_id),
            )
            self._append(tx, operation_id, event, at)

    # -- grants (agent approvals) ------------------------------------------------------------------------

    def request_grant(self, grant: Grant, log_id: str) -> None:
        with self._tx() as tx:
            tx.execute(
                "INSERT INTO grants (grant_id, kind, subject, scope, status, requested_at, detail)"
                f" VALUES ({marks(7)})",
                (
                    grant.grant_id,
                    grant.kind,
                    grant.subject,
                    grant.scope,
                    grant.status,
                    self.dialect.stamp(grant.requested_at),
                    grant_detail_text(grant),
                ),
            )
            self._append(
                tx, log_id, ev.GrantRequested.of_kind(grant.kind).prepared(grant.to_json()), grant.requested_at
            )

    def get_grant(self, grant_id: str) -> Grant | None:
        row = self._row(f"SELECT {GRANT_COLUMNS} FROM grants WHERE grant_id = ?", (grant_id,))
        return None if row is None else grant_from_row(row, self.dialect.moment)

    def grants(self, *, kind: str | None = None, status: str | None = None, subject: str | None = None) -> list[Grant]:
        query = f"SELECT {GRANT_COLUMNS} FROM grants WHERE 1=1"
        params: list[Any] = []
        for column, value in (("kind", kind), ("status", status), ("subject", subject)):
            if value is not None:
                query += f" AND {column} = ?"
                params.append(value)
        rows = self._rows(query + " ORDER BY requested_at, grant_id", params)
        return [grant_from_row(row, self.dialect.moment) for row in rows]

    def decide_grant(
        self, grant_id: str, *, expect: str, status: str, by: str, at: datetime, log_id: str, note: str | None = None
    ) -> bool:
        """Once only across machines: the UPDATE's `status = expect` is the check, so two deciders cannot
        both win, and the loser writes no audit event."""
        with self._tx() as tx:
            cursor = tx.execute(
                "UPDATE grants SET status = ?, decided_by = ?, decided_at = ? WHERE grant_id = ? AND status = ?",
                (status, by, self.dialect.stamp(at), grant_id, expect),
            )
            if cursor.rowcount != 1:
                return False
            self._append(
                tx,
                log_id,
                ev.GrantAnswered.of_status(status).prepared({"grant_id": grant_id, "by": by, "note": note}),
                at,
            )
            return True

    # -- provider pushes (schema 10) ---------------------------------------------------------------------

    def remember_push(self, contract_name: str, delivery_id: str, now: datetime) -> bool:
        stamp = self.dialect.stamp
        with self._tx() as tx:
            tx.execute("DELETE FROM push_deliveries WHERE received_at < ?", (stamp(now - PUSH_MEMORY),))
            added = tx.execute(
                "INSERT INTO push_deliveries (contract_name, delivery_id, received_at) VALUES (?, ?, ?)"
                " ON CONFLICT (contract_name, delivery_id) DO NOTHING",
                (contract_name, delivery_id, stamp(now)),
            )
            return added.rowcount == 1

    # -- pacing -------------------------------------------------------------------------------------------

    def paced_providers(self) -> set[str]:
        return {str(row[0]) for row in self._rows("SELECT provider FROM provider_pacing")}

    def pace(
        self, provider: str, now: datetime, *, interval: timedelta | None, horizon: timedelta
    ) -> tuple[datetime, bool] | None:
        stamp = self.dialect.stamp
        if interval is None and self._row("SELECT 1 FROM provider_pacing WHERE provider = ?", (provider,)) is None:
            return None  # not paced by anyone: a read, not a write transaction on every poll
        with self._tx() as tx:
            if interval is not None:
                tx.execute(
                    "INSERT INTO provider_pacing (provider, interval_seconds, next_slot_at) VALUES (?,?,?)"
                    " ON CONFLICT (provider) DO UPDATE SET interval_seconds = excluded.interval_seconds",
                    (provider, interval.total_seconds(), stamp(now)),
                )
            row = tx.one(
                f"SELECT interval_seconds, next_slot_at FROM provider_pacing WHERE provider = ?{self.dialect.lock_row}",
                (provider,),
            )
            if row is None:
                return None
            slot = max(now, self.dialect.moment(row[1]))
            if slot - now > horizon:
                return slot, False
            tx.execute(
                "UPDATE provider_pacing SET next_slot_at = ? WHERE provider = ?",
                (stamp(slot + timedelta(seconds=float(row[0]))), provider),
            )
            return slot, True
