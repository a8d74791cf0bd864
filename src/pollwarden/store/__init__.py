"""Durable operation records, fenced leases and the event trail."""

from .base import Event, Lease, NewEvent, OperationExists, Store, Stored, StoreError
from .sqlite import SQLiteStore, process_owner

__all__ = [
    "Event",
    "Lease",
    "NewEvent",
    "OperationExists",
    "SQLiteStore",
    "Store",
    "StoreError",
    "Stored",
    "process_owner",
]
