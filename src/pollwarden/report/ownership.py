"""Who is watching an operation, since when, and whether it is stuck: what `status`, the console and the
worker's gauges show an operator, computed in one place.

A lease is held only while one step runs, so between polls the store keeps the last claimer as the operation's
`watcher` (schema 5). From that and the clock:

- **owner**: the lease holder while a step runs, else the last watcher (its kind, host and pid, and since when);
- **alive**: whether that owner's process still exists, when its pid can be looked up here (the same host, boot
  and PID namespace: `store.owner`); True while a lease is held; None when it ran elsewhere (another host, another
  boot, a container's own PID namespace), whose processes cannot be seen from here;
- **overdue**: active, no step running, and due longer ago than the lease TTL (a request's bound plus its
  record): whoever should have polled it did not. An operator's first question, whatever the owner;
- **orphaned**: active, and the process that was watching it (a `pollwarden watch`, the Python API, an MCP
  server, a person's decision) is known to be gone, so nothing will poll it until someone resumes it
  (`watch --operation`) or a worker takes it. A worker's operation is never orphaned by that worker's death:
  any worker of the fleet claims it, and it shows as overdue if none does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..core.contract.parse import ContractError, parse_contract
from ..core.durations import format_duration, format_rfc3339
from ..core.lease import lease_ttl, lease_ttl_for
from ..core.reasons import Phase
from ..store.base import Stored
from ..store.owner import Owner, owner_alive, parse_owner
from ..store.paging import Urgency
from ..store.roles import Pages

__all__ = ["Ownership", "lease_ttl_of", "orphaned_by", "ownership_of", "urgency_of"]

Alive = Callable[[str], "bool | None"]

FALLBACK_TTL = lease_ttl_for(timedelta(seconds=30))
"""For a stored contract that no longer parses: the lease of a 30 s request timeout, three times the default."""


@dataclass(frozen=True)
class Ownership:
    owner: Owner | None
    since: datetime | None
    leased: bool
    """A step is running right now: the owner holds the lease."""
    alive: bool | None
    overdue: bool
    orphaned: bool
    late: timedelta
    """How long ago the operation was due (zero when it is not due, or final)."""
    last_poll: datetime | None = None

    @property
    def flags(self) -> list[str]:
        return [name for name, on in (("overdue", self.overdue), ("orphaned", self.orphaned)) if on]

    def describe(self, now: datetime) -> str:
        """`watch on web-1 (pid 4242), 3m ago, gone`: one cell of the status table."""
        if self.owner is None:
            return "nobody yet"
        parts = [self.owner.describe()]
        if self.alive is False:
            parts.append("gone" if self.last_poll is None else f"gone (last check {_ago(self.last_poll, now)})")
            return ", ".join(parts)
        if self.since is not None:
            parts.append(f"since {_ago(self.since, now)}")
        if self.leased:
            parts.append("polling now")
        elif self.alive is None:
            parts.append(self.owner.unseen())
        return ", ".join(parts)

    def to_json(self) -> dict[str, object]:
        owner = self.owner
        return {
            "owner": None
            if owner is None
            else {"kind": owner.kind, "host": owner.host, "pid": owner.pid, "alive": self.alive},
            "owner_since": None if self.since is None else format_rfc3339(self.since),
            "polling_now": self.leased,
            "overdue": self.overdue,
            "orphaned": self.orphaned,
            "late_seconds": round(self.late.total_seconds(), 3),
        }


@functools.lru_cache(maxsize=256)
def lease_ttl_of(contract_text: str) -> timedelta:
    """The lease TTL of a stored contract (`core.lease`), parsed once per distinct text."""
    try:
        return lease_ttl(parse_contract(contract_text, source="a stored contract"))
    except ContractError:
        return FALLBACK_TTL


def ownership_of(stored: Stored, now: datetime, *, alive: Alive = owner_alive) -> Ownership:
    record = stored.record
    leased = stored.lease_owner is not None and stored.lease_expires_at is not None and stored.lease_expires_at > now
    text = stored.lease_owner if leased else stored.watcher
    living = alive(text) if text is not None else None
    if leased and living is False:
        leased = False  # a holder killed mid-step is polling nothing; a claim takes its lease at once, too
    living = True if leased else living
    owner = parse_owner(text) if text is not None else None
    active = record.phase is Phase.ACTIVE
    late = max(timedelta(0), now - record.next_poll_at) if active else timedelta(0)
    overdue = active and not leased and late > lease_ttl_of(stored.contract_text)
    orphaned = active and not leased and text is not None and orphaned_by(text, alive=lambda _: living)
    since = stored.watcher_since if text == stored.watcher else None
    return Ownership(owner, since, leased, living, overdue, orphaned, late, record.last_observed_at)


def orphaned_by(holder: str | None, *, alive: Alive = owner_alive) -> bool:
    """Whether an active operation whose holder (the lease holder while its lease runs, else its last watcher) is
    this one is orphaned: a process known to be gone that no worker of the fleet stands in for. The fleet's
    gauges ask it once per holder (`Store.active_holders`), `ownership_of` once per operation."""
    if holder is None or alive(holder) is not False:
        return False
    return parse_owner(holder).kind != "worker"


def urgency_of(store: Pages, now: datetime, *, alive: Alive = owner_alive) -> Urgency:
    """What the store needs to rank a page of operations as `ownership_of` would flag each one: every contract's
    lease TTL (overdue), and whether an owner is gone and no worker's (orphaned), which the store asks of the few
    distinct owners it counts rather than of each row."""
    ttl = {name: lease_ttl_of(text) for name, text in store.active_contracts().items()}
    return Urgency(now, ttl, lambda owner: orphaned_by(owner, alive=alive))


def _ago(moment: datetime, now: datetime) -> str:
    seconds = round((now - moment).total_seconds())
    return "just now" if seconds < 1 else f"{format_duration(timedelta(seconds=seconds))} ago"
