"""Durable operation records, fenced leases, decisions, submissions and the sealed audit trail.

The face is lazy (`pollwarden.lazy`): the protocol (`base`) needs only the core, so the engine and the Python
API import it without loading a backend; `SQLiteStore` (and with it the audit crypto) loads on first use, and
the PostgreSQL backend only through `open.open_store` given a `postgresql://` URL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_face

if TYPE_CHECKING:
    from .base import (
        AGENT_LOG_PREFIX,
        DecisionTaken,
        Event,
        Grant,
        Lease,
        NewEvent,
        OperationExists,
        Resolution,
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
    "Resolution",
    "SQLiteStore",
    "Store",
    "StoreError",
    "Stored",
    "StoredDecision",
    "Submission",
    "agent_log_id",
    "process_owner",
]

__getattr__, __dir__ = lazy_face(
    __name__,
    {
        ".base": "AGENT_LOG_PREFIX DecisionTaken Event Grant Lease NewEvent OperationExists Resolution Store Stored"
        " StoredDecision StoreError Submission agent_log_id",
        ".owner": "process_owner",
        ".sqlite": "SQLiteStore",
    },
)
