"""What the console asks the store for a page of, and what a page holds: operations in the order a person needs
them, and open decisions by reason. The paging, sorting and filtering happen in the database (`sql_pages.py`), so a
page of 50 reads 50 records whatever the size of the fleet."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .records import Stored, UnreadableRow

SHOWS = ("all", "awaiting", "overdue", "orphaned")
"""The console's `show` filters: everything, or only what needs a person for one reason."""

URGENCY = ("awaiting", "overdue", "orphaned", "active", "ended")
"""The order a page lists operations in: awaiting a decision, overdue, orphaned, then active by next due, then
ended (succeeded or stopped) newest first; within one of the first three, by next due, then newest first."""

PAGE_SIZE = 50


@dataclass(frozen=True)
class OperationsQuery:
    """One page of operations: `show` one of `SHOWS`; `search` a part of an operation id or a job id (any case);
    `contract`, `phase` and `reason` (the stop's) exact, None for any."""

    show: str = "all"
    search: str = ""
    contract: str | None = None
    phase: str | None = None
    reason: str | None = None
    offset: int = 0
    limit: int = PAGE_SIZE


@dataclass(frozen=True)
class Urgency:
    """What ranks operations that the database cannot know by itself: the time now, each contract's lease TTL
    (an active operation due longer ago than that, with no step running, is overdue: `report.ownership`), and
    which owners are gone (an active operation whose owner is one is orphaned)."""

    now: datetime
    ttl: Mapping[str, timedelta] = field(default_factory=dict)
    """Contract name -> the lease TTL of its operations."""
    gone: Callable[[str], bool] = lambda _owner: False
    """Whether an owner text (`kind/host:pid:nonce`) is a process known gone that no worker stands in for: asked
    once for each distinct owner of the operations a page counts (a few processes, not 10,000 rows)."""


@dataclass(frozen=True)
class OperationsPage:
    rows: tuple[Stored, ...]
    awaiting: Mapping[str, str]
    """Operation id -> its open decision's id, for the rows of this page."""
    matched: int
    """How many operations the query matches, over every page."""
    counts: Mapping[str, int]
    """Per `SHOWS` key, how many operations match the query's other filters."""
    unreadable: tuple[UnreadableRow, ...] = ()


@dataclass(frozen=True)
class DecisionGroup:
    """The open decisions of one reason (`DecisionRequest.why`: a stop reason, or `cancel_request`)."""

    reason: str
    count: int
