"""The steps of one process's watches that are due together, taken as one batch: the worker's group commit for
the Python API's watches.

Fifty watches of one home in one process each stepped on their own thread: a read, a claim, a reservation and
a record per poll, each its own store transaction (the SQLite group writer joined their commits, but every
body still paid its own statements, savepoint and hand-off), and fifty threads taking turns at the GIL for it.
Here a watch whose step is due joins the batch that is forming; the first to join leads it, on its own thread,
as the worker's lane runs its batch (`engine.batch`): one read of all the records, every claim with the
reservation it leads to in one transaction (`Store.claim_then_write`), the requests at once (on one
selector), every record in one. The others wait for their own step's result and go on from there
(their `on_progress`, their sleep) as if they had stepped alone.

Every step is still `flow.step`, performed by its own watch's engine (its owner, clock and notifier): the
reservation is committed before its request goes out, each write is fenced on its own, a failure belongs to
its operation, a lost lease to its flow. A batch forms while the previous one is committing its claims and
reservations (the `_turn`): its requests are out by then, so a batch whose provider is slow holds up nobody's
first request, only the records of the watches in its own batch (which all have the same contract, so a
provider that hangs holds up only its own watches, and the same request timeout, so each one's lease still
covers the wait: `flow.lease_ttl`).

Interrupts (Ctrl-C reaches the main thread only): a watch interrupted while it waits for its step lets the step
finish (a request in flight is answered and recorded, as a cancel) and then raises; a leader interrupted
while it waits for its turn leads its batch and then raises; one interrupted inside its batch gives every
unfinished step's lease back (each of those steps raises `StepInterrupted`) and raises.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..core.contract import Contract
from ..errors import PollwardenError
from ..store.base import Store
from . import batch, flow
from .flow import StepResult

if TYPE_CHECKING:
    from .driver import Engine

__all__ = ["Combiner", "StepInterrupted", "combined"]

IO_THREADS = 64
"""Threads for what does not go on the batch's selector (https requests, webhooks): one per watch of a batch
of this many, so none waits for another's slow provider."""


class StepInterrupted(PollwardenError):
    """Another watch's thread was interrupted while it ran this step's batch; the lease was given back."""

    def __init__(self, operation_id: str) -> None:
        super().__init__(f"the step of operation {operation_id} was interrupted; it stays active and resumable")


@dataclass
class _Ticket:
    engine: Engine
    contract: Contract
    client: Any
    operation_id: str
    result: StepResult | BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Group:
    tickets: list[_Ticket] = field(default_factory=list)


class Combiner:
    """The batches of one store's watches in this process (`combined`)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._forming: dict[tuple[str, timedelta], _Group] = {}
        """By contract and request timeout: a batch waits for its slowest request before it records, so it holds
        only steps whose leases cover the same wait, and of one provider: one that holds its requests until their
        timeout holds up no other provider's watches."""
        self._turn = threading.Lock()
        """Held by a batch from its start until its requests go out: the next one forms meanwhile."""
        self._io: ThreadPoolExecutor | None = None
        self.users = 0

    def step(self, engine: Engine, contract: Contract, client: Any, operation_id: str) -> StepResult:
        """`Engine.step` of this watch, in the batch that is forming (led by this thread if none is)."""
        ticket = _Ticket(engine, contract, client, operation_id)
        key = (contract.name, contract.timeout)
        with self._lock:
            group = self._forming.get(key)
            lead = group is None
            if group is None:
                group = self._forming[key] = _Group()
            group.tickets.append(ticket)
        if lead:
            self._lead(key, group)
        else:
            _wait(ticket.done)
        result = ticket.result
        if isinstance(result, BaseException):
            raise result
        assert result is not None, "a batch ends every step it holds"
        return result

    def _lead(self, key: tuple[str, timedelta], group: _Group) -> None:
        interrupted: BaseException | None = None
        while True:
            try:
                self._turn.acquire()
                break
            except BaseException as exc:  # kept: the steps that joined this batch are run all the same
                interrupted = exc
        turn = [True]

        def give_turn() -> None:
            if turn:
                turn.clear()
                self._turn.release()

        try:
            with self._lock:
                del self._forming[key]  # closed: who comes now forms the next batch
            failure = self._run(group.tickets, give_turn)
            interrupted = interrupted or failure
        finally:
            give_turn()
            for ticket in group.tickets:
                ticket.done.set()
        if interrupted is not None:
            raise interrupted

    def _run(self, tickets: list[_Ticket], sending: Any) -> BaseException | None:
        """Step every ticket's operation together; an interrupt of this thread is returned, not raised."""
        lanes: list[tuple[_Ticket, batch.Lane]] = []
        try:
            stored = self.store.get_many([ticket.operation_id for ticket in tickets])
            for ticket in tickets:
                found = stored.get(ticket.operation_id)
                if found is None:
                    ticket.result = KeyError(ticket.operation_id)
                    continue
                engine = ticket.engine
                steps = flow.step(ticket.contract, found.record, engine.clock())
                lane = batch.Lane(steps, ticket.contract, ticket.client, owner=engine.owner, perform=engine._perform)
                lanes.append((ticket, lane))
            if lanes:
                leader = tickets[0].engine
                batch.run(
                    [lane for _, lane in lanes],
                    self.store,
                    leader._perform,
                    leader.clock,
                    self._pool(),
                    sending=sending,
                )
        except Exception as exc:  # the read of the records failed: every step of the batch fails with it
            for ticket in tickets:
                ticket.result = ticket.result or exc
            return None
        except BaseException as exc:
            for ticket, lane in lanes:
                if lane.result is None:
                    _give_back(lane, ticket.operation_id)
            for ticket in tickets:
                ticket.result = ticket.result or exc
            return exc
        finally:
            for ticket, lane in lanes:
                if lane.result is not None:
                    ticket.result = lane.result
        return None

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._io is None:
                self._io = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="pollwarden-watch-io")
            return self._io

    def close(self) -> None:
        with self._lock:
            io, self._io = self._io, None
        if io is not None:
            io.shutdown(wait=False)  # idle: every batch has ended (the last watch is leaving)


class _Abandoned(BaseException):
    """Thrown into a flow the batch cannot finish: no `except Exception` of the flow takes it for the step's own
    failure (a send that failed would be recorded as a stop); its `except BaseException` gives the lease back."""


def _give_back(lane: batch.Lane, operation_id: str) -> None:
    """End a flow the batch could not finish: it gives its lease back (one Release) and the step raises."""
    try:
        lane.resume(failure=_Abandoned())
        while lane.effect is not None and lane.perform is not None:
            lane.resume(*batch._attempt(lane.perform, lane.effect, lane))
    except _Abandoned:
        pass
    lane.result = StepInterrupted(operation_id)


def _wait(done: threading.Event) -> None:
    """Until the step has ended, interrupted or not: its request, if one went out, is answered and recorded."""
    interrupted: BaseException | None = None
    while True:
        try:
            done.wait()
            break
        except BaseException as exc:
            interrupted = exc
    if interrupted is not None:
        raise interrupted


_COMBINERS: dict[int, Combiner] = {}
_LOCK = threading.Lock()


@contextmanager
def combined(store: Store) -> Iterator[Combiner]:
    """The combiner of this store's watches in this process while any of them runs (the last one closes it)."""
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
        if last:
            combiner.close()
