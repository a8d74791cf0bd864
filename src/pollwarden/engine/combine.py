"""The claims and reservations of one process's watches that are due together, committed as one batch.

Fifty watches of one home in one process each stepped on their own thread: a read, a claim, a reservation and
a record per poll, each its own store transaction (the SQLite group writer joined their commits, but every
body still paid its own statements, savepoint and hand-off), and fifty threads taking turns at the GIL for it.
Here a watch whose step is due joins the batch that is forming, and a thread of the batch's own takes it up to
the moment the requests would go out, as the worker's lane does (`engine.batch`, `until_io`): one read of all
the records, every claim with the reservation it leads to in one transaction (`Store.claim_then_write`). From
there each watch goes on alone, on its own thread, through its own engine (`Engine.drive_from`): its request,
its record, its `on_progress`, as if it had stepped alone. So a batch shares only what costs a transaction,
never a wait: a watch whose provider is slow holds up no other watch's answer, record or next poll.

Every step is still `flow.step`, performed by its own watch's engine (its owner, clock and notifier): the
reservation is committed before its request goes out, each write is fenced on its own, a failure belongs to
its operation, a lost lease to its flow. A batch forms while the previous one commits (the `_turn`).

Interrupts (Ctrl-C reaches the main thread only): the batch's own thread is never the main one, so no
interrupt lands in the middle of another watch's claim; a watch interrupted while it waits for its batch
(a commit, milliseconds) waits for it to end and then throws the interrupt into its own flow, which gives its
lease back (its reservation counted, its request never sent) and raises; one interrupted during its own
request is the lone step's case.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..core.contract import Contract
from ..store.base import Store
from . import batch, flow
from .flow import StepResult

if TYPE_CHECKING:
    from .driver import Engine

__all__ = ["Combiner", "combined"]


@dataclass
class _Ticket:
    engine: Engine
    contract: Contract
    client: Any
    operation_id: str
    lane: batch.Lane | None = None
    failure: Exception | None = None
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Group:
    tickets: list[_Ticket] = field(default_factory=list)


class Combiner:
    """The batches of one store's watches in this process (`combined`)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._forming: dict[timedelta, _Group] = {}
        """By request timeout: each claim's lease must cover its own request's wait (`flow.lease_ttl`)."""
        self._turn = threading.Lock()
        """Held by a batch while it reads, claims and reserves: the next one forms meanwhile."""
        self.users = 0

    def step(self, engine: Engine, contract: Contract, client: Any, operation_id: str) -> StepResult:
        """`Engine.step` of this watch: its claim and reservation in the batch that is forming, the rest alone."""
        ticket = _Ticket(engine, contract, client, operation_id)
        with self._lock:
            group = self._forming.get(contract.timeout)
            if group is None:
                group = self._forming[contract.timeout] = _Group()
                # Started under the lock, so the batch cannot close before this ticket is in it.
                threading.Thread(
                    target=self._lead, args=(contract.timeout, group), name="pollwarden-watch-batch", daemon=True
                ).start()
            group.tickets.append(ticket)
        interrupted = _wait(ticket.done)
        lane = ticket.lane
        if lane is None:  # its operation is gone, or the batch failed before its flow began
            assert ticket.failure is not None, "a batch ends every step it holds"
            raise ticket.failure
        if lane.result is not None:  # it ended without a request: not due, busy, or a stop
            if isinstance(lane.result, Exception):
                raise lane.result
            if interrupted is not None:
                raise interrupted
            return lane.result
        # At its request (or announcement), or where the batch failed: thrown in there, the flow gives back
        # the lease it was told of and re-raises.
        return engine.drive_from(lane.steps, contract, client, lane.effect, interrupted or ticket.failure)

    def _lead(self, key: timedelta, group: _Group) -> None:
        try:
            with self._turn:
                with self._lock:
                    del self._forming[key]  # closed: who comes now forms the next batch
                self._run(group.tickets)
        finally:
            for ticket in group.tickets:
                ticket.done.set()

    def _run(self, tickets: list[_Ticket]) -> None:
        """Every ticket's flow up to its first request, its claim and reservation committed with the others'."""
        try:
            stored = self.store.get_many([ticket.operation_id for ticket in tickets])
            lanes: list[batch.Lane] = []
            for ticket in tickets:
                found = stored.get(ticket.operation_id)
                if found is None:
                    ticket.failure = KeyError(ticket.operation_id)
                    continue
                engine = ticket.engine
                steps = flow.step(ticket.contract, found.record, engine.clock())
                ticket.lane = batch.Lane(
                    steps, ticket.contract, ticket.client, owner=engine.owner, perform=engine._perform
                )
                lanes.append(ticket.lane)
            if lanes:
                leader = tickets[0].engine
                batch.run(lanes, self.store, leader._perform, leader.clock, None, until_io=True)
        except Exception as exc:  # every step of the batch fails with it, thrown into its own flow (`step`)
            for ticket in tickets:
                ticket.failure = ticket.failure or exc


def _wait(done: threading.Event) -> BaseException | None:
    """Until the batch has ended, interrupted or not (it is a commit away); the interrupt, if one came."""
    interrupted: BaseException | None = None
    while True:
        try:
            done.wait()
            return interrupted
        except BaseException as exc:
            interrupted = exc


_COMBINERS: dict[int, Combiner] = {}
_LOCK = threading.Lock()


@contextmanager
def combined(store: Store) -> Iterator[Combiner]:
    """The combiner of this store's watches in this process while any of them runs."""
    with _LOCK:
        combiner = _COMBINERS.get(id(store))
        if combiner is None or combiner.store is not store:
            combiner = _COMBINERS[id(store)] = Combiner(store)
        combiner.users += 1
    try:
        yield combiner
    finally:
        with _LOCK:
            combiner.users -= 1
            last = combiner.users == 0
            if last and _COMBINERS.get(id(store)) is combiner:
                del _COMBINERS[id(store)]
