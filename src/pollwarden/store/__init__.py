"""Durable operation records, fenced leases, decisions, submissions and the sealed audit trail."""

from .base import (
    AGENT_LOG_PREFIX,
    DecisionTaken,
    Event,
    Grant,
    Lease,
    NewEvent,
    OperationExists,
    Store,
    Stored,
    StoredDecision,
    StoreError,
    Submission,
    agent_log_id,
)
from .owner import process_owner
from .sqlite import SQLiteStore

__all__ = [
    "AGENT_LOG_PREFIX",
    "DecisionTaken",
    "Event",
    "Grant",
    "Lease",
    "NewEvent",
    "OperationExists",
    "SQLiteStore",
    "Store",
    "StoreError",
    "Stored",
    "StoredDecision",
    "Submission",
    "agent_log_id",
    "process_owner",
]
