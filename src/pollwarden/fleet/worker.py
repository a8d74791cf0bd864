"""The fleet worker: many operations, one poll each when due, through the same core and store as `watch`.

Each lane (two per process) claims a batch of due operations with fenced leases and steps them together
through the engine's one flow with group commit (`Engine.claim_due_many`): the claims and the reservations
they lead to in one transaction, the requests at once, the records as their answers come (on loopback, one
transaction), so a batch of K polls costs two commits instead of 3K. Operations of a paced provider are
stepped one by one (`Engine.step_claimed`) after their slot.
Between batches a lane sleeps until the next due time with no lease held (R38). SIGTERM/SIGINT let in-flight
requests finish and release the rest.

Nothing slow happens on a lane. A batch's requests still in flight `batch.ASIDE` after they went out (a provider
that accepts and never answers) go on in a thread of their own, holding only their own slots of `concurrency`,
and the lane claims again. A token command runs off the lanes, ahead of need (`token_source`): a contract whose
credential is not in yet is passed over by the claims until it is, so its command's hang holds up only its own
operations. What is stepped alone (a paced provider's poll, an operation to give back) is never waited for.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..core.admission import UNSAFE_STATUS_RULE, watchable_problem
from ..core.contract.parse import Contract, ContractError
from ..core.contract.vars import text_digest
from ..core.decide import Poll, next_step
from ..core.durations import format_rfc3339
from ..core.record import OperationRecord
from ..engine import Done, Engine, NotYet, Polled, StepResult, batch, changes
from ..engine.installed import NOT_INSTALLED_RULE, NotInstalled, runnable
from ..home.outbox import delivering
from ..store.base import Claimed, Lease, Store
from ..store.bell import Listener, listening
from ..transport.http import CredentialError, StatusClient, resolve_secret
from .defaults import DEFAULT_CONCURRENCY, LANES
from .log import JsonLog as JsonLog
from .metrics import Metrics as Metrics

CLAIM_TTL = timedelta(seconds=10)
"""How long a batch claim holds an operation before its reservation: the reservation then extends the lease to
the operation's own contract bound (`core.lease`), so a slow contract is never taken over mid-request."""


def batch_clock(start: datetime) -> Callable[[], datetime]:
    """The store's time read once per batch and carried forward by this machine's monotonic clock: on
    PostgreSQL every reading of the database clock was a query (four per poll). A batch lasts about one
    bounded request, far too short for the two clocks to drift apart by anything a lease would notice."""
    origin = time.monotonic()
    return lambda: start + timedelta(seconds=time.monotonic() - origin)


@dataclass(frozen=True)
class Unwatchable:
    """A stored contract no operation of may be polled (`admission.watchable_problem`): its operations are stopped,
    recorded, when claimed, never polled nor given back to be claimed again."""

    why: str


@dataclass
class _ContractCache:
    """Contracts travel with their operations; parse each distinct text once, keep its client open. A client's
    token command (if its contract has one) runs in the background from when the client is made (`token_source`),
    never on the thread that made it."""

    clock: Callable[[], datetime]
    clients: dict[str, tuple[Contract, StatusClient] | str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    making: dict[str, threading.Lock] = field(default_factory=dict)
    """One lock per contract text, held while its client is made (a token command may run for seconds): another
    contract's client is made meanwhile, not after it."""

    def ready(self, text: str) -> tuple[Contract, StatusClient] | str | None:
        """The client of a text already seen, or None: never waits (not even for the lock a `client` holds while it
        reads a credential), so a claim transaction may ask."""
        return self.clients.get(text_digest(text))

    def client(
        self, store: Store, text: str, operation_id: str, log: JsonLog
    ) -> tuple[Contract, StatusClient] | str | NotInstalled | Unwatchable:
        """The contract and client of a stored text, made once; only of an installed version (`runnable`, checked
        before the text is parsed or a credential read) that admission lets be watched at all (`Unwatchable`:
        enqueued from a shell that did not ask). NotInstalled is not kept: an operator may install it."""
        found = self.ready(text)
        if found is not None:
            return found
        key = text_digest(text)
        with self.lock:
            one = self.making.setdefault(key, threading.Lock())
        with one:
            found = self.clients.get(key)
            if found is not None:
                return found
            try:
                contract = runnable(store, text, operation_id=operation_id)
                if (unwatchable := watchable_problem(contract)) is not None:
                    log("contract_unwatchable", operation=operation_id, contract=contract.name)
                    return Unwatchable(unwatchable)
                made: tuple[Contract, StatusClient] | str = (
                    contract,
                    StatusClient(contract, resolve_secret(contract, wait=False), clock=self.clock),
                )
            except NotInstalled as exc:
                log("contract_not_installed", operation=operation_id, digest=exc.digest)
                return exc
            except (ContractError, CredentialError) as exc:
                made = str(exc)
                log("contract_unusable", detail=made)
            self.clients[key] = made
            return made

    def waiting(self) -> set[str]:
        """The contracts whose credential is not in yet (a token command still running, off the lanes): the claims
        pass their operations over until it is. Looking also starts each refresh that is due, ahead of need."""
        with self.lock:
            made = [one for one in self.clients.values() if not isinstance(one, str)]
        return {contract.name for contract, client in made if not client.ready()}

    def close(self) -> None:
        for made in self.clients.values():
            if not isinstance(made, str):
                made[1].close()


class _Slots:
    """The worker's `concurrency`: how many claimed operations it may hold at once, each from its claim until its
    step has ended (on its lane, aside, or alone). A lane claims only as many as are free, so a silent provider
    holds its own slots and nobody else's."""

    def __init__(self, total: int) -> None:
        self._free = total
        self._changed = threading.Condition()

    def take(self, most: int) -> int:
        with self._changed:
            taken = min(most, self._free)
            self._free -= taken
            return taken

    def give(self, count: int) -> None:
        if count:
            with self._changed:
                self._free += count
                self._changed.notify_all()

    def wait(self, timeout: float) -> bool:
        """Until a slot is free (True), or `timeout` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: self._free > 0, timeout)


SIGNAL_CHECK = 0.5
"""Seconds between the main thread's looks at the signals caught on other threads while it waits for the lanes."""

CONTENDED_WAIT = 0.05
"""Seconds a lane whose claim took nothing waits before claiming again when what is due was due at its claim: another
claimer holds it (PostgreSQL's claim skips the rows another claim has locked; on SQLite the other lane committed it
first), and its commit takes milliseconds. Claiming again at once spun through that commit: with four workers on
PostgreSQL, 2,584 claims of 4,013 that took nothing came straight after one, for 939 polls. A ring or a stop still
ends the wait at once."""


class Worker:
    def __init__(
        self,
        store_factory: Callable[[], Store],
        *,
        owner: str,
        concurrency: int = DEFAULT_CONCURRENCY,
        metrics: Metrics | None = None,
        log: JsonLog | None = None,
        idle_sleep: float = 1.0,
        provider_rates: dict[str, float] | None = None,
    ) -> None:
        self.store_factory = store_factory
        self.owner = owner
        self.concurrency = max(1, concurrency)
        self.lanes = min(LANES, self.concurrency)
        self.batch = -(-self.concurrency // self.lanes)
        self.metrics = metrics or Metrics()
        self.log = log or JsonLog(worker=owner)
        self.idle_sleep = idle_sleep
        self._wake = threading.Event()
        """Set by a ring of the store's bell or a stop: ends a lane's idle wait."""
        self.provider_intervals = {
            name: timedelta(seconds=1.0 / rate) for name, rate in (provider_rates or {}).items() if rate > 0
        }
        self.stop = threading.Event()
        self._slots = _Slots(self.concurrency)
        self._asides = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="pollwarden-aside")
        """Where a batch's slow rest goes on (`batch.Aside`): each holds a slot at least, so never more of them."""
        self._aside_done: list[threading.Event] = []
        self._local = threading.local()
        self._stores: list[Store] = []
        self._stores_lock = threading.Lock()
        self._claim_store = store_factory()
        self._clock = batch_clock(self._claim_store.db_now())
        self._contracts = _ContractCache(clock=self._now)

    def _now(self) -> datetime:
        """The status clients' clock (when a request was sent, when its answer came): the latest batch's clock,
        which reads the store's once per batch. Asking the store each time was two queries per poll on
        PostgreSQL, from every request thread."""
        return self._clock()

    def _store(self) -> Store:
        """A store that pools its own connections (PostgreSQL) is shared; a SQLite connection is per thread."""
        if getattr(self._claim_store, "shared_across_threads", False):
            return self._claim_store
        store: Store | None = getattr(self._local, "store", None)
        if store is None:
            store = self.store_factory()
            self._local.store = store
            with self._stores_lock:
                self._stores.append(store)
        return store

    def run_once(self, pool: ThreadPoolExecutor) -> int:
        """One batch: claim up to `batch` due operations (as many as there are free slots) with their reservations,
        in one transaction, and poll them together, with group commit; returns how many were claimed.

        Only operations whose contract's client is made, and whose credential is in, are reserved in the claim's
        transaction (`_ContractCache.ready`, `StatusClient.ready`): reading one may run a token command, which must
        hold neither the database nor the batch's requests, whose leases are already counting. A contract whose
        credential is being read is not claimed at all meanwhile (`skip`). The others go to `pool` once the claims
        commit, each stepped on its own (`_poll_one`, as a paced provider's poll, which waits for its slot there;
        one whose credential is not in is given back), and the lane does not wait for them. Answers still out
        `batch.ASIDE` after the requests went out are waited for aside (`_finish_aside`), not here."""
        self._local.claimed_at = None  # set once this claim reads its clock (`_idle_for`)
        taken = self._slots.take(self.batch)
        if not taken:
            return 0
        store = self._store()
        clock = self._clock = batch_clock(store.db_now())
        now = self._local.claimed_at = clock()
        claimed: list[Claimed] = []
        try:
            paced = store.paced_providers() | set(self.provider_intervals)
            chosen: list[tuple[Contract, StatusClient, Claimed]] = []

            def choose(claimed: list[Claimed]) -> list[tuple[Contract, StatusClient, Claimed]]:
                chosen.clear()
                for one in [] if self.stop.is_set() else claimed:
                    found = self._contracts.ready(one.contract_text)
                    if found is None or isinstance(found, str) or not found[1].ready():
                        continue
                    if found[0].name in paced and isinstance(next_step(one.record, now), Poll):
                        continue
                    chosen.append((*found, one))
                return chosen

            def alone(claimed: list[Claimed]) -> None:
                stepping = {id(one) for _, _, one in chosen}
                for one in claimed:
                    if id(one) in stepping:
                        continue
                    try:
                        pool.submit(self._poll_one, one, clock)
                    except RuntimeError:  # the pool is shutting down: the worker is stopping
                        self._give_back(store, one)
                        self._slots.give(1)

            moved: list[batch.Aside] = []

            def aside(rest: batch.Aside) -> None:
                done = threading.Event()
                self._asides.submit(self._finish_aside, rest, clock, now, done)  # RuntimeError: finished in place
                self.metrics.aside.inc(len(rest.lanes))
                with self._stores_lock:
                    self._aside_done = [*(one for one in self._aside_done if not one.is_set()), done]
                moved.append(rest)

            engine = Engine(store, owner=self.owner, clock=clock)
            with self.log.batch():
                skip = self._contracts.waiting()
                claimed, lanes = engine.claim_due_many(
                    now, CLAIM_TTL, taken, choose, pool, then=alone, skip=skip, aside=aside
                )
                for row in store.take_set_aside():  # once per row: the claim that set it aside is the last to meet it
                    self.log("record_unreadable", operation=row.operation_id, why=row.why, inspect="pollwarden status")
                elsewhere = {id(lane) for rest in moved for lane in rest.lanes}
                here = [lane for lane in lanes if id(lane) not in elsewhere]
                for lane in here:
                    self._counted(store, lane, now)
            self._slots.give(len(here))
        finally:
            self._slots.give(taken - len(claimed))
        return len(claimed)

    def _counted(self, store: Store | None, lane: batch.Lane, now: datetime) -> None:
        """A stepped operation's result, counted and logged (`store`: None for this thread's own)."""
        contract, _, one = lane.of
        result = lane.result
        assert result is not None, "a lane is told its end before it is counted"
        if isinstance(result, BaseException):
            self._failed(store, one, result)
        else:
            self._observe(result, one.record, _lateness(now, one.record), contract.name)

    def _finish_aside(
        self, rest: batch.Aside, clock: Callable[[], datetime], now: datetime, done: threading.Event
    ) -> None:
        """A batch's requests that were still in flight, driven to their ends on this thread, with its store."""
        try:
            try:
                store = self._store()
            except Exception as exc:  # no store for this thread (no file descriptor left): the leases run out
                for lane in rest.lanes:
                    self._failed(None, lane.of[2], exc)
                return
            rest.finish(store, Engine(store, owner=self.owner, clock=clock).perform)
            with self.log.batch():
                for lane in rest.lanes:
                    self._counted(store, lane, now)
        finally:
            self._slots.give(len(rest.lanes))
            done.set()

    def _drain_asides(self) -> None:
        """Until every batch's rest that went aside has ended (its requests answered or timed out, and recorded), as
        each says itself: timed waits, through interrupts, as the lanes are waited for (`_wait_all`)."""
        with self._stores_lock:
            pending = list(self._aside_done)
        _wait_all(pending, through_interrupts=True)
        self._asides.shutdown(wait=False)

    def _give_back(self, store: Store, claimed: Claimed) -> None:
        try:
            store.release(claimed.lease)
        except Exception as exc:  # the store itself is failing; the lease expires on its own
            self.log("release_failed", operation=claimed.lease.operation_id, error=type(exc).__name__)

    def _failed(self, store: Store | None, claimed: Claimed, exc: BaseException) -> None:
        """One operation's poll raised instead of ending in a record; it stays here, never stalls the fleet.
        `store`: None for this thread's own, which may be what failed (no file descriptor left to open it): the
        lease then expires on its own."""
        self.metrics.failures.inc()
        self.log("poll_failed", operation=claimed.lease.operation_id, error=type(exc).__name__)
        try:
            store = self._store() if store is None else store
        except Exception:
            return
        self._give_back(store, claimed)

    def _poll_one(self, claimed: Claimed, clock: Callable[[], datetime]) -> None:
        """One claimed operation of a paced provider, stepped on its own after its pacing slot (or given back)."""
        try:
            self._poll_claimed(claimed, clock)
        except Exception as exc:
            self._failed(None, claimed, exc)
        finally:
            self._slots.give(1)

    def _poll_claimed(self, claimed: Claimed, clock: Callable[[], datetime]) -> None:
        store = self._store()
        lease, record = claimed.lease, claimed.record
        if self.stop.is_set():
            store.release(lease)
            return
        found = self._contracts.client(store, claimed.contract_text, lease.operation_id, self.log)
        engine = Engine(store, owner=self.owner, clock=clock)
        if isinstance(found, NotInstalled):  # recorded as a stop: claimed again and again it would hide nothing
            refused = engine.refuse_claimed(lease, record, clock(), str(found), rule=NOT_INSTALLED_RULE)
            self._observe(refused, record, 0.0, "")
            return
        if isinstance(found, Unwatchable):
            refused = engine.refuse_claimed(lease, record, clock(), found.why, rule=UNSAFE_STATUS_RULE)
            self._observe(refused, record, 0.0, "")
            return
        if isinstance(found, str):
            store.release(lease)
            return
        contract, client = found
        if not client.ready():
            # Its credential is being read, off the lanes (a token command): given back now, and its contract
            # passed over by the claims until the credential is in.
            store.release(lease)
            self.log("credential_pending", operation=lease.operation_id, contract=contract.name)
            return
        now = clock()
        if isinstance(next_step(record, now), Poll):
            paced = self._pace(store, lease, record, contract.name, now)
            if paced is None:
                return
            now = paced
        result = engine.step_claimed(contract, client, lease, record, now)
        self._observe(result, record, _lateness(now, record), contract.name)

    def _pace(
        self, store: Store, lease: Lease, record: OperationRecord, provider: str, now: datetime
    ) -> datetime | None:
        """The provider's fleet-wide slot: wait for one that is near (then the store's time), or None: the
        operation was paced to a far one and given back."""
        held = changes.Held(store, lease, record, lambda: now)
        try:
            slot = changes.pace_due(held, provider, self.provider_intervals.get(provider), now)
        except changes.TakenOver:  # its lease ran out meanwhile: its new owner polls or paces it
            self.log("lease_lost", operation=record.operation_id)
            return None
        if not slot.taken:
            self.log("paced", operation=record.operation_id, provider=provider, until=format_rfc3339(slot.at))
            return None
        if slot.at > now:
            time.sleep((slot.at - now).total_seconds())  # at most PACING_HORIZON, inside the lease, never past a limit
            return store.db_now()
        return now

    def _observe(self, result: StepResult, before: OperationRecord, lateness: float, provider: str) -> None:
        if isinstance(result, Polled):
            decision = result.decision
            self.metrics.count(self.metrics.requests, provider)
            self.metrics.lateness.observe(lateness)
            self.metrics.count(self.metrics.polls, decision.action.value)
            record = decision.record
            self.log(
                "polled",
                operation=record.operation_id,
                job=record.job_id,
                state=record.last_state,
                http_status=record.last_http_status,
                action=decision.action.value,
                reason=decision.reason.value if decision.reason else None,
                next_poll_at=format_rfc3339(decision.next_poll_at) if decision.next_poll_at else None,
                requests=f"{record.status_requests_used}/{record.plan.max_status_requests}",
                lateness=round(lateness, 3),
            )
            self._ended(record)
        elif isinstance(result, Done) and result.record.is_final and not before.is_final:
            self.log("stopped", operation=result.record.operation_id, reason=_reason(result.record))
            self._ended(result.record)
        elif isinstance(result, NotYet):
            self.log("not_due", operation=result.record.operation_id, until=format_rfc3339(result.until))

    def _ended(self, record: OperationRecord) -> None:
        if not record.is_final:
            return
        if record.reason is not None:
            self.metrics.count(self.metrics.escalations, record.reason.value)
        self.metrics.budget.observe(record.status_requests_used / max(1, record.plan.max_status_requests))

    def run(self) -> None:
        """Until stopped: each lane claims a batch, polls it, and sleeps until the next due time when nothing is
        due (never holding a lease asleep). A lane that fails stops the worker, as a lone loop would."""
        self.log("worker_started", concurrency=self.concurrency, lanes=self.lanes, batch=self.batch)
        failures: list[BaseException] = []
        try:
            # Webhooks and witness heads go out from the outbox on a thread and a store of their own: a receiver
            # that hangs holds none of the lanes.
            with (
                self._outbox_store() as outbox_store,
                delivering(outbox_store, "worker", say=self.log),
                ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="pollwarden-worker") as pool,
                # One listener for the process (on PostgreSQL one connection more, LISTENing): a ring wakes a lane.
                listening(self._claim_store.bell, True) as bell,
            ):
                begun: list[threading.Event] = []
                threading.Thread(target=self._wake_on, args=(bell,), name="pollwarden-bell", daemon=True).start()
                try:
                    for n in range(self.lanes):
                        ended = threading.Event()
                        lane = threading.Thread(
                            target=self._lane, args=(pool, failures, ended), name=f"pollwarden-lane-{n}"
                        )
                        begun.append(ended)
                        try:
                            # An interrupt can end start()'s wait for the new thread: it runs, and is waited for.
                            lane.start()
                        except RuntimeError:  # no thread was made ("can't start new thread"): none to wait for
                            begun.pop()
                            raise
                    _wait_all(begun)
                finally:
                    # Whatever ended the wait early (an interrupt the stop signals do not cover, SIGHUP) stops the
                    # lanes too: they finish their batches and give their leases back, instead of polling on
                    # behind a process that is leaving. Another interrupt meanwhile is raised once they have.
                    self.stop.set()
                    _wait_all(begun, through_interrupts=True)
                    self._drain_asides()  # the requests still in flight aside end, and are recorded
        finally:
            self.close()
        if failures:
            raise failures[0]
        self.log("worker_stopped")

    def _wake_on(self, bell: Listener | None) -> None:
        """Relays the store's bell to the lanes' idle wait (`_wake`) until the worker stops; a stop wakes them too."""
        threading.Thread(target=self._wake_at_stop, args=(bell,), name="pollwarden-bell-stop", daemon=True).start()
        while bell is not None and not self.stop.is_set():
            if bell.wait(self.idle_sleep):
                self._wake.set()

    def _wake_at_stop(self, bell: Listener | None) -> None:
        self.stop.wait()
        self._wake.set()
        if bell is not None:
            bell.poke()

    @contextlib.contextmanager
    def _outbox_store(self) -> Iterator[Store]:
        """The delivery loop's store: the shared one where the store pools its connections (PostgreSQL: no
        connection more), else one of its own (a SQLite store per thread)."""
        if getattr(self._claim_store, "shared_across_threads", False):
            yield self._claim_store
            return
        store = self.store_factory()
        try:
            yield store
        finally:
            store.close()

    def _lane(self, pool: ThreadPoolExecutor, failures: list[BaseException], ended: threading.Event) -> None:
        """While one lane waits on its commit, the other prepares or sends its batch: the fsync of one batch
        overlaps the work of the next instead of leaving the CPU idle. With every slot held (requests in flight
        aside, steps alone), a lane waits for one to free."""
        try:
            while not self.stop.is_set():
                if not self._slots.wait(self.idle_sleep):
                    continue
                if self.run_once(pool) or not self._slots.wait(0):
                    continue
                # Ended at once by a stop, or by the store's bell: a provider's push made an operation due.
                if self._wake.wait(self._idle_for()) and not self.stop.is_set():
                    self._wake.clear()
        except BaseException as exc:
            failures.append(exc)
            self.stop.set()
        finally:
            ended.set()

    def _idle_for(self) -> float:
        """How long this lane sleeps after a claim that took nothing: until the next due time it could claim, but not
        at once for what was due at that claim already (`CONTENDED_WAIT`)."""
        store = self._store()
        now = store.db_now()
        due = store.next_due(free_at=now, skip=self._contracts.waiting())
        if due is None:
            return self.idle_sleep
        claimed_at: datetime | None = getattr(self._local, "claimed_at", None)
        if claimed_at is not None and due <= claimed_at:
            return min(self.idle_sleep, CONTENDED_WAIT)
        wait = (due - now).total_seconds()
        return min(self.idle_sleep, max(0.0, wait))

    def close(self) -> None:
        self._drain_asides()
        self._contracts.close()
        with self._stores_lock:
            for store in self._stores:
                if store is not self._claim_store:
                    store.close()
            self._stores.clear()
        self._claim_store.close()


def _wait_all(ended: list[threading.Event], *, through_interrupts: bool = False) -> None:
    """Until every lane has ended, as each says itself. Not `Thread.join`: on Python 3.11 a join that an interrupt
    (SIGHUP) ends marks the thread it waited for as ended while it still runs its batch (CPython's
    `_wait_for_tstate_lock` releases the running thread's lock), so the second wait, and the interpreter's own at
    exit, did not wait for it, and the process left with its leases held."""
    interrupted: BaseException | None = None
    for done in ended:
        # Timed: a stop signal the kernel hands to another thread (it does when the main thread has one pending
        # already, as in a burst) runs its handler only once this thread runs Python code again, and an untimed
        # wait never would: the worker waited for ever on its own stop.
        while True:
            try:
                if done.wait(SIGNAL_CHECK):
                    break
            except BaseException as exc:  # a signal handler's exception (SIGHUP's `Interrupted`)
                if not through_interrupts:
                    raise
                interrupted = interrupted or exc
    if interrupted is not None:
        raise interrupted


def _lateness(now: datetime, record: OperationRecord) -> float:
    """Seconds after its due time that an operation's poll started (the scheduling lateness metric)."""
    return max(0.0, (now - record.next_poll_at).total_seconds())


def _reason(record: OperationRecord) -> str | None:
    return record.reason.value if record.reason else None


__all__ = ["CLAIM_TTL", "JsonLog", "Metrics", "Worker"]
