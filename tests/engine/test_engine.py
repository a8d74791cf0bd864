"""The engine between the pure flow and the subprocess tests: a real SQLite store, a scripted or loopback provider.

Each interface (watch, worker, Python API, MCP) goes through this engine, so the promises tested here hold for
all of them: the lease covers the bounded request, stops are announced once, admission never refills a budget.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, cast

import pytest

from pollwarden import events as ev
from pollwarden.audit import load_or_create_keys
from pollwarden.clock import utcnow
from pollwarden.core.admission import Limits, WatchRequest
from pollwarden.core.contract.parse import Contract, parse_contract
from pollwarden.core.lease import lease_ttl
from pollwarden.core.observe import Exchange, Response
from pollwarden.core.reasons import StopReason
from pollwarden.core.record import new_record
from pollwarden.engine import AdmissionError, Admitted, Engine, Polled, Watching
from pollwarden.fleet.worker import CLAIM_TTL, Worker
from pollwarden.home.outbox import delivering
from pollwarden.simulator import Simulator, contract_text
from pollwarden.store.base import Store, Stored
from pollwarden.store.open import open_store
from pollwarden.transport.credentials import resolve_secret
from pollwarden.transport.fake import FakeTransport, Reply
from pollwarden.transport.http import StatusClient
from tests.conftest import install


def _store(home: Path) -> Store:
    home.mkdir(exist_ok=True)
    return open_store(home / "pollwarden.db", keys=load_or_create_keys(home), trusted_checkpoint_path=None)


# `store` is the store suite's fixture: each test that takes it runs on SQLite and on PostgreSQL.


def _contract(base: str = "http://127.0.0.1:9", **options: Any) -> Contract:
    return parse_contract(contract_text(base, **options), source="test.toml")


class SlowProvider:
    """Answers `running`; while "on the wire" it lets a second worker try to claim, as a slow provider would."""

    def __init__(self, store: Store, rival_delay: timedelta) -> None:
        self.store = store
        self.rival_delay = rival_delay
        self.rival_claims: list[int] = []

    def prepare(self) -> None:  # no credential to read
        pass

    def renew(self) -> None:  # no credential to forget
        pass

    def fetch(
        self, job_id: str, extra_headers: Mapping[str, str] | None = None, *, location: str | None = None
    ) -> Exchange:
        later = self.store.db_now() + self.rival_delay  # a second worker, that much later, with its fixed TTL
        self.rival_claims.append(len(self.store.claim_due("rival", later, CLAIM_TTL, 10)))
        now = utcnow()
        return Response(status=200, headers={}, body=b'{"state": "running"}', sent_at=now, received_at=now)


def test_a_batch_claim_with_a_short_ttl_is_extended_to_cover_a_slow_contract(store: Store) -> None:
    """Item 1: with timeout = 60s and an answer after 36 s, a second worker took the operation mid-request."""
    contract = _contract(timeout="60s")
    install(store, contract)
    engine = Engine(store, owner="worker-1", clock=store.db_now)
    admitted = engine.admit(WatchRequest(contract, "never-1", by="enqueue"))
    claimed, *_ = store.claim_due("worker-1", store.db_now(), CLAIM_TTL, 10)
    lease, record = claimed.lease, claimed.record
    assert lease_ttl(contract) > timedelta(seconds=36) > CLAIM_TTL - timedelta(seconds=30)
    provider = SlowProvider(store, rival_delay=timedelta(seconds=36))
    result = engine.step_claimed(contract, provider, lease, record, store.db_now())
    assert provider.rival_claims == [0]
    assert isinstance(result, Polled) and result.decision.record.status_requests_used == 1
    assert [e.kind for e in store.events(admitted.record.operation_id)].count("lease_lost") == 0


class _Hook(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        type(self).received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[str]:
    _Hook.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def test_the_worker_announces_a_stop_on_the_contracts_webhook(
    tmp_path: Path, hook: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 2: the webhook fired from `watch` and MCP only, never from the worker or the Python API. The stop's
    commit queues it; the worker's delivery loop (here beside its batches, as `Worker.run` runs it) sends it."""
    monkeypatch.setenv("PW_HOOK_SECRET", "hook-secret-123")
    extra = f'\n[escalation]\nwebhook_url = "{hook}"\nwebhook_secret_env = "PW_HOOK_SECRET"\n'
    home = tmp_path / "home"
    with Simulator() as sim:
        contract = _contract(sim.url, extra=extra)
        setup = _store(home)
        install(setup, contract)
        operation = Engine(setup, owner="cli").admit(WatchRequest(contract, "unknown_state-1")).record.operation_id
        worker = Worker(lambda: _store(home), owner="worker-1", concurrency=2)
        try:
            with ThreadPoolExecutor(2) as pool, delivering(setup, "worker") as courier:
                for _ in range(200):  # the scenario stops on its third poll, 100-400 ms apart
                    if not worker.run_once(pool):
                        check = _store(home)
                        done = check.get(operation)
                        check.close()
                        if done is not None and done.record.is_final:
                            break
                        worker.stop.wait(worker._idle_for())
                courier.drain(60)  # a guard: the loop sends it as soon as the stop commits
        finally:
            worker.close()
            setup.close()
    assert [payload["decision"]["reason"] for payload in _Hook.received] == ["unknown_state"]
    check = _store(home)
    assert "notified" in [e.kind for e in check.events(operation)]
    check.close()


def test_the_python_api_announces_a_stop_on_the_contracts_webhook(
    tmp_path: Path, hook: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pollwarden

    monkeypatch.setenv("PW_HOOK_SECRET", "hook-secret-123")
    extra = f'\n[escalation]\nwebhook_url = "{hook}"\nwebhook_secret_env = "PW_HOOK_SECRET"\n'
    with Simulator() as sim:
        path = tmp_path / "c.toml"
        path.write_text(contract_text(sim.url, extra=extra))
        outcome = pollwarden.watch_sync(path, "unknown_state-1", home=tmp_path / "home")
    assert isinstance(outcome, pollwarden.Stopped) and outcome.reason is StopReason.UNKNOWN_STATE
    assert [payload["decision"]["decision_id"] for payload in _Hook.received] == [outcome.decision.decision_id]  # type: ignore[union-attr]


def test_starting_the_same_job_again_returns_its_operation_with_the_budget_it_has_left(store: Store) -> None:
    contract = _contract(max_requests=3)
    install(store, contract)
    engine = Engine(store, owner="agent", clock=store.db_now)
    first = engine.admit(WatchRequest(contract, "never-1", by="agent session s1", agent=True))
    again = engine.admit(WatchRequest(contract, "never-1", by="agent session s1", agent=True))
    assert first.created and not again.created and again.reused_job
    assert again.record.operation_id == first.record.operation_id
    assert len(store.all()) == 1


def test_a_refused_resume_is_audited_on_the_operation_and_changes_nothing(store: Store) -> None:
    contract = _contract(max_requests=3)
    install(store, contract)
    engine = Engine(store, owner="cli", clock=store.db_now)
    made = engine.admit(WatchRequest(contract, "never-1", "op-1"))
    with pytest.raises(AdmissionError, match="exceeds the approved 3"):
        engine.admit(WatchRequest(contract, None, "op-1", Limits(max_requests=9)))
    stored = store.get("op-1")
    assert stored is not None and stored.record == made.record
    assert [e.kind for e in store.events("op-1")] == ["created", "resume_refused"]


def test_narrowing_on_resume_is_written_under_the_lease_and_keeps_the_usefulness_window(store: Store) -> None:
    contract = _contract(max_requests=5)
    install(store, contract)
    engine = Engine(store, owner="cli", clock=store.db_now)
    engine.admit(WatchRequest(contract, "never-1", "op-1", Limits(useful_for=timedelta(seconds=30))))
    narrowed = engine.admit(WatchRequest(contract, None, "op-1", Limits(max_requests=1)))
    stored = store.get("op-1")
    assert stored is not None and stored.record == narrowed.record
    assert stored.record.plan.max_status_requests == 1 and stored.record.plan.useful_until is not None
    assert stored.lease_owner is None
    assert [e.kind for e in store.events("op-1")][-1] == "limits_narrowed"


def test_the_real_status_client_through_the_engine_on_a_scripted_transport(store: Store) -> None:
    """The middle layer with the real client: credential injected, answers decoded and scrubbed, then recorded."""
    contract = parse_contract(
        contract_text("https://provider.test", secret_env="PW_ENGINE_TOKEN", max_requests=3), source="t.toml"
    )
    answers = iter([b'{"state": "running", "error": "tok-ENGINE-123"}', b'{"state": "succeeded", "result_url": "/r"}'])
    transport = FakeTransport(lambda request: Reply(body=next(answers)))
    install(store, contract)
    engine = Engine(store, owner="cli", clock=store.db_now)
    op = engine.admit(WatchRequest(contract, "happy-1")).record.operation_id
    with StatusClient(contract, "tok-ENGINE-123", clock=store.db_now, transport=transport) as client:
        final = engine.run(contract, client, op, Watching(sleep=lambda _: None))
    assert final.result == "/r" and final.status_requests_used == 2
    assert [dict(r.headers).get("Authorization") for r in transport.requests] == ["Bearer tok-ENGINE-123"] * 2
    trail = json.dumps([dict(e.data) for e in store.events(op)])
    assert "tok-ENGINE-123" not in trail and "[secret]" in trail


class _RivalBetweenReadAndWrite:
    """The store as one creator sees it when another creator of the same job commits between this one's look-up
    and its write (two watches, or a watch and an enqueue, started together): `rival` runs once, after the first
    `find_jobs` has answered."""

    def __init__(self, store: Store, rival: Callable[[], object]) -> None:
        self.store = store
        self.rival: Callable[[], object] | None = rival

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def find_jobs(self, contract_name: str, job_ids: Sequence[str]) -> dict[str, list[Stored]]:
        found = self.store.find_jobs(contract_name, job_ids)
        if self.rival is not None:
            rival, self.rival = self.rival, None
            rival()
        return found


def test_two_creators_of_one_job_at_once_get_one_operation_and_one_budget(store: Store) -> None:
    contract = _contract(max_requests=3)
    install(store, contract)
    rival = Engine(store, owner="rival", clock=store.db_now)
    created: list[Admitted] = []
    racing = _RivalBetweenReadAndWrite(store, lambda: created.append(rival.admit(WatchRequest(contract, "never-1"))))
    late = Engine(cast(Store, racing), owner="late", clock=store.db_now).admit(WatchRequest(contract, "never-1"))
    assert created[0].created and not late.created and late.reused_job
    assert late.record.operation_id == created[0].record.operation_id
    assert [s.record.operation_id for s in store.all()] == [created[0].record.operation_id]


@pytest.mark.parametrize("combine", [False, True], ids=["alone", "combined"])
def test_a_step_from_a_stale_record_claims_and_follows_the_stored_one(store: Store, combine: bool) -> None:
    """A watch's step starts from the record its previous step left (no read); if another owner polled the
    operation meanwhile, the claim reloads it under the lease, so the step follows the stored record: not due
    yet, nothing sent."""
    from pollwarden.engine import NotYet
    from pollwarden.engine.combine import combined

    contract = _contract(base_delay="1h", max_delay="1h")
    install(store, contract)
    transport = FakeTransport(lambda request: Reply(body=b'{"state": "running"}'))
    admitted = Engine(store, owner="api", clock=store.db_now).admit(WatchRequest(contract, "stale-1", "op-stale"))
    with StatusClient(contract, None, clock=store.db_now, transport=transport) as client, combined(store) as combiner:
        elsewhere = Engine(store, owner="worker", clock=store.db_now)
        assert isinstance(elsewhere.step(contract, client, "op-stale"), Polled)  # moved on: next poll in an hour
        engine = Engine(store, owner="api", clock=store.db_now, combiner=combiner if combine else None)
        result = engine.step(contract, client, "op-stale", admitted.record)  # what this watch last saw: due now
    assert isinstance(result, NotYet) and result.record.polls_completed == 1
    assert len(transport.requests) == 1  # only the other owner's poll went out
    stored = store.get("op-stale")
    assert stored is not None and stored.lease_owner is None and stored.record.status_requests_used == 1


def test_a_stored_first_check_past_the_deadline_sleeps_only_until_the_deadline(store: Store) -> None:
    """A record stored before every wait was bounded (first check 30 s, deadline 2 s) slept 30 s, then stopped: the
    run now sleeps until the deadline and stops there, sending nothing."""
    text = contract_text("http://127.0.0.1:9").replace("[schedule]\n", '[schedule]\nfirst_check = "30s"\n', 1)
    contract = parse_contract(text, source="late.toml")
    install(store, contract)
    start = utcnow()
    fresh = new_record(contract, operation_id="op-late", job_id="j", now=start, deadline=timedelta(seconds=2))
    assert fresh.next_poll_at == start + timedelta(seconds=2)  # new records keep the bound themselves
    stored = replace(fresh, next_poll_at=start + timedelta(seconds=30))
    store.create(stored, contract.source_text, ev.Created.prepared(stored.summary()))
    clock = [start]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += timedelta(seconds=seconds)

    engine = Engine(store, owner="late", clock=lambda: clock[0])
    with StatusClient(contract, None, clock=utcnow) as client:
        final = engine.run(contract, client, "op-late", Watching(sleep=sleep))
    assert final.reason is StopReason.DEADLINE_EXCEEDED and final.status_requests_used == 0
    assert sum(slept) == 2.0, slept


@pytest.mark.parametrize("asked", [False, True])
def test_a_signed_status_request_carries_and_signs_only_the_contracts_headers(store: Store, asked: bool) -> None:
    """The reservation and lease went out on every request, signed into SigV4, which no doc mentioned; now only
    what the contract's [headers] ask for is sent (and signed), with status requests."""
    auth = (
        '[auth]\nkind = "sigv4"\nservice = "textract"\nregion = "us-east-1"\n'
        'access_key_env = "AK"\nsecret_key_env = "SK"\n'
    )
    text = contract_text("https://provider.test", max_requests=3).replace("[states]", auth + "[states]", 1)
    if asked:
        text += '\n[headers]\nX-Slot = "{reservation}"\n'
    contract = parse_contract(text, source="signed.toml")
    install(store, contract)
    transport = FakeTransport(lambda request: Reply(body=b'{"state": "succeeded", "result_url": "/r"}'))
    engine = Engine(store, owner="cli", clock=store.db_now)
    op = engine.admit(WatchRequest(contract, "j-1")).record.operation_id
    credential = resolve_secret(contract, {"AK": "AKIDEXAMPLE", "SK": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"})
    with StatusClient(contract, credential, clock=store.db_now, transport=transport) as client:
        final = engine.run(contract, client, op, Watching(sleep=lambda _: None))
    assert final.result == "/r"
    (sent,) = [dict(r.headers) for r in transport.requests]
    signed = sent["Authorization"].partition("SignedHeaders=")[2].partition(",")[0].split(";")
    assert not any(name.lower().startswith("x-pollwarden") for name in sent)
    assert not any(name.startswith("x-pollwarden") for name in signed)
    assert ("x-slot" in signed, sent.get("X-Slot")) == ((True, "1") if asked else (False, None))
