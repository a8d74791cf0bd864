"""The steps of one process's watches that are due together, driven as one batch, as a worker drives its own;
their admissions, joined into one transaction.

Fifty watches of one home in one process each stepped on their own thread: a read, a claim, a reservation and
a record per poll, each its own store transaction, a request on a selector of its own, and fifty threads
taking turns at the GIL for it. Here a watch whose step is due joins the batch that is forming, and a thread of
the batch's own drives every step of it through `engine.batch`, the worker's driver: one read of all the
records, every claim with the reservation it leads to in one transaction (`Store.claim_then_write`), the
requests on one selector, and the records in waves as the answers come in (`batch.GATHER`): answers that
come together share a commit, and a watch whose provider is slow holds up no other watch's record for longer
than that. Each watch is handed its step's result as soon as its own lane ends, and goes on alone: its
`on_progress`, its sleep with no lease.

Admissions are joined the same way (`admit`): the watches that start together are admitted in one
transaction (`Engine.admit_each`), each created, resumed or refused on its own; a second watch of a job waits
for a round of its own and resumes the operation the first created.

A watch's step starts from the record its previous step left (`Engine.run`), so a batch reads only the
records of watches that have none yet; each claim reloads its record under the lease, as always.

Every step is still `flow.step`, performed by its own watch's engine (its owner, clock and notifier): the
reservation is committed before its request goes out, each write is fenced on its own, a failure belongs to
its operation, a lost lease to its flow. A batch forms while the previous one claims and reserves (the
`_turn`, given up once the batch's requests are going out); several batches may be in flight at once.

Interrupts (Ctrl-C reaches the main thread only): the batch's own thread is never the main one, so no
interrupt lands in another watch's step. A watch interrupted while it waits for its step hands the interrupt
to its lane (`Lane.interrupt`) and rings the batch's selector: a request not sent yet is never sent, one in
flight is abandoned (counted, as every request that may have gone out is), the flow gives its lease back, and
the watch raises the interrupt. One interrupted after its answer came in waits for its record (a commit away).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar

from ..core.admission import Refuse, WatchRequest
from ..core.contract.parse import Contract
from ..core.record import OperationRecord
from ..store.base import Store
from ..store.shared import PerStore
from ..transport.http import Fetches
from ..transport.wire_round import Round
from . import batch, flow
from .admitting import AdmissionError, Admitted, Admitting
from .effects import Effects
from .flow import StepResult

K = TypeVar("K")

__all__ = ["Combiner", "combined"]

MAX_BATCH = 64
"""Steps per batch, at most. Fifty watches due together poll fastest as one batch: split in two batches of 25,
one forming while the other committed, they measured 15% more CPU per poll and no more polls per second."""

LINGER = 0.0005
MAX_LINGER = 0.003
"""Seconds a batch that is about to close waits for more watches while they keep coming (`Combiner._linger`)."""

IO_THREADS = 16
"""Threads for what does not go on the selector (a client on another transport), made when needed."""


@dataclass(eq=False)
class _Ticket:
    engine: Effects
    contract: Contract
    client: Any
    operation_id: str
    known: OperationRecord | None
    lane: batch.Lane | None = None
    failure: BaseException | None = None
    """Its step never began (its operation is gone, or the batch failed before its flow did)."""
    interrupted: BaseException | None = None
    round: Round | None = None
    group: _Group[_Ticket] | None = None
    """The batch it joined (set by `Combiner._join` just before it is in it)."""
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def joined(self) -> bool:
        """Whether a batch holds it: then it will step, and only its lane can end that step."""
        return self.group is not None and any(t is self for t in self.group.tickets)

    def interrupt(self, exc: BaseException) -> None:
        """From the watch's thread: its lane is to end with `exc` (`Lane.interrupt`) at the batch's next look."""
        with self.lock:
            self.interrupted = exc
            if self.lane is not None:
                self.lane.interrupt = exc
            if self.round is not None:
                self.round.ring()

    def begin(self, lane: batch.Lane, round_: Round) -> None:
        """From the batch's thread: the lane that drives this step, in the round that carries its request."""
        with self.lock:
            self.lane, self.round = lane, round_
            lane.interrupt = self.interrupted


@dataclass(eq=False)
class _Admission:
    engine: Admitting
    request: WatchRequest
    result: Admitted | Refuse | Exception | None = None
    failure: BaseException | None = None
    group: _Group[_Admission] | None = None
    done: threading.Event = field(default_factory=threading.Event)


T = TypeVar("T", _Ticket, _Admission)


@dataclass
class _Group(Generic[T]):
    tickets: list[T] = field(default_factory=list)
    opened: float = field(default_factory=time.monotonic)
    last: float = field(default_factory=time.monotonic)
    """When its latest ticket joined: a group closes once nobody has joined for `LINGER`."""
    full: threading.Event = field(default_factory=threading.Event)
    """Set when nobody else can join: every watch of the store in this process has, or `MAX_BATCH` did."""


class Combiner:
    """The batches of one store's watches in this process (`combined`)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._forming: dict[timedelta, _Group[_Ticket]] = {}
        """By request timeout: the steps of one batch share their leases' length (`core.lease`)."""
        self._turn = threading.Lock()
        """Held by a batch while it reads, claims and reserves: the next one forms meanwhile."""
        self._admitting: dict[None, _Group[_Admission]] = {}
        self._admit_turn = threading.Lock()
        """Held by a batch of admissions until it has committed: the next one forms meanwhile."""
        self._io: ThreadPoolExecutor | None = None
        self.users = 0

    def step(
        self, engine: Effects, contract: Contract, client: Any, operation_id: str, known: OperationRecord | None
    ) -> StepResult:
        """`Engine.step` of this watch, driven in the batch that is forming."""
        ticket = _Ticket(engine, contract, client, operation_id, known)
        interrupted = _wait(ticket, lambda: self._join(self._forming, contract.timeout, ticket, self._lead))
        if ticket.failure is not None:
            raise ticket.failure
        assert ticket.lane is not None and ticket.lane.result is not None, "a batch ends every step it holds"
        result = ticket.lane.result
        if isinstance(result, BaseException):  # its flow gave its lease back and re-raised (an interrupt too)
            raise result
        if interrupted is not None:  # it came after the answer: the step is recorded, the watch ends here
            raise interrupted
        return result

    def admit(self, engine: Admitting, request: WatchRequest) -> Admitted:
        """`Engine.admit` of this watch, in the batch of admissions that is forming: one transaction for the
        watches that start together (`Engine.admit_each`), each refused or admitted on its own. Raises
        AdmissionError as `Engine.admit` does; an interrupt while it waits is raised once its batch committed
        (a commit away), and the operation it admitted waits, resumable."""
        ticket = _Admission(engine, request)
        self._join(self._admitting, None, ticket, self._lead_admissions)
        interrupted: BaseException | None = None
        while True:
            try:
                ticket.done.wait()
                break
            except BaseException as exc:
                interrupted = interrupted or exc
        if ticket.failure is not None:
            raise ticket.failure
        if isinstance(ticket.result, Refuse):
            raise AdmissionError(ticket.result)
        if isinstance(ticket.result, Exception):
            raise ticket.result
        if interrupted is not None:
            raise interrupted
        assert ticket.result is not None, "a batch of admissions ends every admission it holds"
        return ticket.result

    def _join(self, forming: dict[K, _Group[T]], key: K, ticket: T, lead: Callable[[K, _Group[T]], None]) -> None:
        """Into the group forming under `key`; the first to come starts its leader's thread."""
        with self._lock:
            group = forming.get(key)
            if group is None or len(group.tickets) >= MAX_BATCH:  # a full one is closing: a new one forms
                group = forming[key] = _Group()
                try:  # started under the lock, so the batch cannot close before this ticket is in it
                    threading.Thread(target=lead, args=(key, group), name="pollwarden-watch-batch", daemon=True).start()
                except BaseException:  # no thread (the process is out of them): no group waits for a leader
                    del forming[key]
                    raise
            ticket.group = group  # before it is in: whoever finds it in `group.tickets` finds the group too
            group.tickets.append(ticket)
            group.last = time.monotonic()
            if len(group.tickets) >= min(MAX_BATCH, self.users):
                group.full.set()

    def _close(self, forming: dict[K, _Group[T]], key: K, group: _Group[T]) -> None:
        """No ticket joins `group` from now on: who comes now forms the next batch."""
        with self._lock:
            if forming.get(key) is group:
                del forming[key]

    def _linger(self, group: _Group[T]) -> None:
        """While watches keep joining (the latest came less than `LINGER` ago), wait for them, `MAX_LINGER` at most:
        watches that come due together arrive a few hundred microseconds apart, and a batch closed at the first
        of them was a transaction, a thread and a selector for one or two steps."""
        while True:
            now = time.monotonic()
            with self._lock:
                quiet = now - group.last
            if quiet >= LINGER or now - group.opened >= MAX_LINGER:
                return
            if group.full.wait(LINGER - quiet):  # woken by the last to join, not a sleep's late wake-up
                return

    def _lead_admissions(self, key: None, group: _Group[_Admission]) -> None:
        try:
            with self._admit_turn:
                self._linger(group)
                self._close(self._admitting, key, group)
                pending = group.tickets
                while pending:
                    these, pending = _apart(pending)
                    results = these[0].engine.admit_each([t.request for t in these], [t.engine for t in these])
                    for ticket, result in zip(these, results, strict=True):
                        ticket.result = result
                        ticket.done.set()
        except Exception as exc:  # the store failed: every admission not yet answered fails with it
            for ticket in group.tickets:
                if ticket.result is None:
                    ticket.failure = exc
        finally:
            for ticket in group.tickets:
                ticket.done.set()

    def _lead(self, key: timedelta, group: _Group[_Ticket]) -> None:
        self._turn.acquire()
        held = [True]

        def reserved() -> None:  # once, from this thread: when the batch's requests go out, or it ends
            if held:
                held.clear()
                self._turn.release()

        try:
            self._linger(group)
            self._close(self._forming, key, group)
            self._run(group.tickets, reserved)
        finally:
            reserved()
            for ticket in group.tickets:
                ticket.done.set()

    def _run(self, tickets: list[_Ticket], reserved: Callable[[], None]) -> None:
        """Every ticket's step, driven to its end; each ticket is told as soon as its own lane has ended."""
        fetches: Fetches | None = None
        try:
            fetches = Fetches(ringable=True)
            unknown = [ticket.operation_id for ticket in tickets if ticket.known is None]
            stored = self.store.get_many(unknown) if unknown else {}
            lanes: list[batch.Lane] = []
            for ticket in tickets:
                found = stored.get(ticket.operation_id)
                record = ticket.known or (found.record if found is not None else None)
                if record is None:
                    ticket.failure = KeyError(ticket.operation_id)
                    ticket.done.set()
                    continue
                engine = ticket.engine
                lane = batch.Lane(
                    flow.step(ticket.contract, record, engine.clock()),
                    ticket.contract,
                    ticket.client,
                    owner=engine.owner,
                    perform=engine.perform,
                    on_end=ticket.done.set,
                )
                ticket.begin(lane, fetches.round)
                lanes.append(lane)
            if lanes:
                leader = tickets[0].engine
                means = batch.Means(self.store, leader.perform, leader.clock, self._pool())
                batch.run(lanes, means, fetches=fetches, reserved=reserved)
        except Exception as exc:  # a defect of the batch itself: each step still ends, its lease given back
            if fetches is not None:
                fetches.round.close()  # every request in flight abandoned first
            for ticket in tickets:
                if ticket.lane is None:
                    ticket.failure = ticket.failure or exc
                elif ticket.lane.result is None:
                    _finish_alone(ticket, exc)
        finally:
            if fetches is not None:
                fetches.round.close()

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._io is None:
                self._io = ThreadPoolExecutor(max_workers=IO_THREADS, thread_name_prefix="pollwarden-watch-io")
            return self._io

    def close(self) -> None:
        with self._lock:
            io, self._io = self._io, None
        if io is not None:
            io.shutdown(wait=False)


def _apart(tickets: list[_Admission]) -> tuple[list[_Admission], list[_Admission]]:
    """The admissions that can share a transaction (no two naming one operation or one job), and the rest: a
    second watch of a job resumes the operation the first creates, so it is admitted after it."""
    names: set[object] = set()
    these: list[_Admission] = []
    later: list[_Admission] = []
    for ticket in tickets:
        request = ticket.request
        keys: set[object] = set()
        if request.job_id is not None:
            keys.add((request.contract.name, request.job_id))  # a job's name under its contract
        if request.operation_id is not None:
            keys.add(request.operation_id)  # an operation's id: a string, never equal to a pair
        if keys & names:
            later.append(ticket)
        else:
            names |= keys
            these.append(ticket)
    return these, later


def _finish_alone(ticket: _Ticket, failure: Exception) -> None:
    """A step its batch could not finish: `failure` thrown into its flow where it waits, driven alone to its end
    (the flow gives back the lease it holds); a request it had in flight was abandoned when the batch's round
    was closed, just before."""
    lane = ticket.lane
    assert lane is not None
    try:
        lane.result = ticket.engine.drive_from(lane.steps, ticket.contract, ticket.client, lane.effect, failure)
    except BaseException as exc:
        lane.result = exc


def _wait(ticket: _Ticket, join: Callable[[], None]) -> BaseException | None:
    """Joins a batch (`join`), then waits until the ticket's step has ended, interrupted or not; the interrupt, if
    one came, handed to its lane. Joining is inside the same guard: an interrupt that lands once the ticket is in
    its batch but before the wait began (between two bytecodes of `join`, or just after it returned) is handed to
    the lane too, instead of leaving the step running in the batch for a watch that has already gone."""
    interrupted: BaseException | None = None
    while True:
        try:
            if interrupted is None and not ticket.joined():
                join()
            ticket.done.wait()
            return interrupted
        except BaseException as exc:
            if not ticket.joined():  # no batch holds it: nothing runs for it, the interrupt goes on at once
                raise
            if interrupted is None:
                interrupted = exc
                ticket.interrupt(exc)


_COMBINERS: PerStore[Combiner] = PerStore()


@contextmanager
def combined(store: Store) -> Iterator[Combiner]:
    """The combiner of this store's watches in this process while any of them runs."""
    with _COMBINERS.use(store, Combiner, Combiner.close) as combiner:
        yield combiner
