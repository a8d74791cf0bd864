"""The wall clock, in one place: the core is handed times, drivers read them here (tests inject their own)."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
