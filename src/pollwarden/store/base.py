"""The store interface: one durable record per operation, fenced leases, and the event trail.

Every write that changes authority or budgets is fenced by the lease token the writer holds; a write
with a stale token changes nothing and returns False, so a worker that lost its lease while paused
cannot overwrite the newer owner's facts (DESIGN.md, "lease protocol").
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..core.escalation import DecisionRequest
from ..core.record import OperationRecord
from ..errors import PollwardenError

if TYPE_CHECKING:  # the protocol only names them: the engine and the API import this module with no crypto
    from ..audit import AuditKeys, AuditRecord, Checkpoint, Head
    from .trail import AuditSnapshot


class StoreError(PollwardenError):
    """A store problem a person can act on (locked, newer schema, unreadable file)."""


class OperationExists(StoreError):
    pass


class JobWatched(OperationExists):
    """The job already has an operation under the same contract name: a second would be a second budget."""

    def __init__(self, message: str, operation_id: str) -> None:
        super().__init__(message)
        self.operation_id = operation_id


class DecisionTaken(StoreError):
    """A decision can be decided once; the second caller's transaction is rolled back whole."""


@dataclass(frozen=True)
class Lease:
    operation_id: str
    owner: str
    token: int
    expires_at: datetime


ClaimOf = tuple[str, str, timedelta]
"""One claim of `claim_many`: the operation, its claimer (the owner), how long the lease lasts."""

ClaimAnswer = tuple[Lease, OperationRecord] | None
"""What a claim gives: the new lease and the record reloaded under it, or None (someone else holds it)."""


@dataclass(frozen=True)
class Claimed:
    """One operation of a fleet claim: its new lease, its record and its contract, from the one SELECT that
    claimed it (the worker needs all three, and reading the row again would cost a query per poll)."""

    lease: Lease
    record: OperationRecord
    contract_text: str


@dataclass(frozen=True)
class ContractCounts:
    """One contract's operations as a fleet's gauges count them (`Store.fleet_counts`)."""

    contract: str
    active: int = 0
    due: int = 0
    """Active and due now (next_poll_at has passed), leased or not."""
    overdue: int = 0
    """Active, nobody polling, due longer ago than the lease TTL (ownership.py's rule, in SQL)."""
    open_decisions: int = 0
    oldest_due: datetime | None = None
    """The earliest next_poll_at among the due ones: now minus this is how far behind the fleet is."""


@dataclass(frozen=True)
class Stored:
    record: OperationRecord
    contract_text: str
    lease_owner: str | None
    lease_token: int
    lease_expires_at: datetime | None
    watcher: str | None = None
    """The owner of the last claim (`kind/host:pid:nonce`): kept after the release, unlike `lease_owner`."""
    watcher_since: datetime | None = None
    """When that owner first claimed the operation: a watcher that changed starts its own clock."""


@dataclass(frozen=True)
class Event:
    operation_id: str
    seq: int
    at: datetime
    kind: str
    data: Mapping[str, Any]


NewEvent = tuple[str, Mapping[str, Any]]

NewOperation = tuple[OperationRecord, str, Mapping[str, Any]]
"""An operation to create: its record, the contract text it was admitted under, and its `created` event."""

LogEntry = tuple[str, str, Mapping[str, Any]]
"""An event that changes no record, for `append_many`: the log, the kind, the data."""


@dataclass(frozen=True)
class FencedWrite:
    """One fenced change of an operation: its record, its events and any decision request, applied only while
    `lease` is still the operation's lease. `release` ends the lease with it; `hold_until` moves its expiry."""

    lease: Lease
    record: OperationRecord
    events: Sequence[NewEvent]
    release: bool
    decision: DecisionRequest | None = None
    hold_until: datetime | None = None


@dataclass(frozen=True)
class StoredDecision:
    request: DecisionRequest
    status: str  # open | decided | refused | expired
    decided_by: str | None = None
    decided_at: datetime | None = None
    option: int | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            **self.request.to_json(),
            "status": self.status,
            "decided_by": self.decided_by,
            "decided_at": self.decided_at.isoformat() if self.decided_at else None,
            "option": self.option,
            "note": self.note,
        }


@dataclass(frozen=True)
class Grant:
    """A person's approval for an agent (R41, R42, R48): a whole session, or one provider call.

    kind: "session" (subject = agent session id, scope = contract name) or "call" (subject = session id,
    scope = operation id). status: pending -> approved | refused; approved -> revoked; pending -> expired.
    """

    grant_id: str
    kind: str
    subject: str
    scope: str
    status: str
    requested_at: datetime
    detail: Mapping[str, Any]
    decided_by: str | None = None
    decided_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "grant_id": self.grant_id,
            "kind": self.kind,
            "subject": self.subject,
            "scope": self.scope,
            "status": self.status,
            "requested_at": self.requested_at.isoformat(),
            "detail": dict(self.detail),
            "decided_by": self.decided_by,
            "decided_at": self.decided_at.isoformat() if self.decided_at else None,
        }


@dataclass(frozen=True)
class Submission:
    """A submission recorded before it is sent (R34): its fingerprint and idempotency token survive a crash."""

    operation_id: str
    fingerprint: str
    idempotency_token: str | None
    body: bytes
    state: str  # sending | accepted | unknown
    job_id: str | None
    status_location: str | None
    created_at: datetime


AGENT_LOG_PREFIX = "@agent/"
"""Agent sessions get logs of their own; '@' cannot start an operation id, so the names never collide."""


def agent_log_id(session_id: str) -> str:
    """The audit log of one agent session (the MCP server appends its sessions and calls there)."""
    if not session_id or len(session_id) > 128:
        raise ValueError("an agent session id is 1-128 characters")
    return AGENT_LOG_PREFIX + session_id


class Store(Protocol):
    """What every interface may use of a store, whichever backend `open_store` gave it."""

    keys: AuditKeys | None
    """The audit keys this store seals and signs with (None: read-only use such as `status`)."""

    @property
    def path(self) -> Path | str:
        """Where the store is, as messages name it (a PostgreSQL URL without its password)."""
        ...

    @property
    def shared_across_threads(self) -> bool:
        """Whether the worker shares one instance between its threads (both backends are safe on many threads:
        the Python API's watches of one home share one store); see each backend for why it does or not."""
        ...

    def create(self, record: OperationRecord, contract_text: str, event: Mapping[str, Any]) -> None: ...

    def create_many(self, operations: Sequence[NewOperation]) -> None:
        """Every operation with its `created` event in one transaction, or none of them: OperationExists when
        any id is taken (a bulk enqueue writes its file this way, one batch per call)."""
        ...

    def get(self, operation_id: str) -> Stored | None: ...

    def get_many(self, operation_ids: Sequence[str]) -> dict[str, Stored]:
        """The stored operations among these ids, by id (a missing id is absent)."""
        ...

    def all(self) -> list[Stored]: ...

    def find_job(self, contract_name: str, job_id: str) -> list[Stored]:
        """Every operation of this job under this contract, newest first: admission asks before it creates one,
        so an existing operation of the job is resumed instead of getting a fresh budget."""
        ...

    def find_jobs(self, contract_name: str, job_ids: Sequence[str]) -> dict[str, list[Stored]]:
        """`find_job` for many jobs of one contract at once, by job id (a job with no operation is absent)."""
        ...

    def claim(
        self, operation_id: str, owner: str, now: datetime, ttl: timedelta
    ) -> tuple[Lease, OperationRecord] | None:
        """Take the lease if free, expired, or held by a dead process on this host; reload the record."""
        ...

    def claim_many(self, claims: Sequence[ClaimOf], now: datetime) -> list[ClaimAnswer]:
        """`claim` of each (operation_id, owner, ttl), in order, in one transaction (the Python API's watches of
        one process that are due together); an operation named twice goes to the first of its claimers."""
        ...

    def claim_then_write(
        self,
        claims: Sequence[ClaimOf],
        now: datetime,
        then: Callable[[list[ClaimAnswer]], Sequence[FencedWrite]],
    ) -> tuple[list[ClaimAnswer], list[bool]]:
        """`claim_many`, then `write_many` of the writes `then` makes of its answers, in one transaction: the
        claims and the reservations they lead to in one commit. `then` runs inside the transaction and must
        not use the store; if the transaction fails, nothing of either is written."""
        ...

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
        """Fenced: persist the record, its events and any decision request in one transaction, or nothing.

        `hold_until` moves the lease's expiry (a reservation extends it to cover the request about to be sent)."""
        ...

    def write_many(self, writes: Sequence[FencedWrite], now: datetime) -> list[bool]:
        """Group commit: every write in one transaction, each fenced on its own (False: that lease was lost, and
        that write changed nothing). `write` is this with one write."""
        ...

    def decisions(self, operation_id: str | None = None, *, open_only: bool = False) -> list[StoredDecision]: ...

    def get_decision(self, decision_id: str) -> StoredDecision | None: ...

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
        """Fenced and once only: False if the lease was lost; DecisionTaken if someone decided first."""
        ...

    def record_submission(self, submission: Submission, event: Mapping[str, Any]) -> None:
        """Persist a submission (fingerprint, idempotency token) before it is sent (R34)."""
        ...

    def get_submission(self, operation_id: str) -> Submission | None: ...

    def accept_submission(
        self, submission: Submission, record: OperationRecord, contract_text: str, event: Mapping[str, Any]
    ) -> None:
        """Create the operation from an accepted submission, in the transaction that marks it accepted."""
        ...

    def mark_submission(self, operation_id: str, state: str, event: Mapping[str, Any], at: datetime) -> None: ...

    def request_grant(self, grant: Grant, log_id: str) -> None:
        """Record a pending approval request and its audit event (in `log_id`) in one transaction."""
        ...

    def get_grant(self, grant_id: str) -> Grant | None: ...

    def grants(
        self, *, kind: str | None = None, status: str | None = None, subject: str | None = None
    ) -> list[Grant]: ...

    def decide_grant(
        self, grant_id: str, *, expect: str, status: str, by: str, at: datetime, log_id: str, note: str | None = None
    ) -> bool:
        """Move a grant from `expect` to `status` once (False if it was not in `expect`), with its audit event."""
        ...

    def checkpoint_heads(self, at: datetime, log_ids: Sequence[str] | None = None) -> list[Checkpoint]: ...

    def audit_records(self, log_id: str | None = None) -> Iterator[AuditRecord]: ...

    def audit_checkpoints(self, log_id: str | None = None) -> list[Checkpoint]: ...

    def audit_heads(self) -> list[Head]: ...

    def heads_pending(self) -> bool: ...

    def newest_head(self) -> tuple[Head, dict[str, tuple[int, str]]] | None:
        """The newest signed head and the state it fixes; an upgraded store gets its first head here."""
        ...

    def audit_snapshot(self) -> AbstractContextManager[AuditSnapshot]:
        """Records, heads and checkpoints as one read transaction sees them."""
        ...

    def release(self, lease: Lease) -> None: ...

    def claim_due(
        self, owner: str, now: datetime, ttl: timedelta, limit: int, *, skip: Collection[str] = ()
    ) -> list[Claimed]:
        """The fleet claim: due, active operations whose lease is free or expired, each with a new token; none of
        a contract named in `skip`."""
        ...

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
        """`claim_due` (passing over the contracts in `skip`), then `write_many` of the writes `then` makes of what
        it claimed, in one transaction: a worker's claims and its reservations in one commit. `then` runs inside
        the transaction and must not use the store; if the transaction fails, nothing of either is written."""
        ...

    def paced_providers(self) -> set[str]:
        """The providers some worker of the fleet paces (`pace` with an interval made them so)."""
        ...

    def pace(
        self, provider: str, now: datetime, *, interval: timedelta | None, horizon: timedelta
    ) -> tuple[datetime, bool] | None:
        """Fleet-wide pacing per provider (R7 across machines): the next free request slot, and whether it was
        taken. A slot within `horizon` is taken (the caller waits for it, then sends); a later one is only
        reported (the caller defers the operation to it). None: this provider is not paced. `interval` sets the
        provider's spacing for every worker sharing the store."""
        ...

    def fleet_counts(self, now: datetime, ttl_of: Callable[[str], timedelta]) -> list[ContractCounts]:
        """Per contract name: active, due, overdue, open decisions and the oldest due time, counted by the
        database. `ttl_of(contract_text)` is the lease TTL of a contract (`ownership.lease_ttl_of`)."""
        ...

    def next_due(self, free_at: datetime | None = None, *, skip: Collection[str] = ()) -> datetime | None:
        """The earliest next_poll_at among active operations: how long a worker may sleep. With `free_at`, only
        among those a claim at that time could take (unleased, or the lease expired by then); none of a contract
        named in `skip`."""
        ...

    def db_now(self) -> datetime:
        """The store's clock: the database's where there is one, so a fleet agrees on time."""
        ...

    def append(self, operation_id: str, kind: str, data: Mapping[str, Any], at: datetime) -> None:
        """An event that changes no record: a refused resume, a lost lease, or (with `agent_log_id`) an
        agent session's start, approval or call, each sealed and chained like an operation's events."""
        ...

    def append_many(self, entries: Sequence[LogEntry], at: datetime) -> None:
        """`append` for many events in one transaction (a bulk enqueue's refused resumes)."""
        ...

    def events(self, operation_id: str) -> list[Event]: ...

    def close(self) -> None: ...
