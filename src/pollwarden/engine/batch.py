"""Group commit: many claimed operations stepped through the one flow together, two commits for most of them.

Nothing here decides anything: each operation runs `flow.step_claimed` (or `flow.step`), exactly as
`Engine.step_claimed` runs it. What changes is how the effects are performed:

- every pending `Write` of every flow is committed in one transaction (`Store.write_many`): the K reservations
  together, later the records of the answers in. A write is fenced on its own, so one lost lease changes
  nothing of the others. A flow still gets its answer only after the commit, so each reservation is durable
  before its request goes out (a stop's webhook is queued in its write, for the outbox: nothing here sends it);
- then every pending `Send` goes out at once: K requests in flight, each under its own contract's deadline;
  the status polls (http and https) on one selector in the batch's own thread (`http.Fetches`), the rest (a
  test's client) on the I/O pool;
- the answers are taken in waves: once the first is in, the batch waits `GATHER` at most for the others, and
  the flows whose answers are in go on to their records, committed together, while the rest stay in flight.
  On loopback a wave is the whole batch; a provider that takes its time holds up no other record;
- everything else (`Now`, `Draw`, `Release`, a lost lease's `Append`, ...) is performed in place.

If the batch transaction fails, each write is retried in a transaction of its own, so a write the store refuses
(a value the audit encoder cannot take) fails only its own flow, which stops as the flow says, and a passing
database error costs a retry instead of K stopped operations.

A kill -9 at any point loses nothing the single driver would keep: before the reservation commit nothing was
sent; after it every request sent is counted; a crash before the record commit leaves counted reservations
without answers, which is what the protocol allows (the provider never sees more than was counted).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ..core.contract.parse import Contract
from ..core.observe import Exchange
from ..store.base import Claimed, ClaimOf, Store
from ..transport.http import Fetch, Fetches, StatusClient
from . import flow
from .flow import StepResult

Perform = Callable[[flow.Effect[Any], Contract, Any], Any]
"""How the engine performs one effect for one flow (`Engine.perform`)."""

Outcome = tuple[Any, BaseException | None]

_IO = (flow.Send,)


GATHER = 0.01
"""Seconds a batch waits, after the first of its answers in flight has come, for more to record with it: answers
that come together share a commit, and a slow provider holds up no one else's record for longer than this."""


@dataclass(eq=False)
class Lane:
    """One flow of a batch, the effect it waits on, and how it ended."""

    steps: flow.Flow[StepResult]
    contract: Contract
    client: Any
    effect: flow.Effect[Any] | None = None
    result: StepResult | BaseException | None = None
    owner: str | None = None
    """Who claims for a flow that starts with its claim (`flow.step`: the combined watches of `combine`): the
    lanes' claims are then taken together, in one transaction. None: a flow entered with its lease."""
    perform: Perform | None = None
    """How this lane's own effects are performed (its engine's owner, clock and notifier), if not the batch's."""
    on_end: Callable[[], None] | None = None
    """Told as soon as this lane has its result, while the batch goes on with the others."""
    interrupt: BaseException | None = None
    """Set from another thread (its watch was interrupted), with the batch's round rung: thrown into the flow
    instead of the answer of a request in flight or about to go out (the request abandoned, or never sent)."""
    of: Any = None
    """What its caller knows it by (a worker's lane: the claimed operation it steps, `Chosen`)."""

    def resume(self, answer: Any = None, failure: BaseException | None = None) -> None:
        try:
            self.effect = self.steps.throw(failure) if failure is not None else self.steps.send(answer)
        except StopIteration as stop:
            self._end(stop.value)
        except BaseException as exc:  # the flow gave its lease back and re-raised: this operation's failure only
            self._end(exc)

    def _end(self, result: StepResult | BaseException) -> None:
        self.effect, self.result = None, result
        if self.on_end is not None:
            self.on_end()


@dataclass(frozen=True)
class Means:
    """What a batch is driven with, together wherever a batch is (`run`, `claim_due_and_run`): the store its
    writes commit to, how each effect is performed (`Engine.perform`), the clock, and the pool for the I/O that
    does not go on the selector."""

    store: Store
    perform: Perform
    clock: Callable[[], datetime]
    io: Executor


@dataclass(frozen=True)
class Due:
    """A worker's claim of due operations (`Store.claim_due`): up to `limit` of them, as `owner`, at `now`, for
    `ttl`; `skip`: contract names the claim passes over."""

    owner: str
    now: datetime
    ttl: timedelta
    limit: int
    skip: Collection[str] = ()


@dataclass(eq=False)
class Aside:
    """The rest of a batch, moved off the thread that began it (`run`'s `aside`): the lanes still waiting on their
    requests (or on their credentials), and `finish`, which drives them to their ends on the thread that calls
    it, with that thread's store and performer (a SQLite connection serves one thread at a time)."""

    lanes: list[Lane]
    finish: Callable[[Store, Perform], None]


def run(
    lanes: Sequence[Lane],
    means: Means,
    *,
    fetches: Fetches | None = None,
    reserved: Callable[[], None] | None = None,
    gather: float = GATHER,
    begun: bool = False,
    aside: Callable[[Aside], None] | None = None,
) -> None:
    """Drive every lane to its end; each lane's `result` is its StepResult or the exception it ended with.

    The status polls go on one selector in this thread (`fetches`, made here unless the caller rings it), the
    other I/O (a client on another transport) on `io`. The answers are taken in waves (`gather`):
    the lanes whose answers are in go on to their records, committed together, while the others stay in flight.
    `reserved` is told once, when no lane waits on a claim or a reservation any more (its requests are going
    out): the combined watches (`combine`) let the next batch form from then on. `begun`: the lanes are under
    way already (`claim_due_and_run` began them inside its claim).

    `aside` (a worker's lane): once nothing but requests in flight is left and `ASIDE` seconds have passed since
    the last went out, the rest of the batch is handed to it (`Aside`; it runs `finish` on a thread of its own)
    and `run` returns, so one silent provider holds only its own requests, never the lane that sent them. If it
    cannot be handed (the worker is stopping), it is finished here."""
    if not begun:
        for lane in lanes:
            lane.resume()
    mine = fetches is None
    fetches = Fetches() if fetches is None else fetches
    drive = _Drive(list(lanes), means.store, means.perform, means.clock, means.io, fetches, reserved, gather)
    handed = False
    try:
        if drive.go(None if aside is None else ASIDE):
            return

        def finish(store: Store, perform: Perform) -> None:
            drive.store, drive.perform = store, perform
            try:
                drive.go(None)
            except Exception as exc:  # a defect, or the store gone: each lane still going ends with it, alone
                drive.fail(exc)
            finally:
                if mine:
                    drive.fetches.round.close()

        assert aside is not None
        try:
            aside(Aside([lane for lane in lanes if lane.result is None], finish))
        except RuntimeError:  # nowhere to hand it (the worker is stopping): it is finished here
            drive.go(None)
        else:
            handed = True
    finally:
        if mine and not handed:
            drive.fetches.round.close()


ASIDE = 0.1
"""Seconds a worker's lane waits for the answers of its batch once every request is out (answers in by then are
recorded in its waves, as ever); what is still in flight then goes on in a thread of its own, and the lane claims
again. On loopback a batch's answers take a few milliseconds; a silent provider takes its whole timeout."""


@dataclass(eq=False)
class _Drive:
    """What `run` drives: the lanes, their requests in flight (`flying`) and the lanes waiting for a credential
    (`preparing`: a token command run off this thread, by `io`). Driven by one thread at a time."""

    lanes: list[Lane]
    store: Store
    perform: Perform
    clock: Callable[[], datetime]
    io: Executor
    fetches: Fetches
    reserved: Callable[[], None] | None
    gather: float
    flying: dict[Lane, Fetch | Future[Outcome]] = field(default_factory=dict)
    preparing: dict[Lane, Future[None]] = field(default_factory=dict)
    sent: float = 0.0
    """When the latest requests went out (monotonic)."""

    def go(self, aside_after: float | None) -> bool:
        """On until every lane has ended (True), or, with `aside_after`, until nothing but requests in flight (and
        credentials being read) is left that long after the last went out (False)."""
        lanes, flying, preparing, fetches = self.lanes, self.flying, self.preparing, self.fetches
        while True:
            for lane in lanes:
                while lane.effect is not None and not _gathered(lane):
                    lane.resume(*_attempt(lane.perform or self.perform, lane.effect, lane))
            claiming = [lane for lane in lanes if isinstance(lane.effect, flow.Claim)]
            if claiming:
                _claim_and_reserve(claiming, self.store, self.perform, self.clock())
                continue
            writing = [lane for lane in lanes if isinstance(lane.effect, flow.Write)]
            if writing:
                writes = [lane.effect for lane in writing if isinstance(lane.effect, flow.Write)]
                for lane, outcome in zip(writing, write_all(self.store, writes, self.clock()), strict=True):
                    lane.resume(*outcome)
                continue  # the flows that just committed may want I/O now: it goes out together
            starting = [
                lane for lane in lanes if isinstance(lane.effect, _IO) and lane not in flying and lane not in preparing
            ]
            if starting:
                _start(starting, fetches, flying, preparing, self.perform, self.clock, self.io)
                self.sent = time.monotonic()
                continue  # a request that ended before the wire (or too late to go) moved its flow on
            if self.reserved is not None:
                self.reserved()
                self.reserved = None
            if not flying and not preparing:
                return True
            until = None
            if aside_after is not None:
                until = self.sent + aside_after
                if time.monotonic() >= until:
                    return False
            try:
                ended = fetches.wait(self.gather, until=until)
            except Exception as exc:  # the selector itself failed, not one request: nothing in flight is lost
                _give_up(flying, preparing, fetches, exc)
                continue
            for lane, future in list(preparing.items()):
                if future.done():  # its credential is in (or failed): it starts with the next round
                    del preparing[lane]
            _take(ended, flying)
            for lane in [lane for lane in preparing if lane.interrupt is not None]:
                del preparing[lane]  # `_start` throws its interrupt in
            for lane, sent in [(lane, sent) for lane, sent in flying.items() if lane.interrupt is not None]:
                if isinstance(sent, Fetch):  # a future runs to its end: its flow is told when it is done
                    fetches.abandon(sent)
                    del flying[lane]
                    lane.resume(None, lane.interrupt)

    def fail(self, failure: Exception) -> None:
        """The drive itself failed: every request in flight is abandoned, and each lane still going is handed the
        failure and driven alone to its end (its flow gives back the lease it holds)."""
        self.fetches.round.close()
        self.flying.clear()
        self.preparing.clear()
        for lane in self.lanes:
            if lane.result is None:
                lane.resume(None, failure)
                while lane.effect is not None:
                    lane.resume(*_attempt(lane.perform or self.perform, lane.effect, lane))


def _gathered(lane: Lane) -> bool:
    """The lane waits on an effect performed for the whole batch at once: a write, a claim (of a lane that
    claims), I/O."""
    effect = lane.effect
    return isinstance(effect, flow.Write | flow.Send) or (isinstance(effect, flow.Claim) and lane.owner is not None)


def _selects(client: Any) -> bool:
    return isinstance(client, StatusClient) and client.selects


def _start(
    lanes: Sequence[Lane],
    fetches: Fetches,
    flying: dict[Lane, Fetch | Future[Outcome]],
    preparing: dict[Lane, Future[None]],
    perform: Perform,
    clock: Callable[[], datetime],
    io: Executor,
) -> None:
    """Each lane's request on its way: a status poll on the selector (on the pool each was a
    thread, and handing the GIL between them cost more CPU than the requests: docs/performance.md), the rest on
    `io`. A poll reached too late (`flow.too_late`: other lanes' commits came first) is not sent, nor one whose
    watch was interrupted before it went out. A poll whose client would first wait for its credential (a token
    command, `StatusClient.ready`) waits for it in `preparing`, the command's wait on `io`, never on this thread:
    one contract's slow command holds up no other poll. It starts once that wait is over, its time limit checked
    then."""
    now = clock()
    polls: list[tuple[Lane, flow.Send]] = []
    prepares: dict[int, Future[None]] = {}
    for lane in lanes:
        effect = lane.effect
        if lane.interrupt is not None:
            lane.resume(None, lane.interrupt)
        elif isinstance(effect, flow.Send) and _selects(lane.client):
            if (late := flow.too_late(effect, now)) is not None:
                lane.resume(None, late)
            elif lane.client.ready():
                polls.append((lane, effect))
            else:
                future = prepares.get(id(lane.client))
                if future is None:
                    future = prepares[id(lane.client)] = io.submit(lane.client.prepare)
                    fetches.round.watch(future)
                preparing[lane] = future
        elif effect is not None:
            attempt = io.submit(_attempt, lane.perform or perform, effect, lane)
            fetches.round.watch(attempt)
            flying[lane] = attempt
    try:
        started = fetches.start([(lane.client, send.job_id, send.headers, send.location) for lane, send in polls])
    except Exception as exc:  # as a pool thread's `_attempt` would: each flow is handed it, none stalls the batch
        for lane, _ in polls:
            lane.resume(None, exc)
        return
    for (lane, _), fetch in zip(polls, started, strict=True):
        if fetch.result is None:
            flying[lane] = fetch
        else:
            lane.resume(*_outcome(fetch.result))


def _take(ended: tuple[list[Fetch], list[Future[Outcome]]], flying: dict[Lane, Fetch | Future[Outcome]]) -> None:
    """The flows whose answers (or failures) came in this wave, told of them."""
    fetched, done = ended
    finished: set[object] = {*fetched, *done}
    for lane, sent in [(lane, sent) for lane, sent in flying.items() if sent in finished]:
        del flying[lane]
        if isinstance(sent, Fetch):
            assert sent.result is not None
            lane.resume(*_outcome(sent.result))
        else:
            lane.resume(*sent.result())


def _give_up(
    flying: dict[Lane, Fetch | Future[Outcome]],
    preparing: dict[Lane, Future[None]],
    fetches: Fetches,
    failure: Exception,
) -> None:
    """The selector failed: each poll in flight is abandoned and its flow handed the failure (as one request's
    own failure would be), as is each poll still waiting for its credential; each future is waited for, so
    nothing is left to the broken selector."""
    for lane, sent in list(flying.items()):
        del flying[lane]
        if isinstance(sent, Fetch):
            fetches.abandon(sent)
            lane.resume(None, failure)
        else:
            lane.resume(*sent.result())
    for lane in list(preparing):
        del preparing[lane]
        lane.resume(None, failure)


def _outcome(result: Exchange | Exception) -> Outcome:
    return (None, result) if isinstance(result, Exception) else (result, None)


def _attempt(perform: Perform, effect: flow.Effect[Any], lane: Lane) -> Outcome:
    try:
        return perform(effect, lane.contract, lane.client), None
    except BaseException as exc:  # handed to the flow, which decides (a refused send is a recorded stop)
        return None, exc


_PURE = (flow.Now, flow.Draw, flow.NewDecisionId)
"""Effects a flow may be given inside a store transaction: they touch nothing outside the process."""


def _claim_and_reserve(lanes: Sequence[Lane], store: Store, perform: Perform, now: datetime) -> None:
    """Every lane's claim and the write it leads to (its reservation, or a stop) in one transaction: the flows
    are given their claims inside it and go on as far as their next write (the pure effects on the way are
    performed there); the writes commit with the claims. A flow that wants anything else first (a release:
    the operation was not due after all) gets it after the commit, as ever.

    If the transaction fails, nothing of it was written, and each lane's part is tried again in a transaction
    of its own, so a failure belongs to one lane: the claims alone if the flows were not told of them yet
    (`claim_all`), else each claim with the write its flow made of it (`_alone`)."""
    claims = [
        (lane.effect.operation_id, lane.owner or "", lane.effect.ttl)
        for lane in lanes
        if isinstance(lane.effect, flow.Claim)
    ]
    told: list[Any] = []
    planned: list[int] = []

    def then(answers: list[Any]) -> list[flow.Write]:
        told.extend(answers)
        for lane, answer in zip(lanes, answers, strict=True):
            lane.resume(answer)
        return _first_writes(lanes, perform, planned)

    try:
        _, written = store.claim_then_write(claims, now, then)
    except Exception:
        if not told:
            for lane, outcome in zip(lanes, claim_all(store, claims, now), strict=True):
                lane.resume(*outcome)
            return
        # A flow told of a claim that was not committed and not planning a write gives back a lease it never
        # had, later (a fenced no-op); one that planned a write gets its claim and write again, alone.
        for i in planned:
            lanes[i].resume(*_alone(store, claims[i], told[i], lanes[i].effect, now))
        return
    for i, done in zip(planned, written, strict=True):
        lanes[i].resume(done)


def _first_writes(lanes: Sequence[Lane], perform: Perform, planned: list[int]) -> list[flow.Write]:
    """Inside a transaction that claimed the lanes' operations: each flow on through its pure effects to the
    write it makes (its reservation, or a stop), which commits with the claims; `planned` gets the lanes that
    made one. A flow that wants anything else first (a release: not due after all) gets it after the commit."""
    for lane in lanes:
        while isinstance(lane.effect, _PURE):
            lane.resume(*_attempt(lane.perform or perform, lane.effect, lane))
    planned[:] = [i for i, lane in enumerate(lanes) if isinstance(lane.effect, flow.Write)]
    return [effect for i in planned if isinstance(effect := lanes[i].effect, flow.Write)]


Chosen = tuple[Contract, Any, Claimed]
"""A claimed operation a worker steps in its batch, with its contract and status client."""


def claim_due_and_run(
    means: Means,
    due: Due,
    choose: Callable[[list[Claimed]], Sequence[Chosen]],
    then: Callable[[list[Claimed]], None],
    *,
    aside: Callable[[Aside], None] | None = None,
) -> tuple[list[Claimed], list[tuple[Chosen, Lane]]]:
    """A worker's batch: up to `limit` due operations claimed, and the reservations of those `choose` picks
    (`flow.step_claimed` of each, up to its first write) committed in the same transaction, one commit fewer
    than claiming first; every chosen flow is then driven to its end (`run`). `choose` runs inside the
    transaction and must neither use the store nor wait; `then` is told everything claimed once the claims have
    committed, before the requests go out, and hands on at once what it does not step here (their leases are
    its). Returns everything claimed and each chosen operation with its lane, ended unless `run` handed it to
    `aside`. `due`: the claim (`Store.claim_due`).

    If that transaction fails, nothing of it was written (the flows begun hold no lease, and are dropped): the
    batch is claimed again the way that gives each write its own fate, the claims first (`claim_due`), then
    `run`, which retries a failed write alone. A claim that fails raises, as `claim_due` does; if `then` raises,
    the chosen flows give their leases back (their reservations counted, nothing sent) and it is raised."""
    chosen: list[Chosen] = []
    lanes: list[Lane] = []
    planned: list[int] = []

    def begin(claimed: list[Claimed]) -> list[Lane]:
        chosen[:] = choose(claimed)
        lanes[:] = _lanes(chosen, due.now)
        for lane in lanes:
            lane.resume()
        return lanes

    def reserve(claimed: list[Claimed]) -> list[flow.Write]:
        return _first_writes(begin(claimed), means.perform, planned)

    try:
        claimed, written = means.store.claim_due_then_write(
            due.owner, due.now, due.ttl, due.limit, reserve, skip=due.skip
        )
    except Exception:
        if not lanes:
            raise
        claimed = means.store.claim_due(due.owner, due.now, due.ttl, due.limit, skip=due.skip)
        begin(claimed)
    else:
        for i, done in zip(planned, written, strict=True):
            lanes[i].resume(done)
    try:
        then(claimed)
    except BaseException as exc:
        for lane in lanes:
            if lane.result is None:
                lane.resume(None, exc)
        raise
    finally:
        run(lanes, means, begun=True, aside=aside)
    return claimed, list(zip(chosen, lanes, strict=True))


def _lanes(chosen: Sequence[Chosen], now: datetime) -> list[Lane]:
    return [
        Lane(flow.step_claimed(contract, one.lease, one.record, now), contract, client, of=(contract, client, one))
        for contract, client, one in chosen
    ]


def _alone(store: Store, claim: ClaimOf, told: Any, write: Any, now: datetime) -> Outcome:
    """One lane's claim and its write again, in a transaction of their own. The write stands only if the claim
    gives what its flow was told (the same lease of the same record); if someone got in meanwhile, a lease
    taken now is given back and the flow is told its write changed nothing (its lease is lost)."""
    try:
        (again,), written = store.claim_then_write([claim], now, lambda answers: [write] if answers == [told] else [])
    except Exception as exc:
        return None, exc
    if again == told:
        return written[0], None
    if again is not None:
        try:
            store.release(again[0])
        except Exception as exc:
            return None, exc
    return False, None


def write_all(store: Store, writes: Sequence[flow.Write], now: datetime) -> list[Outcome]:
    """All writes in one transaction; if that fails, each in its own, so a failure belongs to one write."""
    return _each_alone(lambda some: store.write_many(some, now), writes)


def claim_all(store: Store, claims: Sequence[ClaimOf], now: datetime) -> list[Outcome]:
    """All claims (operation, owner, ttl) in one transaction; if that fails, each in its own, as writes."""
    return _each_alone(lambda some: store.claim_many(some, now), claims)


T = TypeVar("T")


def _each_alone(together: Callable[[Sequence[T]], Sequence[Any]], items: Sequence[T]) -> list[Outcome]:
    try:
        return [(answer, None) for answer in together(items)]
    except Exception as exc:
        if len(items) == 1:
            return [(None, exc)]
    outcomes: list[Outcome] = []
    for item in items:
        try:
            outcomes.append((together([item])[0], None))
        except Exception as exc:
            outcomes.append((None, exc))
    return outcomes
