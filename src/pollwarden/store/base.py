"""The store interface: `Store`, the union of the store's roles (`roles`: operations and leases, decisions,
submissions, grants, the audit log, installed contracts, the fleet's queue, the outbox), which every backend
gives whole. The records it keeps and the errors it raises are in `records`, and importable from here as before.
"""

from __future__ import annotations

from typing import Protocol

from ..events.base import NewEvent
from .records import (
    AGENT_LOG_PREFIX,
    CONTRACT_LOG_PREFIX,
    INSPECT_UNREADABLE,
    Attempted,
    ClaimAnswer,
    Claimed,
    ClaimOf,
    ContractCounts,
    DecisionCount,
    DecisionTaken,
    DeliveryLease,
    Event,
    FencedWrite,
    Grant,
    HolderCount,
    InstalledContract,
    JobWatched,
    Lease,
    Listing,
    LogEntry,
    NewOperation,
    OperationExists,
    OutboxCount,
    OutboxEntry,
    Stored,
    StoredDecision,
    StoreError,
    Submission,
    UnreadableRecord,
    UnreadableRow,
    agent_log_id,
    inspect_unreadable,
)
from .roles import (
    PUSH_MEMORY,
    AuditLog,
    Contracts,
    Decisions,
    Deliveries,
    FleetQueue,
    Grants,
    Operations,
    Pages,
    Pushes,
    Submissions,
)


class Store(
    Operations, Decisions, Submissions, Grants, AuditLog, Contracts, FleetQueue, Deliveries, Pages, Pushes, Protocol
):
    """What every interface may use of a store, whichever backend `open_store` gave it: every role."""


__all__ = [
    "AGENT_LOG_PREFIX",
    "CONTRACT_LOG_PREFIX",
    "INSPECT_UNREADABLE",
    "PUSH_MEMORY",
    "Attempted",
    "ClaimAnswer",
    "ClaimOf",
    "Claimed",
    "ContractCounts",
    "DecisionCount",
    "DecisionTaken",
    "DeliveryLease",
    "Event",
    "FencedWrite",
    "Grant",
    "HolderCount",
    "InstalledContract",
    "JobWatched",
    "Lease",
    "Listing",
    "LogEntry",
    "NewEvent",
    "NewOperation",
    "OperationExists",
    "OutboxCount",
    "OutboxEntry",
    "Store",
    "StoreError",
    "Stored",
    "StoredDecision",
    "Submission",
    "UnreadableRecord",
    "UnreadableRow",
    "agent_log_id",
    "inspect_unreadable",
]
