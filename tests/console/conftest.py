"""Console fixtures: a home with real operations stopped by a real watch on the simulated provider."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from pollwarden import events as ev
from pollwarden.clock import utcnow
from pollwarden.console import ConsoleServer
from pollwarden.core.contract.parse import Contract, load_contract
from pollwarden.core.record import new_record
from pollwarden.engine import Engine
from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator, Step
from pollwarden.store.base import StoredDecision
from pollwarden.transport.http import StatusClient
from tests.conftest import install, write_contract

TOKEN = "console-test-token-0123456789abcdef"


@dataclass
class Stopped:
    operation_id: str
    decision_id: str


def stop_operation(
    home: Path,
    sim: Simulator,
    contract_path: Path,
    operation_id: str,
    job_id: str,
    *,
    state: str = "running",
    max_requests: int = 2,
    error: str | None = None,
) -> Stopped:
    """Watch a job that never finishes until the budget runs out (or that the provider ends: `state` "failed",
    with its `error`): one operation, one open decision."""
    sim.add_job(job_id, [Step(body={"state": state} if error is None else {"state": state, "error": error})])
    contract: Contract = load_contract(contract_path)
    store = open_store(home)
    try:
        record = new_record(contract, operation_id=operation_id, job_id=job_id, now=utcnow(), max_requests=max_requests)
        install(store, contract)
        store.create(record, contract.source_text, ev.Created.prepared(record.summary()))
        with StatusClient(contract, None, clock=utcnow) as client:
            Engine(store, owner="console-test").run(contract, client, operation_id)
        decisions = store.decisions(operation_id, open_only=True)
    finally:
        store.close()
    assert len(decisions) == 1, decisions
    return Stopped(operation_id, decisions[0].request.decision_id)


def decision(home: Path, decision_id: str) -> StoredDecision:
    store = open_store(home, keys="none")
    try:
        stored = store.get_decision(decision_id)
    finally:
        store.close()
    assert stored is not None
    return stored


@pytest.fixture
def contract_path(tmp_path: Path, sim: Simulator) -> Path:
    return write_contract(
        tmp_path / "contract.toml",
        sim.url,
        base_delay="50ms",
        max_delay="100ms",
        extra='[escalation]\nconsole_url = "https://provider.example/jobs/{job_id}"\n',
    )


@pytest.fixture
def console(home: Path) -> Iterator[ConsoleServer]:
    with ConsoleServer(home, token=TOKEN) as server:
        yield server


@pytest.fixture
def client(console: ConsoleServer) -> Iterator[httpx.Client]:
    """A logged-in browser stand-in: it keeps the session cookie and follows no redirect by itself."""
    with httpx.Client(base_url=console.url, timeout=10) as http:
        response = http.get("/login", params={"token": TOKEN})
        assert response.status_code == 303, response.text
        yield http
