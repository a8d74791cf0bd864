"""The synchronous driver of the engine: the step flow driven against a store and a client.

Every interface goes through `Engine`: `watch` and the Python API (`run`), the worker (`step_claimed` after
its batch claim), the MCP server (`admit`, `step`), `enqueue` (`admit`; `admit_many` for a jobs file). What
each interface adds is parsing its own input and rendering its own output. The engine's three parts live apart:
admission (`admitting`), stepping (here), and the effects every flow asks for (`effects`); the other changes of
an operation are `changes`, under the table of `core.transitions`.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Executor
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from ..core.admission import WatchRequest
from ..core.contract.parse import Contract
from ..core.record import OperationRecord
from ..errors import EXIT_INTERRUPTED, Interruption, PollwardenError
from ..events import WatchInterrupted
from ..store.base import Claimed, Lease, Store
from . import batch, flow, installed, learning
from .admitting import BATCH, AdmissionError, Admitted, Admitting, BatchAdmissionError
from .effects import Effects, StatusSender, new_decision_id
from .flow import Busy, Done, NotYet, Polled, StepResult

if TYPE_CHECKING:
    from .combine import Combiner  # one way only: `combine` drives through `Effects` and `Admitting`, not `Engine`

T = TypeVar("T")


REFUSAL_TTL = timedelta(seconds=30)
"""The lease of a refusal (`refuse_stored`): one write, no request; the stored contract's own timeout is not read."""


@dataclass(frozen=True)
class Watching:
    """How a watch runs (`Engine.run`), as its driver (the CLI, the Python API) sets it once for the whole watch.

    `on_progress`: told every step's result. `sleep`: waits between steps (see `Engine.run`). `tick`: the longest
    wait at once (a live progress line redraws). `until`: ends the run early when it answers True. `stop`: set
    from any thread, ends the run between requests (`Cancelled`). `by`: who watched, in an `interrupted` event."""

    on_progress: Callable[[StepResult], None] | None = None
    sleep: Callable[[float], object] | None = None
    tick: float | None = None
    until: Callable[[], bool] | None = None
    stop: threading.Event | None = None
    by: str = "cli"


class Engine(Admitting, Effects):
    """One store, one owner name, one clock: admission and steps for any number of operations and contracts."""

    def __init__(
        self,
        store: Store,
        *,
        owner: str,
        clock: Callable[[], datetime] | None = None,
        rng: random.Random | None = None,
        combiner: Combiner | None = None,
    ) -> None:
        """`combiner`: this engine's steps join the batches of the other watches of this store in this process
        (`engine.combine`: the Python API's); without one, each step is its own. `clock`: the store's
        (`Store.db_now`, the database's on PostgreSQL) unless a test gives its own: every claim, lease and audit
        time of every driver comes from that one clock."""
        self.store = store
        self._combiner = combiner
        self.owner = owner
        self.clock = store.db_now if clock is None else clock
        self.rng = rng or random.Random()
        self.models = learning.models_for(store, self.clock)  # the learnt schedules of this store's contracts

    # -- admission (`admitting.Admitting`) ------------------------------------------------------------------------

    def admit(self, request: WatchRequest) -> Admitted:
        """Create, resume or narrow the operation the request names, or raise AdmissionError (audited on the
        existing operation when it contradicts one): `admit_many` with one request, or with a combiner, in the
        batch of the watches that start with it (`Combiner.admit`, `admit_each`)."""
        if self._combiner is not None:
            return self._combiner.admit(self, request)
        try:
            (admitted,) = self.admit_many([request])
        except BatchAdmissionError as exc:
            raise AdmissionError(exc.refusals[0][1]) from None
        return admitted

    # -- steps -----------------------------------------------------------------------------------------------------

    def step(
        self, contract: Contract, client: StatusSender, operation_id: str, known: OperationRecord | None = None
    ) -> StepResult:
        """One step from the top (`flow.step`). `known`: the operation as this caller last left it, which spares
        a read: it only decides whether to claim at all, and a claim reloads the record under its lease."""
        if self._combiner is not None:
            return self._combiner.step(self, contract, client, operation_id, known)
        if known is None:
            stored = self.store.get(operation_id)
            if stored is None:
                raise KeyError(operation_id)
            known = stored.record
        return self._drive(flow.step(contract, known, self.clock()), contract, client)

    def step_claimed(
        self, contract: Contract, client: StatusSender, lease: Lease, record: OperationRecord, now: datetime
    ) -> StepResult:
        return self._drive(flow.step_claimed(contract, lease, record, now), contract, client)

    def refuse_claimed(
        self, lease: Lease, record: OperationRecord, now: datetime, why: str, *, rule: str
    ) -> StepResult:
        """Stop a claimed operation whose stored contract must not run (`flow.refuse_claimed`), recorded."""
        return self.drive_from(flow.refuse_claimed(lease, record, now, why, rule=rule), None, None, None, None)

    def refuse_stored(self, operation_id: str, why: str) -> OperationRecord:
        """A resume of an operation whose stored contract is not an installed version: claimed and stopped
        (`refuse_claimed`), the stop recorded; the operation as it is now (another owner's, if it holds it)."""
        now = self.clock()
        claimed = self.store.claim(operation_id, self.owner, now, REFUSAL_TTL)
        if claimed is None:
            stored = self.store.get(operation_id)
            if stored is None:
                raise KeyError(operation_id)
            return stored.record
        lease, record = claimed
        result = self.refuse_claimed(lease, record, now, why, rule=installed.NOT_INSTALLED_RULE)
        return result.decision.record if isinstance(result, Polled) else result.record

    def step_claimed_many(
        self, claimed: Sequence[tuple[Contract, StatusSender, Lease, OperationRecord]], now: datetime, io: Executor
    ) -> list[StepResult | BaseException]:
        """`step_claimed` for a whole batch with group commit (`engine.batch`): the reservations in one
        transaction, the requests at once, the records as their answers come in (most in one transaction). Each
        result is that operation's StepResult, or the exception its flow ended with (its lease given back)."""
        lanes = [
            batch.Lane(flow.step_claimed(contract, lease, record, now), contract, client)
            for contract, client, lease, record in claimed
        ]
        batch.run(lanes, batch.Means(self.store, self.perform, self.clock, io))
        results: list[StepResult | BaseException] = []
        for lane in lanes:
            assert lane.result is not None  # run() drives every lane to its end
            results.append(lane.result)
        return results

    def claim_due_many(
        self,
        now: datetime,
        ttl: timedelta,
        limit: int,
        choose: Callable[[list[Claimed]], Sequence[batch.Chosen]],
        io: Executor,
        *,
        then: Callable[[list[Claimed]], None] = lambda claimed: None,
        skip: Collection[str] = (),
        aside: Callable[[batch.Aside], None] | None = None,
    ) -> tuple[list[Claimed], list[batch.Lane]]:
        """The fleet's batch as this engine's owner (`batch.claim_due_and_run`): up to `limit` due operations
        claimed with the reservations of those `choose` picks, in one transaction, then stepped together;
        `then` is told everything claimed once the claims commit, and hands on at once what is not stepped here
        (`choose` runs inside the transaction and must not use the store, nor wait). `skip`: contract names the
        claim passes over; `aside`: where the batch's slow rest goes (`batch.run`). Returns everything claimed,
        and the lane of each stepped operation (`Lane.of` is its `Chosen`; its `result` is set unless the lane
        went aside)."""
        claimed, stepped = batch.claim_due_and_run(
            batch.Means(self.store, self.perform, self.clock, io),
            batch.Due(self.owner, now, ttl, limit, skip),
            choose,
            then,
            aside=aside,
        )
        return claimed, [lane for _, lane in stepped]

    def run(
        self,
        contract: Contract,
        client: StatusSender,
        operation_id: str,
        how: Watching | None = None,
        *,
        record: OperationRecord | None = None,
    ) -> OperationRecord:
        """Step until the operation is final (or `until()` says stop); sleep in between with no lease held.

        `stop`, set from any thread, ends the run between requests: a request in flight is answered and
        recorded, no new one starts, and `Cancelled` is raised. Whatever ends the run before the operation is
        final (that stop, a signal, an `on_progress` that raises, a failing store) is re-raised after one
        `interrupted` event, by `by`, is recorded: the flow has given the lease back, and the operation waits,
        active, with its deadline and budget, for a later run. Every driver of a watch keeps this here.

        `record`: the operation as the caller has just read it (its admission), for the first step (`step`);
        each later step starts from what the one before left, except after `Busy` (someone else moved it) and
        after a `sleep` that answers True: it was woken before its time (the store's bell: a provider's push
        made the operation due), so the operation is read again. Without `sleep`, `stop.wait` or `time.sleep`;
        a `sleep` given with `stop` must itself end when `stop` is set. `how`: those knobs (`Watching`)."""
        how = how or Watching()
        on_progress, sleep, tick, until, stop = how.on_progress, how.sleep, how.tick, how.until, how.stop
        in_callback = False
        known = record
        try:
            while True:
                if stop is not None and stop.is_set():
                    raise Cancelled(operation_id)
                result = self.step(contract, client, operation_id, known)
                known = _left(result)
                if on_progress is not None:
                    in_callback = True
                    on_progress(result)
                    in_callback = False
                if isinstance(result, Done):
                    return result.record
                if isinstance(result, Polled):
                    if result.decision.record.is_final or (until is not None and until()):
                        return result.decision.record
                    continue
                if until is not None and until():
                    return result.record
                wake = result.until if isinstance(result, NotYet) else result.retry_at
                delay = max(0.0, (wake - self.clock()).total_seconds())
                delay = min(delay, tick) if tick else delay
                if sleep is not None:
                    if sleep(delay) is True:
                        known = None
                elif stop is not None:
                    stop.wait(delay)  # wakes at once when set; the loop's head raises Cancelled
                else:
                    time.sleep(delay)
        except BaseException as exc:
            callback = in_callback and isinstance(exc, Exception)
            self.interrupted(
                operation_id, by=how.by, why=f"on_progress raised {type(exc).__name__}" if callback else _why(exc)
            )
            raise

    def interrupted(self, operation_id: str, *, by: str, why: str) -> None:
        """Record that a watch of the operation stopped before it was final (nothing when it is final, or gone).

        Best effort: it runs while another exception is on its way out, and a store that cannot take the event
        (the very failure that stopped the watch) must not replace that exception with its own."""
        with suppress(Exception):
            stored = self.store.get(operation_id)
            if stored is not None and not stored.record.is_final:
                event = WatchInterrupted.of(stored.record, by=by, why=why)
                self.store.append(operation_id, event, self.clock())

    # -- executing effects --------------------------------------------------------------------------------------

    def _drive(self, steps: flow.Flow[T], contract: Contract, client: StatusSender) -> T:
        """Run a flow to its end: perform each effect, send its answer back, throw its exception in."""
        return self.drive_from(steps, contract, client, None, None)


class Cancelled(PollwardenError):
    """`Engine.run` was stopped (its `stop` was set) before the operation was final; it stays resumable."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, operation_id: str) -> None:
        super().__init__(f"the watch of operation {operation_id} was cancelled; it stays active and resumable")
        self.operation_id = operation_id


def _left(result: StepResult) -> OperationRecord | None:
    """The operation as a step of this watch left it, or None when another owner holds it (read it again)."""
    if isinstance(result, Polled):
        return result.decision.record
    return None if isinstance(result, Busy) else result.record


def _why(exc: BaseException) -> str:
    """What stopped a run, for the audit: a cancel, a signal's name, else the exception's type (its text is
    nobody's promise not to hold a secret)."""
    if isinstance(exc, Cancelled):
        return "cancelled"
    if isinstance(exc, Interruption):
        return exc.why
    return type(exc).__name__


__all__ = [
    "BATCH",
    "AdmissionError",
    "Admitted",
    "BatchAdmissionError",
    "Cancelled",
    "Engine",
    "StatusSender",
    "Watching",
    "new_decision_id",
]
