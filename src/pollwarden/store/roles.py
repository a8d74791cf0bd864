"""The store's roles, one protocol each: a consumer types against the role it uses (the fleet's queue, the
audit log, ...) and any backend gives them all (`base.Store` is their union). Each role includes `Opened`: where
the store is, its clock, closing it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..core.escalation import DecisionRequest
from ..core.learnt import Sample
from ..core.record import OperationRecord
from ..events import ContractInstalled, SubmissionIntent, SubmissionMarked, Submitted
from ..events.base import AuditEvent, NewEvent
from .records import (
    Attempted,
    ClaimAnswer,
    Claimed,
    ClaimOf,
    ContractCounts,
    DecisionCount,
    DeliveryLease,
    Event,
    FencedWrite,
    Grant,
    HolderCount,
    InstalledContract,
    Lease,
    Listing,
    LogEntry,
    NewOperation,
    OutboxCount,
    OutboxEntry,
    Resolution,
    Stored,
    StoredDecision,
    Submission,
    UnreadableRow,
)

if TYPE_CHECKING:  # the protocols only name them: the engine and the API import this module with no crypto
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from ..audit import AuditKeys, AuditRecord, Checkpoint, Head
    from ..audit.rotation import Rotation
    from .bell import Bell
    from .paging import DecisionGroup, OperationsPage, OperationsQuery, Urgency
    from .trail import AuditSnapshot
    from .witness import Witness


class Opened(Protocol):
    """The store as a whole: where it is, whether threads share it, its clock, closing it."""

    @property
    def path(self) -> Path | str:
        """Where the store is, as messages name it (a PostgreSQL URL without its password)."""
        ...

    @property
    def shared_across_threads(self) -> bool:
        """Whether the worker shares one instance between its threads (both backends are safe on many threads:
        the Python API's watches of one home share one store); see each backend for why it does or not."""
        ...

    def db_now(self) -> datetime:
        """The store's clock: the database's where there is one, so a fleet agrees on time."""
        ...

    def close(self) -> None: ...


class Operations(Opened, Protocol):
    """Operation records and their fenced leases: create, read, claim, write, release (one owner per operation)."""

    def create(self, record: OperationRecord, contract_text: str, event: NewEvent) -> None:
        """`create_many` of one operation; `event` is its `created` (`Created`, or prepared by admission)."""
        ...

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

    def release(self, lease: Lease) -> None: ...


class Decisions(Opened, Protocol):
    """The decisions asked of people about operations, and their answers (once only)."""

    def decisions(self, operation_id: str | None = None, *, open_only: bool = False) -> list[StoredDecision]: ...

    def get_decision(self, decision_id: str) -> StoredDecision | None: ...

    def resolve_decision(
        self,
        lease: Lease,
        resolution: Resolution,
        *,
        record: OperationRecord | None,
        events: Sequence[NewEvent],
        now: datetime,
    ) -> bool:
        """Fenced and once only: False if the lease was lost; DecisionTaken if someone decided first."""
        ...


class Pages(Opened, Protocol):
    """The console's pages (`store.paging`): paged, sorted, filtered and counted in the database."""

    def operations_page(self, query: OperationsQuery, urgency: Urgency) -> OperationsPage:
        """One page of operations, most urgent first (`paging.URGENCY`), with the counts of each filter."""
        ...

    def active_contracts(self) -> dict[str, str]:
        """Contract name -> the text of its newest active operation (its lease TTL: `Urgency.ttl`)."""
        ...

    def contract_names(self) -> list[str]: ...

    def decision_groups(self) -> list[DecisionGroup]:
        """The open decisions counted by reason (the `reason` column: `DecisionRequest.why`)."""
        ...

    def open_decisions(self, reason: str | None = None, *, offset: int = 0, limit: int = 20) -> list[StoredDecision]:
        """Open decisions oldest first (one reason's, or all), a page at a time."""
        ...

    def recent_decisions(self, limit: int) -> list[StoredDecision]:
        """The last `limit` decisions answered (decided, refused or expired), newest first."""
        ...


class Submissions(Opened, Protocol):
    """Submissions recorded before they are sent (R34), and what came of them."""

    def record_submission(self, submission: Submission, event: SubmissionIntent) -> None:
        """Persist a submission (fingerprint, idempotency token) before it is sent (R34)."""
        ...

    def get_submission(self, operation_id: str) -> Submission | None: ...

    def accept_submission(
        self,
        submission: Submission,
        record: OperationRecord,
        contract_text: str,
        event: Submitted,
        also: Sequence[NewEvent] = (),
    ) -> None:
        """Create the operation from an accepted submission, in the transaction that marks it accepted; `also`:
        events of its log written after `event` (a refused `learn_key` of the body)."""
        ...

    def mark_submission(self, operation_id: str, event: SubmissionMarked, at: datetime) -> None:
        """The submission ends in the state its event's kind names (`SubmissionMarked.state`), with that event."""
        ...


class Grants(Opened, Protocol):
    """A person's approvals for agents (R41, R42, R48): asked, answered, listed."""

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


class AuditLog(Opened, Protocol):
    """The sealed, chained audit logs: appending events that change no record, reading them back, heads,
    checkpoints, the settings the log vouches for and the signing key."""

    keys: AuditKeys | None
    """The audit keys this store seals and signs with (None: read-only use such as `status`)."""

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

    def set_setting(self, log_id: str, value: str, event: AuditEvent, at: datetime) -> None:
        """A setting the log vouches for (the witness location, `@audit/witness`), with its event, in one commit."""
        ...

    def rotate_signing_key(self, new_key: Ed25519PrivateKey, *, by: str, at: datetime) -> Rotation:
        """Link a new signing key to the current one: the old key signs "heads after this commit's are signed by
        `new_key`" (`audit/rotation.py`). The store keeps signing with the old key: close it and open it anew."""
        ...

    def last_rotation(self) -> Rotation | None:
        """The newest key rotation, or None when the store's key never changed."""
        ...

    @property
    def witness(self) -> Witness | None:
        """Where this store's new heads go besides the home's file (each queued in the outbox with its commit)."""
        ...

    def audit_head(self, counter: int) -> Head | None:
        """The signed head of that counter (what a witness is sent)."""
        ...

    def append(self, log_id: str, event: NewEvent, at: datetime) -> None:
        """An event that changes no record: a refused resume, a lost lease, or (with `agent_log_id`) an
        agent session's start, approval or call, each sealed and chained like an operation's events."""
        ...

    def append_many(self, entries: Sequence[LogEntry], at: datetime) -> None:
        """`append` for many events in one transaction (a bulk enqueue's refused resumes)."""
        ...

    def events(self, operation_id: str) -> list[Event]: ...


class Contracts(Opened, Protocol):
    """The installed contract versions: nothing runs a contract text that is not one of them."""

    def install_contract(
        self, name: str, text: str, *, by: str, at: datetime, event: ContractInstalled
    ) -> tuple[InstalledContract, bool]:
        """Add this contract text to the registry under its digest, audited in `@contract/<digest>`, once: (the
        row, whether this call added it). StoreError when this database role may not (PostgreSQL grants)."""
        ...

    def installed_contract(self, digest: str) -> InstalledContract | None:
        """The installed version with this digest, or None: nothing may run a contract text that has none."""
        ...

    def installed_contracts(self, name: str | None = None) -> list[InstalledContract]: ...


class Learning(Opened, Protocol):
    """What each contract's jobs took (`core.learnt`): the samples the write that ends an operation leaves, read
    for its learnt schedule (`engine.learning`)."""

    def learnt_samples(self, contract: str, since: datetime, limit: int, key: str | None = None) -> list[Sample]:
        """The newest `limit` duration samples of `contract` that ended at or after `since`: of every key, or of
        the one `[schedule] learn_key` value `key`."""
        ...

    def learnt_contracts(self) -> list[tuple[str, int]]:
        """Each contract with duration samples, and how many."""
        ...

    def learnt_keys(self, contract: str, since: datetime) -> list[tuple[str, int]]:
        """Each key value `contract`'s samples since `since` were kept under ('' for none), and how many."""
        ...


class FleetQueue(Opened, Protocol):
    """The fleet's queue: claiming what is due, pacing per provider, and the gauges' counts."""

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

    def defer_paced(self, lease: Lease, until: datetime, event: NewEvent, now: datetime) -> bool:
        """Pacing as a due time: the leased operation stays due (every gauge and view counts it) but no claim takes
        it before `until`; the lease is given back. `event` is appended only if it was not paced already since
        its record last changed (any write of the record ends a pacing). False if the lease was lost."""
        ...

    def fleet_counts(
        self, now: datetime, ttl_of: Callable[[str], timedelta], *, pressure: bool = True
    ) -> list[ContractCounts]:
        """Per contract name: active, due, overdue, rate limited, unreadable, open decisions (by reason:
        `open_decision_counts`), the largest budget share and the oldest due time, counted by the database.
        `ttl_of(contract_text)` is the lease TTL of a contract (`ownership.lease_ttl_of`). `pressure` False leaves
        rate limited and the budget share at 0: they are read from every active record, which the console's table
        (which shows neither) need not pay for."""
        ...

    def open_decision_counts(self) -> list[DecisionCount]:
        """Open decision requests by contract and reason, with when the oldest of each was opened."""
        ...

    def active_holders(self, now: datetime) -> list[HolderCount]:
        """Active, readable operations counted by contract and holder (the lease holder while its lease runs at
        `now`, else the last watcher): few rows, one per process that watched."""
        ...

    def next_due(self, free_at: datetime | None = None, *, skip: Collection[str] = ()) -> datetime | None:
        """The earliest next_poll_at among active operations: how long a worker may sleep. With `free_at`, only
        among those a claim at that time could take (unleased, or the lease expired by then); none of a contract
        named in `skip`."""
        ...


class Deliveries(Opened, Protocol):
    """The outbox: decision webhooks and witness heads, delivered off the polling path
    (`pollwarden.home.outbox`)."""

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


PUSH_MEMORY = timedelta(days=3)
"""How long a push's delivery id is remembered: GitHub lets a person redeliver for 3 days; a Standard Webhooks
delivery older than 5 minutes is refused as stale anyway, and GitLab retries within hours."""


class Pushes(Opened, Protocol):
    """Providers' pushes (issue 27): the deliveries seen, and the bell that wakes this store's waiters."""

    def remember_push(self, contract_name: str, delivery_id: str, now: datetime) -> bool:
        """Note a provider push's delivery: False when it was seen before (a replay, answered and ignored), within
        `PUSH_MEMORY`; older deliveries are forgotten as new ones come."""
        ...

    def bell(self) -> Bell:
        """What wakes this store's waiters in every process when an operation is made due early (`store.bell`)."""
        ...
