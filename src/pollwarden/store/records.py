"""What the store keeps and gives back: operation rows, leases, decisions, grants, submissions, installed contracts,
outbox entries and events, as frozen records, and the errors a store raises. The roles that give them are in
`roles`; `base.Store` is all of them.

Every write that changes authority or budgets is fenced by the lease token the writer holds; a write
with a stale token changes nothing and returns False, so a worker that lost its lease while paused
cannot overwrite the newer owner's facts (docs/design.md, "The step (R37) and the lease").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..core.escalation import DecisionRequest
from ..core.record import OperationRecord
from ..errors import PollwardenError
from ..events import DeliveryEvent
from ..events.base import NewEvent as NewEvent  # what `write` takes, importable from the store as before

if TYPE_CHECKING:  # the protocol only names them: the engine and the API import this module with no crypto
    pass


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
    """All of the contract's open decision requests (the console's fleet table; the gauges count them by reason,
    `Store.open_decision_counts`)."""
    unreadable: int = 0
    """Rows set aside because their record could not be read: no claim takes them, nor counts them above."""
    oldest_due: datetime | None = None
    """The earliest next_poll_at among the due ones: now minus this is how far behind the fleet is."""
    rate_limited: int = 0
    """Active operations whose last answer was the provider's rate limit (429 or a [[rate_limit]] signal)."""
    budget_used: float = 0.0
    """The largest share of its status-request budget any active operation has used (0 to 1)."""


@dataclass(frozen=True)
class DecisionCount:
    """Open decision requests of one contract for one reason (`Store.open_decision_counts`)."""

    contract: str
    reason: str
    """The stop reason (`job_failed`, `deadline_exceeded`, ...), or the topic of a question with none."""
    count: int
    oldest: datetime | None
    """When the longest-waiting one was opened."""


@dataclass(frozen=True)
class HolderCount:
    """Active operations of one contract by who holds their lease now, else who last watched them (None: nobody
    yet): `ownership.orphaned_by` tells from this whether they are orphaned (`Store.active_holders`)."""

    contract: str
    holder: str | None
    count: int


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


NewOperation = tuple[OperationRecord, str, NewEvent]
"""An operation to create: its record, the contract text it was admitted under, and its `created` event."""

LogEntry = tuple[str, NewEvent]
"""An event that changes no record, for `append_many`: the log, and the event."""


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
class Resolution:
    """How a decision is closed (`Decisions.resolve_decision`): once only, by whom, with which option."""

    decision_id: str
    status: str  # decided | refused | expired
    by: str
    note: str | None = None
    option: int | None = None


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
    event: DeliveryEvent | None = None
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
