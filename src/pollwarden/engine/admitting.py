"""Admission, the engine's half that creates, resumes and narrows operations (`core.admission` decides; this
writes): one request (`Engine.admit`), a batch (`admit_many`, a jobs file), the watches of one process that start
together (`admit_each`). A narrowing is a change of the operation under its lease (`engine.changes`)."""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

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
from ..core.lease import lease_ttl
from ..core.record import OperationRecord
from ..core.transitions import Change
from ..errors import PollwardenError
from ..events import Created, LimitsNarrowed, ResumeRefused
from ..store.base import JobWatched, LogEntry, OperationExists, Store, UnreadableRecord
from . import changes, installed, learning


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


class Admitting:
    """The admission methods of `Engine` (its store, owner and clock)."""

    store: Store
    owner: str
    clock: Callable[[], datetime]
    rng: random.Random
    models: learning.Models

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
        self, requests: Sequence[WatchRequest], narrowers: Sequence[Admitting]
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
        narrowers: Sequence[Admitting] | None = None,
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
                learnt = self.models.for_new(request) if existing is None and not same_job else None
                token, u = secrets.token_hex(3), self.rng.random() if learnt is not None else 0.5
                answer = admit(request, existing, same_job, now, token=token, learnt=learnt, u=u)
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
        ttl = lease_ttl(request.contract)
        try:
            patience = changes.Patience.of(Change.NARROW, ttl)
            with changes.holding(self.store, answer.record.operation_id, self.owner, ttl, self.clock, patience) as held:
                current = held.record
                narrowed = narrow(current, request.limits)  # re-applied to the record as it is under the lease
                if narrowed is current:
                    held.release()
                    return current
                event = LimitsNarrowed.from_json({**narrowed.summary(), "by": request.by})
                held.write(narrowed, [event])
                return narrowed
        except changes.ChangeRefused as exc:
            raise _conflict(str(exc)) from None


def _conflict(text: str) -> AdmissionError:
    return AdmissionError(Refuse(Refusal.CONFLICT, (Problem(None, text),)))


__all__ = ["BATCH", "AdmissionError", "Admitted", "Admitting", "BatchAdmissionError"]
