"""Watches of one process whose steps are due together, stepped as one batch (`engine.combine`), on both backends.

Each watch keeps its own engine (its owner), its own operation and its own audit log; what they share is the
batch's transactions: every claim with the reservation it leads to in one, the records in waves as the answers
come in, so a slow provider holds up no other watch's record. The promises of the single step hold for each:
its reservation is committed before its request goes out, and a write that fails belongs to the step that
made it.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pytest

from pollwarden.audit import verify
from pollwarden.clock import utcnow
from pollwarden.core.admission import Refusal, WatchRequest
from pollwarden.core.observe import Response
from pollwarden.engine import AdmissionError, Admitted, Engine, Polled, StepResult
from pollwarden.engine.combine import Combiner, combined
from pollwarden.store.base import ClaimAnswer, ClaimOf, FencedWrite, Store, StoreError
from tests.conftest import install
from tests.engine.test_batch import COUNT, WatchingProvider, _contract, refuse_writes_of


def _watches(store: Store, combiner: Combiner) -> list[Engine]:
    """COUNT operations admitted, one engine (one owner) per watch, all stepping through `combiner`."""
    contract = _contract()
    install(store, contract)
    engines = [Engine(store, owner=f"api-{n}", clock=store.db_now, combiner=combiner) for n in range(COUNT)]
    for n, engine in enumerate(engines):
        engine.admit(WatchRequest(contract, f"never-{n}", f"op-never-{n}", by="python api"))
    return engines


T = TypeVar("T")


def _all_at_once(turn: Any, forming: Any, calls: Sequence[Callable[[], T]]) -> list[T | BaseException]:
    """Every call on a thread of its own, at once, all in one batch: a batch that is forming closes only once
    it holds `turn` (the one before it is still claiming, or admitting), so while the test holds that turn every
    call joins the same group of `forming`. Each result, or what the call raised."""
    results: list[T | BaseException | None] = [None] * len(calls)

    def one(n: int) -> None:
        try:
            results[n] = calls[n]()
        except BaseException as exc:
            results[n] = exc

    threads = [threading.Thread(target=one, args=(n,)) for n in range(len(calls))]
    with turn:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while sum(len(g.tickets) for g in forming.values()) < len(calls):
            assert time.monotonic() < deadline, "the calls never joined the forming batch"
            time.sleep(0.001)
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert all(result is not None for result in results)
    return [result for result in results if result is not None]


def _step_together(combiner: Combiner, engines: list[Engine], client: Any) -> list[StepResult | BaseException]:
    """Every engine's step at once, in one batch."""
    contract = _contract()
    steps = [functools.partial(engine.step, contract, client, f"op-never-{n}") for n, engine in enumerate(engines)]
    return _all_at_once(combiner._turn, combiner._forming, steps)


def _count(store: Store, monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    """Sizes of the claim-and-reserve transactions and of the plain write transactions."""
    claims: list[int] = []
    writes: list[int] = []
    real_claim, real_write = store.claim_then_write, store.write_many

    def claiming(
        these: Sequence[ClaimOf], now: Any, then: Callable[[list[ClaimAnswer]], Sequence[FencedWrite]]
    ) -> tuple[list[ClaimAnswer], list[bool]]:
        claims.append(len(these))
        return real_claim(these, now, then)

    def writing(these: Sequence[FencedWrite], now: Any) -> list[bool]:
        writes.append(len(these))
        return real_write(these, now)

    monkeypatch.setattr(store, "claim_then_write", claiming)
    monkeypatch.setattr(store, "write_many", writing)
    return claims, writes


def _verified(store: Store, logs: int) -> None:
    """The log verifies, with `logs` operations' logs and the installed contract's."""
    assert store.keys is not None
    store.checkpoint_heads(store.db_now())
    report = verify(store.audit_records(), store.audit_checkpoints(), store.keys.public_key, heads=store.audit_heads())
    assert report.ok and report.logs == logs + 1, report


def test_steps_due_together_claim_and_reserve_in_one_transaction_and_each_records_its_own(
    store: Store, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with combined(store) as combiner:
        engines = _watches(store, combiner)
        provider = WatchingProvider(backend.open())  # holds every request until all COUNT are in flight
        claims, writes = _count(store, monkeypatch)
        results = _step_together(combiner, engines, provider)
    assert claims == [COUNT]  # one commit for every claim and reservation
    # The records as their answers came: all at once here (one wave, one commit), unless the machine held a
    # request thread for longer than the batch gathers (`batch.GATHER`); each record exactly once either way.
    assert sum(writes) == COUNT and len(writes) <= COUNT
    assert provider.committed_at_send == {f"never-{n}": 1 for n in range(COUNT)}  # reserved before sent
    assert all(isinstance(r, Polled) and r.decision.record.status_requests_used == 1 for r in results)
    for n in range(COUNT):
        stored = store.get(f"op-never-{n}")
        assert stored is not None and stored.record.polls_completed == 1 and stored.lease_owner is None
        assert stored.watcher == f"api-{n}"  # each watch claimed its own operation as itself
        assert [e.kind for e in store.events(f"op-never-{n}")] == ["created", "reserved", "observed", "decision"]
    _verified(store, COUNT)


def test_a_reservation_the_store_refuses_fails_only_its_own_step(
    store: Store, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with combined(store) as combiner:
        engines = _watches(store, combiner)
        provider = WatchingProvider(backend.open(), count=COUNT - 1)
        refuse_writes_of(store, "op-never-3", monkeypatch)
        results = _step_together(combiner, engines, provider)
    by_op = dict(zip((f"op-never-{n}" for n in range(COUNT)), results, strict=True))
    assert isinstance(by_op.pop("op-never-3"), StoreError)
    assert all(isinstance(r, Polled) for r in by_op.values())  # the others: claimed and reserved again, alone
    assert "never-3" not in provider.committed_at_send
    refused = store.get("op-never-3")
    assert refused is not None and refused.record.status_requests_used == 0 and refused.lease_owner is None
    assert [e.kind for e in store.events("op-never-3")] == ["created"]  # no claim or reservation survived
    for op in by_op:
        stored = store.get(op)
        assert stored is not None and stored.record.polls_completed == 1 and stored.lease_owner is None
        assert [e.kind for e in store.events(op)] == ["created", "reserved", "observed", "decision"]
    _verified(store, COUNT)


def test_an_operation_claimed_elsewhere_makes_only_its_own_step_busy(store: Store, backend: Any) -> None:
    with combined(store) as combiner:
        engines = _watches(store, combiner)
        assert store.claim("op-never-2", "worker/elsewhere:1:x", store.db_now(), _contract().timeout * 10)
        provider = WatchingProvider(backend.open(), count=COUNT - 1)
        results = _step_together(combiner, engines, provider)
    busy = results.pop(2)
    assert type(busy).__name__ == "Busy"
    assert all(isinstance(r, Polled) for r in results)
    held = store.get("op-never-2")
    assert held is not None and held.lease_owner == "worker/elsewhere:1:x" and held.record.status_requests_used == 0


class InterruptingProvider(WatchingProvider):
    """As WatchingProvider, but the request of `never-0` ends in a KeyboardInterrupt (Ctrl-C as it returns)."""

    def fetch(self, job_id: str, extra_headers: Any = None, *, location: str | None = None) -> Any:
        if job_id == "never-0":
            raise KeyboardInterrupt
        return super().fetch(job_id, extra_headers, location=location)


def test_an_interrupt_during_one_request_ends_only_that_step(store: Store, backend: Any) -> None:
    with combined(store) as combiner:
        engines = _watches(store, combiner)
        provider = InterruptingProvider(backend.open(), count=COUNT - 1)
        results = _step_together(combiner, engines, provider)  # every thread returns (joined within 60 s)
    assert isinstance(results[0], KeyboardInterrupt)
    assert all(isinstance(r, Polled) for r in results[1:])  # the others' answers were recorded, not dropped
    for n in range(COUNT):
        stored = store.get(f"op-never-{n}")
        assert stored is not None and stored.lease_owner is None  # given back: a resume starts at once
        assert stored.record.status_requests_used == 1  # each request that went out was counted first
        assert stored.record.polls_completed == (0 if n == 0 else 1)


class SlowProvider:
    """`never-0` is held until the test lets it go; every other job answers `running` at once."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def prepare(self) -> None:  # no credential to read
        pass

    def renew(self) -> None:  # no credential to forget
        pass

    def fetch(self, job_id: str, extra_headers: Any = None, *, location: str | None = None) -> Any:
        if job_id == "never-0":
            assert self.release.wait(60), "never released (a guard)"
        now = utcnow()
        return Response(status=200, headers={}, body=b'{"state": "running"}', sent_at=now, received_at=now)


def test_a_slow_provider_holds_up_no_other_watch_of_its_batch(store: Store, backend: Any) -> None:
    contract = _contract()
    install(store, contract)
    provider = SlowProvider()
    with combined(store) as combiner:
        engines = _watches(store, combiner)
        results: dict[int, StepResult | BaseException] = {}

        def one(n: int) -> None:
            try:
                results[n] = engines[n].step(contract, provider, f"op-never-{n}")
            except BaseException as exc:
                results[n] = exc

        threads = [threading.Thread(target=one, args=(n,)) for n in range(COUNT)]
        with combiner._turn:  # every step joins one batch
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 30
            while sum(len(g.tickets) for g in combiner._forming.values()) < COUNT:
                assert time.monotonic() < deadline, "the steps never joined the forming batch"
                time.sleep(0.001)
        try:
            for thread in threads[1:]:  # while never-0's request is still held
                thread.join(timeout=60)
                assert not thread.is_alive(), "a fast watch waited for the slow one"
            for n in range(1, COUNT):
                result = results[n]
                assert isinstance(result, Polled) and result.decision.record.polls_completed == 1
            assert 0 not in results
        finally:
            provider.release.set()
            threads[0].join(timeout=60)
    assert isinstance(results[0], Polled)
    _verified(store, COUNT)


def _admit_together(
    combiner: Combiner, engines: list[Engine], requests: list[WatchRequest]
) -> list[Admitted | BaseException]:
    """Every request's admission at once, through its own engine, in one batch of admissions."""
    admissions = [functools.partial(engine.admit, request) for engine, request in zip(engines, requests, strict=True)]
    return _all_at_once(combiner._admit_turn, combiner._admitting, admissions)


def test_watches_that_start_together_are_admitted_in_one_transaction_each_refused_on_its_own(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    contract = _contract()
    install(store, contract)
    Engine(store, owner="api-0", clock=store.db_now).admit(WatchRequest(contract, "taken", "op-taken"))
    created: list[int] = []
    real = store.create_many

    def counting(operations: Sequence[Any]) -> None:
        created.append(len(operations))
        real(operations)

    monkeypatch.setattr(store, "create_many", counting)
    requests = [WatchRequest(contract, f"new-{n}", f"op-new-{n}", by="python api") for n in range(COUNT)]
    requests += [
        WatchRequest(contract, "another-job", "op-taken", by="python api"),  # contradicts a stored operation
        WatchRequest(contract, "x", "bad id with spaces", by="python api"),  # malformed: never looked up
        WatchRequest(contract, "taken", "op-taken", by="python api"),  # resumes
    ]
    with combined(store) as combiner:
        engines = [Engine(store, owner=f"api-{n}", clock=store.db_now, combiner=combiner) for n in range(len(requests))]
        results = _admit_together(combiner, engines, requests)
    # One transaction for every new operation; the second naming of op-taken waits for a round of its own, which
    # creates nothing (`create_many` of nothing opens no transaction).
    assert created == [COUNT, 0]
    *new, contradicts, malformed, resumed = results
    assert all(isinstance(r, Admitted) and r.created for r in new), new
    assert [r.record.operation_id for r in new if isinstance(r, Admitted)] == [f"op-new-{n}" for n in range(COUNT)]
    assert isinstance(contradicts, AdmissionError) and contradicts.kind is Refusal.CONFLICT
    assert isinstance(malformed, AdmissionError) and malformed.kind is Refusal.INVALID
    assert isinstance(resumed, Admitted) and not resumed.created
    assert [e.kind for e in store.events("op-taken")] == ["created", "resume_refused"]  # audited where it belongs
    _verified(store, COUNT + 1)


def test_watches_of_one_job_that_start_together_share_one_operation(store: Store) -> None:
    contract = _contract()
    install(store, contract)
    requests = [WatchRequest(contract, "same-job", by="python api") for _ in range(COUNT)]
    with combined(store) as combiner:
        engines = [Engine(store, owner=f"api-{n}", clock=store.db_now, combiner=combiner) for n in range(COUNT)]
        results = _admit_together(combiner, engines, requests)
    assert all(isinstance(r, Admitted) for r in results), results
    admitted = [r for r in results if isinstance(r, Admitted)]
    assert len({r.record.operation_id for r in admitted}) == 1  # one operation, one budget
    assert [r.created for r in admitted] == [True] + [False] * (COUNT - 1)
    assert len(store.find_jobs(contract.name, ["same-job"])["same-job"]) == 1


def test_a_batch_that_cannot_make_its_round_fails_each_step_alone_and_holds_no_lease(
    store: Store, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch's ringable round needs a pipe: a process out of descriptors fails every step of the batch with
    that error (nothing claimed, nothing sent), not an assertion, and nothing escapes the batch's thread."""
    import errno

    from pollwarden.transport import resolve

    escaped: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value))
    with combined(store) as combiner:
        engines = _watches(store, combiner)

        def no_pipe(self: Any, selector: Any) -> None:
            raise OSError(errno.EMFILE, "Too many open files")

        monkeypatch.setattr(resolve.Wakeup, "__init__", no_pipe)
        results = _step_together(combiner, engines, WatchingProvider(backend.open(), count=1))
    assert all(isinstance(r, OSError) and r.errno == errno.EMFILE for r in results), results
    assert escaped == []
    for n in range(COUNT):
        stored = store.get(f"op-never-{n}")
        assert stored is not None and stored.lease_owner is None and stored.record.status_requests_used == 0


def test_a_batch_whose_thread_cannot_start_fails_that_watch_and_strands_no_later_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_start = threading.Thread.start
    failed: list[str] = []

    def start(thread: threading.Thread) -> None:
        if thread.name == "pollwarden-watch-batch" and not failed:
            failed.append(thread.name)
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    contract = _contract()
    install(store, contract)
    with combined(store) as combiner:
        first = Engine(store, owner="api-0", clock=store.db_now, combiner=combiner)
        with pytest.raises(RuntimeError):
            first.admit(WatchRequest(contract, "a", "op-a", by="python api"))
        second = Engine(store, owner="api-1", clock=store.db_now, combiner=combiner)
        admitted = second.admit(WatchRequest(contract, "b", "op-b", by="python api"))  # a group of its own, led
    assert admitted.created and admitted.record.operation_id == "op-b"
    assert store.get("op-a") is None


def test_a_creator_elsewhere_during_the_batch_is_looked_at_again_and_each_watch_admitted(
    store: Store, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process creates the job of one watch just before the batch commits: the batch's transaction is
    refused as a whole, looked up again, and each watch is admitted on its own (that one resumes the other
    process's operation, each refused resume is audited once)."""
    contract = _contract()
    install(store, contract)
    Engine(store, owner="api-x", clock=store.db_now).admit(WatchRequest(contract, "taken", "op-taken"))
    other_process = Engine(backend.open(), owner="enqueue", clock=store.db_now)
    real = store.create_many
    calls: list[int] = []

    def creating(operations: Sequence[Any]) -> None:
        calls.append(len(operations))
        if len(calls) == 1:
            other_process.admit(WatchRequest(contract, "new-0", "op-elsewhere", by="enqueue"))
        real(operations)

    monkeypatch.setattr(store, "create_many", creating)
    requests = [WatchRequest(contract, f"new-{n}", by="python api") for n in range(2)]
    requests += [WatchRequest(contract, f"new-{n}", f"op-new-{n}", by="python api") for n in range(2, 4)]
    requests += [WatchRequest(contract, "another-job", "op-taken", by="python api")]  # refused: audited once
    with combined(store) as combiner:
        engines = [Engine(store, owner=f"api-{n}", clock=store.db_now, combiner=combiner) for n in range(len(requests))]
        results = _admit_together(combiner, engines, requests)
    assert calls[0] == 4 and calls[1] == 3  # the first attempt refused whole; the second creates the other three
    *admitted, refused = results
    assert all(isinstance(r, Admitted) for r in admitted), admitted
    ids = [r.record.operation_id for r in admitted if isinstance(r, Admitted)]
    assert ids[0] == "op-elsewhere" and ids[2:] == ["op-new-2", "op-new-3"]
    assert isinstance(refused, AdmissionError) and refused.kind is Refusal.CONFLICT
    assert [e.kind for e in store.events("op-taken")] == ["created", "resume_refused"]


def test_a_narrowing_the_store_fails_fails_only_its_own_watch(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from pollwarden.core.admission import Limits

    contract = _contract()
    install(store, contract)
    Engine(store, owner="api-x", clock=store.db_now).admit(WatchRequest(contract, "old", "op-old"))
    real = store.claim

    def claiming(operation_id: str, *args: Any) -> Any:
        if operation_id == "op-old":
            raise StoreError("the database went away for this one claim")
        return real(operation_id, *args)

    monkeypatch.setattr(store, "claim", claiming)
    requests = [WatchRequest(contract, f"new-{n}", f"op-new-{n}", by="python api") for n in range(3)]
    requests.append(WatchRequest(contract, "old", "op-old", Limits(max_requests=1), by="python api"))  # narrows
    with combined(store) as combiner:
        engines = [Engine(store, owner=f"api-{n}", clock=store.db_now, combiner=combiner) for n in range(4)]
        results = _admit_together(combiner, engines, requests)
    *created, narrowing = results
    assert all(isinstance(r, Admitted) and r.created for r in created), created
    assert isinstance(narrowing, StoreError) and "went away" in str(narrowing)
