"""Durable operation records, fenced leases and the event trail."""

from .base import AGENT_LOG_PREFIX, Event, Lease, NewEvent, OperationExists, Store, Stored, StoreError, agent_log_id
from .sqlite import SQLiteStore, process_owner

__all__ = [
    "AGENT_LOG_PREFIX",
    "Event",
    "Lease",
    "NewEvent",
    "OperationExists",
    "SQLiteStore",
    "Store",
    "StoreError",
    "Stored",
    "agent_log_id",
    "process_owner",
]
