"""The synchronous driver of the engine: admission and the step flow, executed against a store and a client.

Every interface goes through `Engine`: `watch` and the Python API (`run`), the worker (`step_claimed` after
its batch claim), the MCP server (`admit`, `step`), `enqueue` (`admit`; `admit_many` for a jobs file). What
each interface adds is parsing its own input and rendering its own output.
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Executor
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..core.admission import (
    Admission,
    Create,
    Narrow,
    Problem,
    Refusal,
    Refuse,
    Resume,
    WatchRequest,
    admit,
    check,
    check_many,
    narrow,
)
from ..core.contract.parse import Contract
from ..core.lease import lease_ttl
from ..core.observe import Exchange
from ..core.record import OperationRecord
from ..errors import EXIT_INTERRUPTED, Interruption, PollwardenError
from ..events import Created, LimitsNarrowed, ResumeRefused, WatchInterrupted
from ..store.base import Claimed, JobWatched, Lease, LogEntry, OperationExists, Store, UnreadableRecord
from . import batch, flow, installed
from .flow import Busy, Done, NotYet, Polled, StepResult

if TYPE_CHECKING:
    from .combine import Combiner

T = TypeVar("T")


class StatusSender(Protocol):
    """What the engine needs of a status client: one bounded request, credential held inside."""

    def prepare(self) -> None:
        """Whatever slow work the next request would start with (a token command), done now."""

    def renew(self) -> None:
        """Forget the credential held, so the next request reads the one configured now."""

    def fetch(
        self, job_id: str, extra_headers: Mapping[str, str] | None = None, *, location: str | None = None
    ) -> Exchange: ...


class AdmissionError(PollwardenError, ValueError):
    """A watch that cannot start or resume as asked; nothing was sent. The message says what to change."""

    def __init__(self, refusal: Refuse) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal

    def message_for(self, names: Mapping[str, str]) -> str:
        """The refusal with each field named as the caller's interface names it (a flag, an argument)."""
        return self.refusal.message_for(names)

    @property
    def kind(self) -> Refusal:
        return self.refusal.kind


BATCH = 500
"""Requests per write transaction in `admit_many`; why 500 is in docs/performance.md ("Bulk enqueue")."""


@dataclass(frozen=True)
class Admitted:
    record: OperationRecord
    created: bool
    reused_job: bool = False
    """The caller named no operation and got the job's existing one back (never a fresh budget)."""


class BatchAdmissionError(PollwardenError, ValueError):
    """Requests of a batch that cannot be admitted as asked. `refusals` are (index, refusal) in request order;
    `admitted` is what had been admitted already: empty unless another process created one of the same
    operations or jobs while the batch was written (every request is admitted before the first write)."""

    def __init__(self, refusals: Sequence[tuple[int, Refuse]], admitted: Sequence[Admitted] = ()) -> None:
        first = refusals[0][1].message if refusals else "nothing"
        super().__init__(f"{len(refusals)} request(s) cannot be admitted; the first: {first}")
        self.refusals = tuple(refusals)
        self.admitted = tuple(admitted)


REFUSAL_TTL = timedelta(seconds=30)
"""The lease of a refusal (`refuse_stored`): one write, no request; the stored contract's own timeout is not read."""


class Engine:
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

    # -- admission ---------------------------------------------------------------------------------------------

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

    def admit_many(
        self,
        requests: Sequence[WatchRequest],
        *,
        batch: int = BATCH,
        where: Callable[[int], str] = lambda index: f"request {index + 1}",
    ) -> list[Admitted]:
        """Admit each request by the one rule (`core.admission.admit`), one write transaction per `batch` of
        them; each created operation gets its own record and `created` event, as if admitted alone.

        Nothing is created unless every request can be admitted: all are checked (repeats within the requests
        included, each place named by `where`) and admitted against the store before the first batch is
        written; a refused resume is audited on its operation, as for one request. A crash leaves whole
        batches, and admitting the same requests again resumes what exists (same id, same job) and creates
        the rest. Raises BatchAdmissionError naming every refused request."""
        refused = check_many(requests, where)
        if refused:  # before any lookup: a malformed id never reaches the store
            raise BatchAdmissionError(refused)
        if len(requests) > batch:  # a single batch is validated by `_admit_batch` itself, before it writes
            now, refusals = self.clock(), []
            for start in range(0, len(requests), batch):  # batch by batch: only the refusals are kept
                answers = self._answers(requests[start : start + batch], now, set())
                refusals += [(start + i, answer) for i, answer in enumerate(answers) if isinstance(answer, Refuse)]
            if refusals:
                self._audit_refused(requests, refusals, now, batch)
                raise BatchAdmissionError(refusals)
        admitted: list[Admitted] = []
        taken: set[str] = set()
        for start in range(0, len(requests), batch):
            try:
                written = self._admit_batch(requests[start : start + batch], start, taken)
            except BatchAdmissionError as exc:  # another process got in between: what was written is said
                raise BatchAdmissionError(exc.refusals, [*admitted, *exc.admitted]) from None
            admitted.extend(one for one in written if isinstance(one, Admitted))  # all of them: refusals raise
        return admitted

    def admit_each(
        self, requests: Sequence[WatchRequest], narrowers: Sequence[Engine]
    ) -> list[Admitted | Refuse | Exception]:
        """Each request admitted on its own merits, the new operations of all of them in one write transaction:
        a refusal, or a failure, is its own request's alone (`combine`: the watches of one process that start
        together). No two requests may name one operation or one job (the caller admits such a one in a later
        call, where it resumes). A request to narrow an existing operation is narrowed under the lease of its
        own engine (`narrowers`), in a transaction of its own, as a refused resume is audited in one."""
        results: list[Admitted | Refuse | Exception | None] = [check(request) for request in requests]
        fine = [index for index, refused in enumerate(results) if refused is None]
        if fine:
            outcomes = self._admit_batch([requests[i] for i in fine], 0, set(), [narrowers[i] for i in fine])
            for index, outcome in zip(fine, outcomes, strict=True):
                results[index] = outcome
        return [result for result in results if result is not None]

    def _admit_batch(
        self,
        requests: Sequence[WatchRequest],
        offset: int,
        taken: set[str],
        narrowers: Sequence[Engine] | None = None,
    ) -> list[Admitted | Refuse | Exception]:
        """One batch: looked up and admitted afresh (as one request is), then created in one transaction. With
        `narrowers` (`admit_each`) a refusal, or a narrowing's failure, is returned in its request's place;
        otherwise it stops the batch."""
        for _ in range(3):  # a concurrent creator of the same id or job: look again, under the same rule
            now = self.clock()
            given = set(taken)
            answers = self._answers(requests, now, taken)
            refusals = [(i, answer) for i, answer in enumerate(answers) if isinstance(answer, Refuse)]
            if refusals and narrowers is None:
                self._audit_refused(requests, refusals, now, len(requests))
                raise BatchAdmissionError([(offset + index, refusal) for index, refusal in refusals])
            pairs = list(zip(requests, answers, strict=True))
            try:
                self.store.create_many(
                    [(answer.record, request.contract.source_text, Created.prepared(answer.event))
                     for request, answer in pairs if isinstance(answer, Create)]
                )  # fmt: skip
            except OperationExists as exc:
                self._refuse_unreadable(exc, [answer.record for answer in answers if isinstance(answer, Create)])
                taken.intersection_update(given)  # the ids this attempt gave out were not written: free again
                continue
            self._audit_refused(requests, refusals, now, len(requests))  # once, for the attempt that stands
            admitted: list[Admitted | Refuse | Exception] = []
            for index, (request, answer) in enumerate(pairs):
                if isinstance(answer, Create):
                    admitted.append(Admitted(answer.record, created=True))
                elif isinstance(answer, Resume):
                    admitted.append(Admitted(answer.record, created=False, reused_job=answer.reused_job))
                elif isinstance(answer, Refuse):
                    admitted.append(answer)
                else:
                    assert isinstance(answer, Narrow)
                    engine = self if narrowers is None else narrowers[index]
                    try:
                        narrowed = engine._narrow(request, answer)
                    except AdmissionError as exc:
                        if narrowers is not None:
                            admitted.append(exc.refusal)
                            continue
                        done = [one for one in admitted if isinstance(one, Admitted)]
                        raise BatchAdmissionError([(offset + index, exc.refusal)], done) from None
                    except Exception as exc:  # the store failed this narrowing: this request's failure alone
                        if narrowers is None:
                            raise
                        admitted.append(exc)
                        continue
                    admitted.append(Admitted(narrowed, created=False, reused_job=answer.reused_job))
            return admitted
        busy = _conflict("the operation is being created by another process; try again in a moment").refusal
        if narrowers is not None:
            return [busy] * len(requests)
        raise BatchAdmissionError([(offset + index, busy) for index in range(len(requests))])

    def _refuse_unreadable(self, exc: OperationExists, created: Sequence[OperationRecord]) -> None:
        """A creation that met a row whose record cannot be read (the lookups before it skip such rows) is no race
        to wait out: `UnreadableRecord` names the row and why, and nothing is created."""
        ids = [exc.operation_id] if isinstance(exc, JobWatched) else [record.operation_id for record in created]
        for operation_id in ids:
            try:
                self.store.get(operation_id)
            except UnreadableRecord as unreadable:
                raise unreadable from None

    def _answers(self, requests: Sequence[WatchRequest], now: datetime, taken: set[str]) -> list[Admission]:
        """The admission of each request against what the store holds now; `taken` are operation ids already
        given out by this call, which a generated id must avoid (its random part is short)."""
        stored = self.store.get_many([r.operation_id for r in requests if r.operation_id is not None])
        jobs: dict[str, list[str]] = {}
        for request in requests:
            if request.job_id is not None and (request.operation_id is None or request.operation_id not in stored):
                jobs.setdefault(request.contract.name, []).append(request.job_id)
        same = {name: self.store.find_jobs(name, job_ids) for name, job_ids in jobs.items()}
        contracts = {request.contract.digest: request.contract for request in requests}
        uninstalled = {
            digest: refused for digest, c in contracts.items() if (refused := installed.refusal(self.store, c))
        }
        answers: list[Admission] = []
        for request in requests:
            if (refused := uninstalled.get(request.contract.digest)) is not None:
                answers.append(refused)
                continue
            found = stored.get(request.operation_id) if request.operation_id is not None else None
            existing = found.record if found is not None else None
            same_job = []
            if existing is None and request.job_id is not None:
                same_job = [s.record for s in same[request.contract.name].get(request.job_id, [])]
            while True:
                answer = admit(request, existing, same_job, now, token=secrets.token_hex(3))
                if not isinstance(answer, Create) or answer.record.operation_id not in taken:
                    break
                assert request.operation_id is None  # a given id is taken only by a repeat, refused before
            if isinstance(answer, Create):
                taken.add(answer.record.operation_id)
            answers.append(answer)
        return answers

    def _audit_refused(
        self, requests: Sequence[WatchRequest], refusals: Sequence[tuple[int, Refuse]], now: datetime, batch: int
    ) -> None:
        """Each refused resume audited on its operation (index into `requests`), `batch` per transaction, as
        `resume_refused`: the same event one refused request leaves."""
        audited: list[LogEntry] = []
        for index, refusal in refusals:
            if refusal.operation_id is not None:
                event = ResumeRefused(why=refusal.message, extra={"by": requests[index].by})
                audited.append((refusal.operation_id, event))
        for start in range(0, len(audited), batch):
            self.store.append_many(audited[start : start + batch], now)

    def _narrow(self, request: WatchRequest, answer: Narrow) -> OperationRecord:
        now = self.clock()
        claimed = self.store.claim(answer.record.operation_id, self.owner, now, lease_ttl(request.contract))
        if claimed is None:
            raise _conflict(f"operation {answer.record.operation_id} is busy in another process; try again in a moment")
        lease, current = claimed
        narrowed = narrow(current, request.limits)  # re-applied to the record as it is under the lease
        if narrowed is current:
            self.store.release(lease)
            return current
        event = LimitsNarrowed.from_json({**narrowed.summary(), "by": request.by})
        if not self.store.write(lease, narrowed, [event], now, release=True):
            raise _conflict(f"operation {current.operation_id} was taken over by another process; try again")
        return narrowed

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
        batch.run(lanes, self.store, self._perform, self.clock, io)
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
            self.store, self.owner, now, ttl, limit, choose, then, self._perform, self.clock, io, skip=skip, aside=aside
        )
        return claimed, [lane for _, lane in stepped]

    def run(
        self,
        contract: Contract,
        client: StatusSender,
        operation_id: str,
        *,
        on_progress: Callable[[StepResult], None] | None = None,
        sleep: Callable[[float], object] | None = None,
        tick: float | None = None,
        until: Callable[[], bool] | None = None,
        stop: threading.Event | None = None,
        by: str = "cli",
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
        a `sleep` given with `stop` must itself end when `stop` is set."""
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
                operation_id, by=by, why=f"on_progress raised {type(exc).__name__}" if callback else _why(exc)
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

    def drive_from(
        self,
        steps: flow.Flow[T],
        contract: Contract | None,
        client: StatusSender | None,
        pending: flow.Effect[Any] | None,
        failure: BaseException | None,
    ) -> T:
        """`_drive` for a flow another driver began (`combine`): it waits on `pending` (None: not begun), or
        `failure` is thrown in first (the flow gives back a lease it holds and re-raises)."""
        answer: Any = None
        while True:
            if pending is not None and failure is None:
                effect, pending = pending, None
            else:
                try:
                    effect = steps.throw(failure) if failure is not None else steps.send(answer)
                except StopIteration as stop:
                    result: T = stop.value
                    return result
            failure = None
            try:
                answer = self._perform(effect, contract, client)
            except BaseException as exc:  # handed to the flow, which gives its lease back and re-raises
                answer, failure = None, exc

    def _perform(self, effect: flow.Effect[Any], contract: Contract | None, client: StatusSender | None) -> Any:
        """Carry out one effect; `contract` and `client` are None for a flow that sends and announces nothing
        (`refuse_claimed`: the stored contract is not to be used)."""
        store = self.store
        if isinstance(effect, flow.Claim):
            return store.claim(effect.operation_id, self.owner, self.clock(), effect.ttl)
        if isinstance(effect, flow.Write):
            return store.write(
                effect.lease,
                effect.record,
                effect.events,
                self.clock(),
                release=effect.release,
                decision=effect.decision,
                hold_until=effect.hold_until,
            )
        if isinstance(effect, flow.Send):
            if client is None:
                raise TypeError("a flow without a status client asked to send")
            client.prepare()  # a token command's wait counts before the time limit is checked, not after
            if (late := flow.too_late(effect, self.clock())) is not None:
                raise late
            return client.fetch(effect.job_id, effect.headers, location=effect.location)
        if isinstance(effect, flow.Renew):
            if client is not None:
                client.renew()
            return None
        if isinstance(effect, flow.Now):
            return self.clock()
        if isinstance(effect, flow.Draw):
            return self.rng.random()
        if isinstance(effect, flow.Release):
            store.release(effect.lease)
            return None
        if isinstance(effect, flow.Append):
            store.append(effect.operation_id, effect.event, self.clock())
            return None
        if isinstance(effect, flow.CanResubmit):
            return store.get_submission(effect.operation_id) is not None
        if isinstance(effect, flow.NewDecisionId):
            return new_decision_id()
        raise TypeError(f"unknown effect {effect!r}")


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


def _conflict(text: str) -> AdmissionError:
    return AdmissionError(Refuse(Refusal.CONFLICT, (Problem(None, text),)))


def new_decision_id() -> str:
    """Short enough to type after `pollwarden decide`; random so two stops never share one."""
    return "d" + secrets.token_hex(5)
