"""The worker's defaults, in a module of their own so the CLI's grammar can show them without loading the worker."""

from __future__ import annotations

LANES = 2
"""Batches in progress at once per worker process; `concurrency` (requests in flight) is split between them."""

DEFAULT_CONCURRENCY = 32
"""Status requests in flight at once per worker process: two batches of 16 that each commit together."""
