"""How long one claim holds an operation: a pure rule of the contract, kept here once for every claimer (the
engine's flows, a person's answer, an agent's request) and every reader that judges a lease (ownership's
"overdue", the fleet's gauges)."""

from __future__ import annotations

from datetime import timedelta

from .contract.parse import Contract

__all__ = ["lease_ttl", "lease_ttl_for"]

MARGIN = timedelta(seconds=5)
"""Time to write the step's record after its request's last byte."""


def lease_ttl_for(timeout: timedelta) -> timedelta:
    """Long enough for one bounded request (connect to last byte is bounded by `timeout`, a retry of the
    connection at most once more) and its record, short enough that a crash is not waited out."""
    return timeout * 2 + MARGIN


def lease_ttl(contract: Contract) -> timedelta:
    """The lease of every claim and every reservation under `contract`, whoever drives."""
    return lease_ttl_for(contract.timeout)
