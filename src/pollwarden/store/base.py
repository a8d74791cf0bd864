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
from ..core.learnt import Sample
from ..core.record import OperationRecord
from ..errors import PollwardenError

if TYPE_CHECKING:  # the protocol only names them: the engine and the API import this module with no crypto
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from ..audit import AuditKeys, AuditRecord, Checkpoint, Head
    from ..audit.rotation import Rotation
    from .trail import AuditSnapshot
    from .witness import Witness


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


class UnreadableRecord(StoreError):
    """The operation's row holds a record that cannot be decoded (or a claim set it aside as such): asked for by
    name, it is refused with this, in words saying why and how to look at it; listed, it is skipped and reported."""

    def __init__(self, row: UnreadableRow, where: object) -> None:
        super().__init__(
            f"the record of operation {row.operation_id} in {where} cannot be read ({row.why}); nothing was done with"
            f" it. {inspect_unreadable(row.operation_id)}"
        )
        self.row = row


def inspect_unreadable(operation_id: str = "...") -> str:
    """How a person looks at an unreadable row (`status` says so too, for every such row at once)."""
    where = "..." if operation_id == "..." else "'" + operation_id.replace("'", "''") + "'"
    return (
        "See what is wrong with `pollwarden audit verify` (a row changed outside pollwarden is named there) and the"
        f" row itself (`SELECT record, unreadable FROM operations WHERE operation_id = {where}`); once it holds a"
        f" record again, clear its mark (`UPDATE operations SET unreadable = NULL WHERE operation_id = {where}`)"
    )


INSPECT_UNREADABLE = inspect_unreadable()


@dataclass(frozen=True)
class UnreadableRow:
    """A row skipped by a reader: its operation, and why its record cannot be read (its decode error, or the
    mark a claim left on it)."""

    operation_id: str
    why: str
    contract_name: str | None = None
    """The row's own column (its record cannot say): which contract's listing it belongs to."""

    def to_json(self) -> dict[str, str | None]:
        """Keyed as `OperationRecord.summary` is (what `status --json` lists), with `unreadable` saying why."""
        return {
            "operation": self.operation_id,
            "contract": self.contract_name,
            "phase": "unreadable",
            "unreadable": self.why,
        }


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
    unreadable: int = 0
    """Rows set aside because their record could not be read: no claim takes them, nor counts them above."""
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
class Listing:
    """Every operation of a store, oldest first: those that could be read, and the rows that could not."""

    operations: tuple[Stored, ...]
    unreadable: tuple[UnreadableRow, ...] = ()


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


@dataclass(frozen=True)
class InstalledContract:
    """One version of a contract an operator installed in this store (the contracts registry, schema 6)."""

    digest: str
    """The SHA-256 of `text`: what an operation's stored contract must hash to for anything to run it."""
    name: str
    text: str
    """The stored form (`Contract.source_text`): the merged TOML and every var's value."""
    installed_by: str
    installed_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "name": self.name,
            "installed_by": self.installed_by,
            "installed_at": self.installed_at.isoformat(),
        }


CONTRACT_LOG_PREFIX = "@contract/"
"""Each installed contract version's audit log is `@contract/<digest>`."""


@dataclass(frozen=True)
class OutboxEntry:
    """One delivery waiting in the outbox (schema 7): a decision request's webhook, or the newest head for a
    witness. Written in the transaction that commits what it announces; deleted once delivered."""

    delivery_id: str
    kind: str
    """`webhook` or `witness`."""
    subject: str
    """The decision id (webhook), or the witness's key (`Witness.key`: never its location)."""
    operation_id: str | None
    """The log a webhook's outcome is audited in."""
    head: int | None
    """The counter of the newest head a witness has not taken."""
    status: str
    """`pending`, or `failed`: a webhook given up (its `notify_failed` is in the operation's log)."""
    attempts: int
    """Attempts made (a witness's: failed ones since it last took a head)."""
    created_at: datetime
    next_attempt_at: datetime
    queued_by: str
    """The process whose commit queued it (host:pid:nonce, `store.sql_outbox.queued_by`)."""
    lease_owner: str | None
    lease_expires_at: datetime | None
    last_status: int | None
    last_error: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "delivery_id": self.delivery_id,
            "kind": self.kind,
            "subject": self.subject,
            "operation": self.operation_id,
            "head": self.head,
            "status": self.status,
            "attempts": self.attempts,
            "created_at": self.created_at.isoformat(),
            "next_attempt_at": self.next_attempt_at.isoformat(),
            "queued_by": self.queued_by,
            "leased_by": self.lease_owner,
            "last_status": self.last_status,
            "last_error": self.last_error,
        }


@dataclass(frozen=True)
class DeliveryLease:
    """A claim of one delivery: only its holder writes back what came of it (fenced by owner and token)."""

    delivery_id: str
    owner: str
    token: int
    expires_at: datetime
    operation_id: str | None


@dataclass(frozen=True)
class Attempted:
    """What an attempt at a delivery came to, as its claimer writes it back (`Store.finish_delivery`)."""

    attempts: int
    delivered: bool
    retry_at: datetime | None
    """When to try again; None once it is over (delivered, or given up). A witness that took a head while a
    newer one was queued is tried again then, with the newer one."""
    status: int | None = None
    error: str | None = None
    head: int | None = None
    """The head a witness took."""
    event: NewEvent | None = None
    """What the delivery's operation log records of it (a webhook's `notified` or `notify_failed`)."""


@dataclass(frozen=True)
class OutboxCount:
    """The outbox by kind and state, as the fleet gauges count it (`Store.outbox_counts`)."""

    kind: str
    state: str
    """`pending` (not tried yet), `retrying` (an attempt failed), `failed` (given up)."""
    count: int
    oldest: datetime | None


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

    def get(self, operation_id: str) -> Stored | None:
        """The operation, or None when there is none; `UnreadableRecord` when its record cannot be read."""
        ...

    def get_many(self, operation_ids: Sequence[str]) -> dict[str, Stored]:
        """The stored operations among these ids, by id (a missing id is absent, as is an unreadable row's)."""
        ...

    def all(self) -> list[Stored]:
        """Every operation whose record can be read, oldest first (`listing` also names those that cannot)."""
        ...

    def listing(self) -> Listing:
        """Every operation, oldest first, and the rows whose record cannot be read (skipped, never fatal)."""
        ...

    def unreadable_rows(self) -> list[UnreadableRow]:
        """The rows a claim set aside because their record could not be read (the fleet's gauge counts them)."""
        ...

    def take_set_aside(self) -> list[UnreadableRow]:
        """The rows this store's claims set aside since it was last asked: each is set aside once (a worker logs
        it once), and from then on no fleet claim meets it."""
        ...

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

    def set_setting(self, log_id: str, value: str, kind: str, data: Mapping[str, Any], at: datetime) -> None:
        """A setting the log vouches for (the witness location, `@audit/witness`), with its event, in one commit."""
        ...

    def rotate_signing_key(self, new_key: Ed25519PrivateKey, *, by: str, at: datetime) -> Rotation:
        """Link a new signing key to the current one: the old key signs "heads after this commit's are signed by
        `new_key`" (`audit/rotation.py`). The store keeps signing with the old key: close it and open it anew."""
        ...

    def last_rotation(self) -> Rotation | None:
        """The newest key rotation, or None when the store's key never changed."""
        ...

    def release(self, lease: Lease) -> None: ...

    def install_contract(
        self, name: str, text: str, *, by: str, at: datetime, event: Mapping[str, Any]
    ) -> tuple[InstalledContract, bool]:
        """Add this contract text to the registry under its digest, audited in `@contract/<digest>`, once: (the
        row, whether this call added it). StoreError when this database role may not (PostgreSQL grants)."""
        ...

    def installed_contract(self, digest: str) -> InstalledContract | None:
        """The installed version with this digest, or None: nothing may run a contract text that has none."""
        ...

    def installed_contracts(self, name: str | None = None) -> list[InstalledContract]: ...

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

    # -- what each contract's jobs took (`core.learnt`): written by the write that ends an operation --

    def learnt_samples(self, contract: str, since: datetime, limit: int) -> list[Sample]:
        """The newest `limit` duration samples of `contract` that ended at or after `since`."""
        ...

    def learnt_contracts(self) -> list[tuple[str, int]]:
        """Each contract with duration samples, and how many."""
        ...

    # -- the outbox (decision webhooks and witness heads, delivered off the polling path:
    # `pollwarden.transport.outbox`) --

    @property
    def witness(self) -> Witness | None:
        """Where this store's new heads go besides the home's file (each queued in the outbox with its commit)."""
        ...

    def next_delivery(self, witness: str | None) -> datetime | None:
        """The earliest time a pending delivery this process could make is due: every webhook, and the heads of
        the witness whose key is `witness`."""
        ...

    def claim_deliveries(
        self,
        owner: str,
        now: datetime,
        ttl: timedelta,
        limit: int,
        *,
        witness: str | None,
        every: bool = False,
        skip: Sequence[str] = (),
    ) -> list[tuple[DeliveryLease, OutboxEntry]]:
        """Up to `limit` due deliveries (`every`: due or not; never those in `skip`) that are free, expired, or
        held by a dead process on this host, each leased to `owner` for `ttl`: nobody else sends one meanwhile."""
        ...

    def finish_delivery(self, lease: DeliveryLease, attempted: Attempted, now: datetime) -> bool:
        """What came of an attempt, with its audit event, in one transaction; False if the lease was lost."""
        ...

    def outbox(self, *, queued_by: str | None = None) -> list[OutboxEntry]:
        """Every delivery waiting or given up (`queued_by`: only those this process queued), oldest first."""
        ...

    def outbox_counts(self) -> list[OutboxCount]: ...

    def audit_head(self, counter: int) -> Head | None:
        """The signed head of that counter (what a witness is sent)."""
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
