"""The changes of an operation other than its poll, under one claim policy and one release-on-error.

A person's answer, an agent's extension or cancel request, a narrowing of limits and the fleet's pacing all
change a fenced record the way a poll does (`flow`): take the operation's lease, look at the record as it is
under it, write with the lease's fence. `holding` is that shape, written once: it claims (waiting as long as
the caller's `patience` says for a watcher's one step to end), hands over a `Held`, and gives the lease back
on any error, whatever raised it. `Held.write` is fenced: a write that finds the lease taken over raises
`TakenOver`, so no caller ignores it. Which change may happen from which state is `core.transitions`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..core import transitions
from ..core.decide import defer, paced_wait
from ..core.durations import format_rfc3339
from ..core.escalation import DecisionRequest
from ..core.record import OperationRecord
from ..core.transitions import Change
from ..errors import PollwardenError
from ..events import Paced
from ..events.base import NewEvent
from ..store.base import Claimed, Lease, Resolution, Store

RETRY = 0.05
"""Seconds between claims while a change waits for a watcher's step to end."""


class ChangeRefused(PollwardenError):
    """The change was not made: nothing was written. Interfaces say it in their own words."""

    def __init__(self, operation_id: str, message: str) -> None:
        super().__init__(message)
        self.operation_id = operation_id


class HeldElsewhere(ChangeRefused):
    """Another process held the operation's lease for longer than the change would wait."""

    def __init__(self, operation_id: str) -> None:
        super().__init__(operation_id, f"operation {operation_id} is busy in another process; try again in a moment")


class TakenOver(ChangeRefused):
    """The fenced write found a newer owner: our lease had expired and was taken; its facts win."""

    def __init__(self, operation_id: str) -> None:
        super().__init__(operation_id, f"operation {operation_id} was taken over by another process; try again")


@dataclass(frozen=True)
class Patience:
    """How long a change waits for the lease a watcher holds while one step runs. `seconds=0`: one claim, and
    a busy operation is refused at once; `stopping`: a process that is leaving stops waiting."""

    seconds: float = 0.0
    stopping: threading.Event | None = None

    @classmethod
    def of(cls, change: Change, ttl: timedelta, stopping: threading.Event | None = None) -> Patience:
        """The patience the transitions table gives `change` (`ttl`: the contract's lease TTL)."""
        return cls(transitions.patience(change, ttl).total_seconds(), stopping)


AT_ONCE = Patience()


@dataclass
class Held:
    """An operation's lease and its record as read under it. Every write through it is fenced."""

    store: Store
    lease: Lease
    record: OperationRecord
    clock: Callable[[], datetime]

    @classmethod
    def of(cls, store: Store, claimed: Claimed, clock: Callable[[], datetime]) -> Held:
        """A lease a claim of the fleet already took (the worker's)."""
        return cls(store, claimed.lease, claimed.record, clock)

    def write(
        self, record: OperationRecord, events: Sequence[NewEvent], *, decision: DecisionRequest | None = None
    ) -> None:
        """The new record, its events and any decision request (whose webhook the store queues with it, for every
        change that opens one), in one fenced write that gives the lease back."""
        if not self.store.write(self.lease, record, events, self.clock(), release=True, decision=decision):
            raise TakenOver(self.lease.operation_id)
        self.record = record

    def resolve(self, closing: Resolution, record: OperationRecord | None, events: Sequence[NewEvent]) -> None:
        """A person's answer: the decision closed once (`DecisionTaken` if someone answered first), with the new
        record if the answer changes it, and its events, in one fenced write that gives the lease back."""
        if not self.store.resolve_decision(self.lease, closing, record=record, events=events, now=self.clock()):
            raise TakenOver(self.lease.operation_id)
        if record is not None:
            self.record = record

    def defer_paced(self, until: datetime, event: NewEvent) -> bool:
        """Pacing (`Store.defer_paced`): still due, not claimed before `until`, one event per paced wait."""
        return self.store.defer_paced(self.lease, until, event, self.clock())

    def release(self) -> None:
        """The lease back, the record unchanged (a change that found nothing to do)."""
        self.store.release(self.lease)


PACING_HORIZON = timedelta(seconds=1)
"""A pacing slot this close is waited for in place; a later one sends the operation back to the queue."""


@dataclass(frozen=True)
class Slot:
    """Where fleet pacing leaves a due operation: its poll goes at `at` (`taken`: now, or a slot within the
    horizon, never past a limit), or it was paced to `at` and its lease given back (not `taken`)."""

    at: datetime
    taken: bool


def pace_due(held: Held, provider: str, interval: timedelta | None, now: datetime) -> Slot:
    """The fleet's pacing of a due operation (R7 across machines): the provider's next slot, waited for when near;
    when far, the operation stays due (and overdue when it is: every gauge and view counts it) and no claim takes
    it before the slot, never past a limit (a claim then stops it instead). A wait for a slot is one `paced`
    event however many claims meet it meanwhile. `interval`: this worker's spacing for the provider, if any."""
    paced = held.store.pace(provider, now, interval=interval, horizon=PACING_HORIZON)
    if paced is None:
        return Slot(now, taken=True)
    slot, taken = paced
    if taken:
        return Slot(now + paced_wait(held.record, slot, now), taken=True)
    until = defer(held.record, slot).next_poll_at
    if not held.defer_paced(until, Paced(provider=provider, until=format_rfc3339(until))):
        raise TakenOver(held.lease.operation_id)
    return Slot(until, taken=False)


def claim(
    store: Store, operation_id: str, owner: str, ttl: timedelta, clock: Callable[[], datetime], patience: Patience
) -> Held:
    """The one claim policy: claim, and while another process holds the lease, claim again every `RETRY`
    seconds until `patience` runs out (then `HeldElsewhere`)."""
    started = time.monotonic()
    while True:
        claimed = store.claim(operation_id, owner, clock(), ttl)
        if claimed is not None:
            return Held(store, claimed[0], claimed[1], clock)
        stopping = patience.stopping
        if time.monotonic() - started >= patience.seconds or (stopping is not None and stopping.is_set()):
            raise HeldElsewhere(operation_id)
        if stopping is not None:
            stopping.wait(RETRY)
        else:
            time.sleep(RETRY)


@contextmanager
def holding(
    store: Store,
    operation_id: str,
    owner: str,
    ttl: timedelta,
    clock: Callable[[], datetime],
    patience: Patience = AT_ONCE,
) -> Iterator[Held]:
    """`claim`, then the caller's change; on any error (its own refusal, a store failure, an interrupt) the
    lease is given back before the error goes on. On a normal exit nothing more is done: a change that wrote gave
    the lease back with its write (`Held.write`), one that found nothing to do calls `Held.release`."""
    held = claim(store, operation_id, owner, ttl, clock, patience)
    with giving_back(held):
        yield held


@contextmanager
def giving_back(held: Held) -> Iterator[Held]:
    """The one release-on-error, for a lease taken by `claim` or by the fleet's claim (`Held.of`)."""
    try:
        yield held
    except BaseException:
        with suppress(Exception):  # the store itself is failing: the lease expires on its own, the error goes on
            held.release()
        raise


__all__ = [
    "AT_ONCE",
    "PACING_HORIZON",
    "ChangeRefused",
    "Held",
    "HeldElsewhere",
    "Patience",
    "Slot",
    "TakenOver",
    "claim",
    "giving_back",
    "holding",
    "pace_due",
]
