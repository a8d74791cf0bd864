"""Group commit through the one flow (`Engine.step_claimed_many`), on both backends.

The promises of the single step hold for every operation of a batch: its reservation is committed before its
request goes out, each write is fenced on its own, a failure belongs to the operation that caused it. And the
point of the batch: K polls cost two store transactions, with the K requests in flight at once.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import pytest

from pollwarden.audit import verify
from pollwarden.clock import utcnow
from pollwarden.core.admission import WatchRequest
from pollwarden.core.contract.parse import Contract, parse_contract
from pollwarden.core.observe import Exchange, Response
from pollwarden.engine import Busy, Engine, Polled
from pollwarden.engine import batch as batch_module
from pollwarden.fleet.worker import CLAIM_TTL
from pollwarden.simulator import contract_text
from pollwarden.store.base import Claimed, FencedWrite, Store, StoreError
from pollwarden.store.common import Tx
from tests.conftest import install
from tests.store.conftest import Backend

COUNT = 6
GUARD = 60.0
"""Seconds a batch here waits for its answers: a guard against a hang, never reached while the code is right."""


class WatchingProvider:
    """Answers `running`. At each request it reads the operation through a store of its own (what another
    process would see: committed data only), and it holds every request until all COUNT are in flight."""

    def __init__(self, reader: Store, count: int = COUNT) -> None:
        self.reader = reader
        self.lock = threading.Lock()
        self.together = threading.Barrier(count, timeout=60)  # a guard: all COUNT arrive at once unless broken
        self.committed_at_send: dict[str, int] = {}

    def prepare(self) -> None:  # no credential to read
        pass

    def renew(self) -> None:  # no credential to forget
        pass

    def fetch(
        self, job_id: str, extra_headers: Mapping[str, str] | None = None, *, location: str | None = None
    ) -> Exchange:
        with self.lock:
            stored = self.reader.get(f"op-{job_id}")
            assert stored is not None
            self.committed_at_send[job_id] = stored.record.status_requests_used
        self.together.wait()  # a BrokenBarrierError here: the requests were not sent at once
        now = utcnow()
        return Response(status=200, headers={}, body=b'{"state": "running"}', sent_at=now, received_at=now)


def _contract() -> Contract:
    return parse_contract(contract_text("http://127.0.0.1:9", max_requests=3), source="test.toml")


def _claimed(store: Store) -> tuple[Contract, Engine, list[Claimed]]:
    """COUNT operations admitted and claimed in one batch by `worker-1`."""
    contract = _contract()
    install(store, contract)
    engine = Engine(store, owner="worker-1", clock=store.db_now)
    return contract, engine, _claim(store, contract, engine)


def _claim(store: Store, contract: Contract, engine: Engine, count: int = COUNT) -> list[Claimed]:
    for n in range(count):
        engine.admit(WatchRequest(contract, f"never-{n}", f"op-never-{n}", by="enqueue"))
    claimed = store.claim_due("worker-1", store.db_now(), CLAIM_TTL, 10)
    assert len(claimed) == count
    return claimed


def refuse_writes_of(store: Store, operation_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write transaction that writes `operation_id` is refused (a value the store cannot take): the
    transaction fails whole, and the driver must give each of its other writes its own fate."""
    real = store._write_in  # type: ignore[attr-defined]

    def refusing(tx: Any, writes: Sequence[FencedWrite], values: Sequence[Any], now: Any) -> list[bool]:
        if any(w.lease.operation_id == operation_id for w in writes):
            raise StoreError("refused")
        result: list[bool] = real(tx, writes, values, now)
        return result

    monkeypatch.setattr(store, "_write_in", refusing)


def _count_transactions(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    sizes: list[int] = []
    real = store.write_many

    def counted(writes: Sequence[FencedWrite], now: datetime) -> list[bool]:
        sizes.append(len(writes))
        return real(writes, now)

    monkeypatch.setattr(store, "write_many", counted)
    return sizes


def one_wave(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch records its answers once all are in, however the machine spreads them: `batch.GATHER` (10 ms)
    is how long a batch waits for more answers after its first, and a loaded machine may run the threads that
    return them further apart than that (the answers then come in two waves, recorded in two transactions)."""
    monkeypatch.setattr(batch_module, "run", functools.partial(batch_module.run, gather=GUARD))


def test_a_batch_reserves_everything_before_any_request_then_records_in_one_transaction(
    store: Store, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    one_wave(monkeypatch)
    contract, engine, claimed = _claimed(store)
    provider = WatchingProvider(backend.open())
    sizes = _count_transactions(store, monkeypatch)
    with ThreadPoolExecutor(COUNT) as io:
        batch = [(contract, provider, c.lease, c.record) for c in claimed]
        results = engine.step_claimed_many(batch, store.db_now(), io)
    # The reservations together, before any request; the records as the answers come in, those that come together
    # in one transaction (all of them on a quiet machine; a loaded one may part them).
    assert sizes[0] == COUNT and sum(sizes[1:]) == COUNT, sizes
    assert provider.committed_at_send == {f"never-{n}": 1 for n in range(COUNT)}
    assert all(isinstance(r, Polled) and r.decision.record.status_requests_used == 1 for r in results)
    for n in range(COUNT):
        stored = store.get(f"op-never-{n}")
        assert stored is not None and stored.record.polls_completed == 1 and stored.lease_owner is None
        assert [e.kind for e in store.events(f"op-never-{n}")] == ["created", "reserved", "observed", "decision"]
    assert store.keys is not None
    store.checkpoint_heads(store.db_now())
    report = verify(store.audit_records(), store.audit_checkpoints(), store.keys.public_key)
    assert report.ok and report.logs == COUNT + 1, report  # and the installed contract's log


def test_a_batch_inserts_its_audit_records_in_one_statement_per_transaction(
    store: Store, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    one_wave(monkeypatch)
    contract, engine, claimed = _claimed(store)
    provider = WatchingProvider(backend.open())
    inserts: list[int] = []
    real = Tx.execute

    def counted(tx: Tx, query: str, params: Sequence[Any] = ()) -> Any:
        if query.startswith("INSERT INTO audit_records"):
            inserts.append(len(params) // 7)
        return real(tx, query, params)

    monkeypatch.setattr(Tx, "execute", counted)
    with ThreadPoolExecutor(COUNT) as io:
        engine.step_claimed_many([(contract, provider, c.lease, c.record) for c in claimed], store.db_now(), io)
    # The reservations' records in one statement, then each poll's observed and decision: answers that come in
    # together commit together, and a loaded machine may part them ([6, 10, 2]), but a commit is one statement
    # whatever it holds (a statement per record would show as an odd count).
    assert inserts[0] == COUNT and sum(inserts[1:]) == 2 * COUNT, inserts
    assert all(n % 2 == 0 for n in inserts[1:]), inserts
    assert store.keys is not None
    report = verify(store.audit_records(), store.audit_checkpoints(), store.keys.public_key, heads=store.audit_heads())
    assert report.ok and report.logs == COUNT + 1, report  # and the installed contract's log


def test_a_lost_lease_in_a_batch_changes_only_that_operation(store: Store, backend: Backend) -> None:
    contract, engine, claimed = _claimed(store)
    later = store.db_now() + CLAIM_TTL + timedelta(seconds=1)
    assert store.claim("op-never-0", "rival", later, CLAIM_TTL) is not None  # took over the expired claim
    provider = WatchingProvider(backend.open(), count=COUNT - 1)
    with ThreadPoolExecutor(COUNT) as io:
        results = engine.step_claimed_many([(contract, provider, c.lease, c.record) for c in claimed], later, io)
    by_op = {c.lease.operation_id: result for c, result in zip(claimed, results, strict=True)}
    assert isinstance(by_op.pop("op-never-0"), Busy)
    assert all(isinstance(r, Polled) for r in by_op.values())
    assert "never-0" not in provider.committed_at_send  # fenced off before its request: nothing was sent
    lost = store.get("op-never-0")
    assert lost is not None and lost.record.status_requests_used == 0 and lost.lease_owner == "rival"
    assert [e.kind for e in store.events("op-never-0")][-1] == "lease_lost"


def test_a_write_the_store_refuses_fails_its_own_operation_and_the_rest_commit(
    store: Store, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    contract, engine, claimed = _claimed(store)
    real = store.write_many

    def refusing(writes: Sequence[FencedWrite], now: datetime) -> list[bool]:
        if any(w.lease.operation_id == "op-never-3" for w in writes):
            raise StoreError("refused")
        return real(writes, now)

    monkeypatch.setattr(store, "write_many", refusing)
    provider = WatchingProvider(backend.open(), count=COUNT - 1)
    with ThreadPoolExecutor(COUNT) as io:
        results: list[Any] = engine.step_claimed_many(
            [(contract, provider, c.lease, c.record) for c in claimed], store.db_now(), io
        )
    by_op = {c.lease.operation_id: result for c, result in zip(claimed, results, strict=True)}
    assert isinstance(by_op.pop("op-never-3"), StoreError)
    assert all(isinstance(r, Polled) for r in by_op.values())
    refused = store.get("op-never-3")
    assert refused is not None and refused.record.status_requests_used == 0
    assert refused.lease_owner is None  # the flow gave its lease back
    assert "never-3" not in provider.committed_at_send


def test_a_batch_of_plain_http_polls_goes_out_at_once_from_one_thread_after_its_reservations(
    store: Store, backend: Backend
) -> None:
    """Real status clients: the K requests go on one selector in the calling thread (`http.fetch_all`), not the
    pool. The loopback provider answers none until all K are in (one request at a time would never get there),
    and at each request it reads, through a store of its own, that the reservation is already committed."""
    from pollwarden.transport.http import StatusClient
    from tests.transport.test_http import RawServer

    reader = backend.open()
    together = threading.Barrier(COUNT, timeout=10)
    committed: dict[str, int] = {}
    lock = threading.Lock()

    def answer(conn: Any, raw: bytes) -> None:
        job = raw.split(b" ", 2)[1].decode().rsplit("/", 1)[1]
        with lock:
            stored = reader.get(f"op-{job}")
            committed[job] = -1 if stored is None else stored.record.status_requests_used
        together.wait()
        body = b'{"state": "running"}'
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    server = RawServer(answer)
    try:
        contract = parse_contract(contract_text(server.url, max_requests=3), source="test.toml")
        install(store, contract)
        engine = Engine(store, owner="worker-1", clock=store.db_now)
        claimed = _claim(store, contract, engine)
        with StatusClient(contract, None, clock=store.db_now) as client, ThreadPoolExecutor(1) as io:
            batch = [(contract, client, c.lease, c.record) for c in claimed]
            results = engine.step_claimed_many(batch, store.db_now(), io)
    finally:
        server.close()
    assert committed == {f"never-{n}": 1 for n in range(COUNT)}
    assert all(isinstance(r, Polled) and r.decision.record.last_state == "running" for r in results), results


def test_a_poll_the_batch_reaches_too_late_is_not_sent_and_the_others_are() -> None:
    """The batch's requests start after the other lanes' commits: a Send whose `not_after` has passed by then
    goes nowhere, and its flow is handed `SendTooLate` (it applies the deadline and lease rules again)."""
    from pollwarden.engine import batch, flow
    from pollwarden.transport.http import Fetches, StatusClient
    from tests.transport.test_http import RawServer

    def answer(conn: Any, raw: bytes) -> None:
        body = b'{"state": "running"}'
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    def told(seen: list[object]) -> Any:
        """A flow that waits on one Send and keeps what it was handed."""
        try:
            seen.append((yield))
        except Exception as exc:
            seen.append(exc)

    server = RawServer(answer)
    now = utcnow()
    handed: dict[str, list[object]] = {"late": [], "on-time": []}
    try:
        contract = parse_contract(contract_text(server.url, max_requests=3), source="test.toml")
        with StatusClient(contract, None, clock=utcnow) as client, Fetches() as fetches, ThreadPoolExecutor(1) as io:

            def lane(job: str, not_after: datetime | None) -> batch.Lane:
                steps = told(handed[job])
                next(steps)
                return batch.Lane(steps, contract, client, effect=flow.Send(job, {}, None, not_after=not_after))

            late, on_time = lane("late", now), lane("on-time", now + timedelta(seconds=1))
            flying: dict[batch.Lane, Any] = {}
            batch._start([late, on_time], fetches, flying, {}, lambda *_: None, lambda: now, io)
            assert list(flying) == [on_time]  # the late one ended at once: never in flight
            while flying:
                batch._take(fetches.wait(batch.GATHER), flying)
    finally:
        server.close()
    assert [type(x) for x in handed["late"]] == [flow.SendTooLate]
    assert [type(x) for x in handed["on-time"]] == [Response]
    assert [r.split(b" ")[1] for r in server.requests] == [b"/jobs/on-time"]  # the late one never went out


def test_answers_are_recorded_in_waves_and_a_held_request_holds_up_no_other_record(
    store: Store, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real status clients on a loopback provider that holds one job's answer: the others are recorded together,
    in one transaction, while that request is still in flight (seen through a store of the provider's own);
    the held one is recorded when its answer comes, in a transaction of its own."""
    import time

    from pollwarden.transport.http import StatusClient

    reader = backend.open()
    release = threading.Event()
    server = _holding_never_0(release)
    results: list[Any] = []
    try:
        contract = parse_contract(contract_text(server.url, max_requests=3, timeout="60s"), source="test.toml")
        install(store, contract)
        install(store, contract)
        engine = Engine(store, owner="worker-1", clock=store.db_now)
        claimed = _claim(store, contract, engine)
        sizes = _count_transactions(store, monkeypatch)
        with StatusClient(contract, None, clock=store.db_now) as client, ThreadPoolExecutor(1) as io:
            batch = [(contract, client, c.lease, c.record) for c in claimed]
            stepping = threading.Thread(
                target=lambda: results.extend(engine.step_claimed_many(batch, store.db_now(), io))
            )
            stepping.start()
            guard = time.monotonic() + 60
            others = [f"op-never-{n}" for n in range(1, COUNT)]
            while not all((s := reader.get(op)) is not None and s.record.polls_completed == 1 for op in others):
                assert time.monotonic() < guard, "the other answers were not recorded while one was held"
                time.sleep(0.005)
            held = reader.get("op-never-0")
            assert held is not None and held.record.status_requests_used == 1 and held.record.polls_completed == 0
            assert held.lease_owner == "worker-1"  # still its poll's, its answer on the way
            release.set()
            stepping.join(60)
            assert not stepping.is_alive()
    finally:
        release.set()
        server.close()
    # The reservations; the records of the answers that came (one wave, or more if the machine spread them over
    # more than `batch.GATHER`); the held one's, alone, after every other record was seen committed.
    assert sizes[0] == COUNT and sum(sizes[1:-1]) == COUNT - 1 and sizes[-1] == 1, sizes
    assert all(isinstance(r, Polled) and r.decision.record.polls_completed == 1 for r in results), results


def _holding_never_0(release: threading.Event) -> Any:
    """A loopback provider (`RawServer`) that answers `running`, the job `never-0` only once `release` is set."""
    from tests.transport.test_http import RawServer

    def answer(conn: Any, raw: bytes) -> None:
        if raw.split(b" ", 2)[1].endswith(b"/never-0"):
            assert release.wait(60), "never released (a guard)"
        body = b'{"state": "running"}'
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    return RawServer(answer)


def _admitted(store: Store, contract: Contract, count: int = COUNT) -> Engine:
    engine = Engine(store, owner="worker-1", clock=store.db_now)
    for n in range(count):
        engine.admit(WatchRequest(contract, f"never-{n}", f"op-never-{n}", by="enqueue"))
    return engine


def test_a_workers_batch_claims_and_reserves_in_one_transaction(
    store: Store, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    contract = _contract()
    install(store, contract)
    engine = _admitted(store, contract)
    provider = WatchingProvider(backend.open())
    calls: list[str] = []

    def counted(name: str) -> Any:
        real = getattr(store, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return real(*args, **kwargs)

        return call

    for name in ("claim_due", "claim_due_then_write"):
        monkeypatch.setattr(store, name, counted(name))
    sizes = _count_transactions(store, monkeypatch)
    with ThreadPoolExecutor(COUNT) as io:
        claimed, lanes = engine.claim_due_many(
            store.db_now(), CLAIM_TTL, 10, lambda due: [(contract, provider, one) for one in due], io
        )
    results = [(lane.of, lane.result) for lane in lanes]
    assert calls == ["claim_due_then_write"] and len(claimed) == COUNT
    assert sum(sizes) == COUNT and len(sizes) <= COUNT  # the records, as their answers came (one wave, mostly)
    assert provider.committed_at_send == {f"never-{n}": 1 for n in range(COUNT)}  # reserved before sent
    assert [one for (_, _, one), _ in results] == claimed
    assert all(isinstance(r, Polled) and r.decision.record.status_requests_used == 1 for _, r in results), results
    for n in range(COUNT):
        stored = store.get(f"op-never-{n}")
        assert stored is not None and stored.record.polls_completed == 1 and stored.lease_owner is None
        assert [e.kind for e in store.events(f"op-never-{n}")] == ["created", "reserved", "observed", "decision"]


def test_a_reservation_the_store_refuses_in_a_workers_claim_fails_only_its_own_operation(
    store: Store, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claims and reservations share a transaction, so a reservation the store refuses fails it whole: the
    batch is claimed again, the claims alone, and each reservation then has its own fate."""
    contract = _contract()
    install(store, contract)
    engine = _admitted(store, contract)
    refuse_writes_of(store, "op-never-3", monkeypatch)
    provider = WatchingProvider(backend.open(), count=COUNT - 1)
    with ThreadPoolExecutor(COUNT) as io:
        claimed, lanes = engine.claim_due_many(
            store.db_now(), CLAIM_TTL, 10, lambda due: [(contract, provider, one) for one in due], io
        )
    by_op = {lane.of[2].lease.operation_id: lane.result for lane in lanes}
    assert isinstance(by_op.pop("op-never-3"), StoreError) and len(claimed) == COUNT
    assert all(isinstance(r, Polled) for r in by_op.values())
    assert "never-3" not in provider.committed_at_send
    refused = store.get("op-never-3")
    assert refused is not None and refused.record.status_requests_used == 0 and refused.lease_owner is None
    for n in (0, 1, 2, 4, 5):
        stored = store.get(f"op-never-{n}")
        assert stored is not None and stored.lease_token == 1  # claimed once: the failed transaction took nothing


@pytest.mark.parametrize("where", ["start", "wait"])
def test_a_selector_that_fails_ends_each_poll_in_its_own_flow_and_leaves_no_lease(
    store: Store, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Not one request's failure but the selector's (a process out of descriptors): each flow is handed it, as a
    refused send, and records its stop; nothing escapes the batch, no lease stays held."""
    import errno

    from pollwarden.transport import http
    from pollwarden.transport.http import StatusClient
    from tests.transport.test_http import RawServer

    def answer(conn: Any, raw: bytes) -> None:
        conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n{"state": "running"}')

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EMFILE, "Too many open files")

    server = RawServer(answer)
    try:
        contract = parse_contract(contract_text(server.url, max_requests=3), source="test.toml")
        install(store, contract)
        engine = Engine(store, owner="worker-1", clock=store.db_now)
        claimed = _claim(store, contract, engine)
        monkeypatch.setattr(http.Fetches, where, broken)
        with StatusClient(contract, None, clock=store.db_now) as client, ThreadPoolExecutor(1) as io:
            batch = [(contract, client, c.lease, c.record) for c in claimed]
            results = engine.step_claimed_many(batch, store.db_now(), io)
    finally:
        server.close()
    assert all(type(r).__name__ == "Done" for r in results), results  # a recorded stop each
    for n in range(COUNT):
        stored = store.get(f"op-never-{n}")
        assert stored is not None and stored.lease_owner is None and stored.record.status_requests_used == 1
        assert stored.record.reason is not None and stored.record.reason.value == "integration_failure"


def test_a_worker_that_fails_after_its_claim_gives_every_reserved_lease_back(store: Store, backend: Backend) -> None:
    """What happens between the claim's commit and the requests (`then`) fails: nothing is sent, each chosen
    flow gives its lease back, its reservation stays counted, and the failure is raised."""
    contract = _contract()
    install(store, contract)
    engine = _admitted(store, contract)
    provider = WatchingProvider(backend.open())

    def failing(claimed: list[Claimed]) -> None:
        raise RuntimeError("cannot schedule new futures after shutdown")

    with ThreadPoolExecutor(COUNT) as io, pytest.raises(RuntimeError, match="after shutdown"):
        engine.claim_due_many(
            store.db_now(), CLAIM_TTL, 10, lambda due: [(contract, provider, one) for one in due], io, then=failing
        )
    assert provider.committed_at_send == {}  # nothing went out
    for n in range(COUNT):
        stored = store.get(f"op-never-{n}")
        assert stored is not None and stored.lease_owner is None and stored.record.status_requests_used == 1


def test_a_request_still_in_flight_goes_aside_and_is_finished_on_a_thread_of_its_own(
    store: Store, backend: Backend
) -> None:
    """A worker's lane waited for its batch's slowest request (a provider that accepts and never answers held it
    for its whole timeout) before it claimed again. With `aside`, `run` returns once only requests in flight are
    left, `batch.ASIDE` after they went out: the others are recorded, the held one is handed over, and `finish`
    records it on another thread, with that thread's store."""
    from pollwarden.engine import batch, flow
    from pollwarden.transport.http import StatusClient

    release = threading.Event()
    server = _holding_never_0(release)
    handed: list[batch.Aside] = []
    try:
        contract = parse_contract(contract_text(server.url, max_requests=3, timeout="60s"), source="test.toml")
        install(store, contract)
        engine = Engine(store, owner="worker-1", clock=store.db_now)
        claimed = _claim(store, contract, engine)
        with StatusClient(contract, None, clock=store.db_now) as client, ThreadPoolExecutor(1) as io:
            now = store.db_now()
            lanes = [batch.Lane(flow.step_claimed(contract, c.lease, c.record, now), contract, client) for c in claimed]
            batch.run(lanes, batch.Means(store, engine.perform, engine.clock, io), aside=handed.append)
            assert [rest.lanes for rest in handed] == [[lanes[0]]] and lanes[0].result is None
            assert all(isinstance(lane.result, Polled) for lane in lanes[1:]), [lane.result for lane in lanes]
            held = store.get("op-never-0")
            assert held is not None and held.record.polls_completed == 0 and held.lease_owner == "worker-1"
            release.set()
            own = backend.open()
            finishing = threading.Thread(
                target=handed[0].finish, args=(own, Engine(own, owner="worker-1", clock=own.db_now).perform)
            )
            finishing.start()
            finishing.join(60)
            assert not finishing.is_alive()
    finally:
        release.set()
        server.close()
    assert isinstance(lanes[0].result, Polled), lanes[0].result
    stored = store.get("op-never-0")
    assert stored is not None and stored.record.polls_completed == 1 and stored.lease_owner is None
