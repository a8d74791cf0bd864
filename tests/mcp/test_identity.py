"""One job, one identity for an agent (issue 23): respelling a job never buys a fresh budget, and a session
creates at most `[agent].max_operations` operations per contract.

The agent here is the MCP server's broker in process, against the loopback imitations of Azure's operation
monitor and GitHub's runs API, with a real store; the stdio server is driven in `test_identity_stdio`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pollwarden.home.operating import open_store
from pollwarden.mcp_server import Broker, CallContext, load_contracts
from tests.loopback import Answer, serving
from tests.providers.imitation import Imitation, azure, github, ok

from .support import agent_contract

KEY = "azure-imitation-key-identity-5be0"
TOKEN = "ghp_identity_imitation_token_0123456789"
PATH = "/documentintelligence/documentModels/prebuilt-layout/analyzeResults/3b31320d-8bab-4f88-b19c-2322a7f11034"
FAST = '[schedule]\nfirst_check = "0s"\nbase_delay = "20ms"\nmax_delay = "40ms"\n'


def _call() -> CallContext:
    return CallContext(cancelled=threading.Event())


def respellings(base: str) -> list[str]:
    """The issue's eight spellings of one Azure operation."""
    return [
        f"{base}{PATH}?api-version=2024-11-30",
        f"{base}{PATH}?api-version=2024-11-30&x=1",
        f"{base}{PATH}?x=1&api-version=2024-11-30",
        f"{base}{PATH.replace('/analyzeResults/', '/%61nalyzeResults/')}?api-version=2024-11-30",
        f"{base}{PATH}/?api-version=2024-11-30",
        f"{base}{PATH.upper().replace('/DOCUMENTINTELLIGENCE', '/documentintelligence')}?api-version=2024-11-30",
        f"{base}{PATH}?api-version=2024-11-30&x=",
        f"{base}{PATH}?%61pi-version=2024-11-30",
    ]


@pytest.fixture
def azure_provider() -> Iterator[Imitation]:
    with Imitation(azure(KEY)) as imitation:
        yield imitation


def _broker(tmp_path: Path, text: str, environ: dict[str, str]) -> Broker:
    contracts = tmp_path / "contracts"
    contracts.mkdir(exist_ok=True)
    (contracts / "served.toml").write_text(text, encoding="utf-8")
    served, problems = load_contracts(contracts)
    assert problems == []
    return Broker(served, tmp_path / "home", environ=environ)


def _until_final(broker: Broker, operation_id: str) -> dict[str, Any]:
    for _ in range(200):
        ok_, reply = broker.dispatch("wait_operation", _call(), None, operation_id=operation_id, max_wait_seconds=5)
        assert ok_, reply
        if reply["status"] in ("succeeded", "stopped"):
            return reply
    raise AssertionError(f"operation {operation_id} did not end")


def test_eight_spellings_of_one_azure_operation_are_one_operation_and_one_budget(
    azure_provider: Imitation, tmp_path: Path
) -> None:
    text = f'use = "azure-operation"\n[vars]\nbase_url = "{azure_provider.url}"\n[agent]\nmax_requests = 3\n{FAST}'
    broker = _broker(tmp_path, text, {"AZURE_API_KEY": KEY})
    azure_provider.script(PATH, ok({"status": "running"}))
    operations: set[str] = set()
    for url in respellings(azure_provider.url):
        ok_, started = broker.dispatch("start_watch", _call(), None, contract="azure-operation", status_url=url)
        assert ok_, started
        operations.add(started["operation_id"])
        _until_final(broker, started["operation_id"])
    assert len(operations) == 1  # one job, one operation: the respellings rejoined it
    seen = azure_provider.seen()
    assert len(seen) == 3  # the agent's cap of 3, once, not 8 times
    for request in seen:  # what is sent is the canonical URL: only api-version, the path folded
        assert (request.path, request.query) == (PATH.lower(), "api-version=2024-11-30")


def test_numeric_ids_a_provider_reads_alike_are_one_operation(tmp_path: Path) -> None:
    with Imitation(github(TOKEN, repo="acme/app")) as provider:
        text = (
            f'use = "github-actions-run"\n[vars]\nbase_url = "{provider.url}"\nrepo = "acme/app"\n'
            f"[agent]\nmax_requests = 2\n{FAST}"
        )
        broker = _broker(tmp_path, text, {"GITHUB_TOKEN": TOKEN})
        provider.script("42", ok({"status": "in_progress", "conclusion": None}))
        operations = set()
        for job in ("42", "042", "+42", "42.0"):
            ok_, started = broker.dispatch("start_watch", _call(), None, contract="github-actions-run", job_id=job)
            assert ok_, started
            operations.add(started["operation_id"])
            _until_final(broker, started["operation_id"])
        assert len(operations) == 1
        store = open_store(tmp_path / "home", keys="read")
        try:
            assert [s.record.job_id for s in store.all()] == ["42"]  # stored as the provider reads it
        finally:
            store.close()
        assert len(provider.seen()) == 2 and {s.path for s in provider.seen()} == {"/repos/acme/app/actions/runs/42"}
        ok_, refused = broker.dispatch("start_watch", _call(), None, contract="github-actions-run", job_id="4.2e1")
        assert not ok_ and refused["error"] == "invalid_argument", refused
        assert "job_id" in refused["message"] and "whole number" in refused["message"]
        assert len(provider.seen()) == 2


def test_a_session_creates_at_most_max_operations_per_contract_and_resumes_are_free(
    azure_provider: Imitation, tmp_path: Path
) -> None:
    text = (
        f'use = "azure-operation"\n[vars]\nbase_url = "{azure_provider.url}"\n'
        f"[agent]\nmax_requests = 1\nmax_operations = 3\n{FAST}"
    )
    broker = _broker(tmp_path, text, {"AZURE_API_KEY": KEY})

    def start(n: int) -> tuple[bool, dict[str, Any]]:
        url = f"{azure_provider.url}/documentintelligence/operations/op-{n}?api-version=2024-11-30"
        return broker.dispatch("start_watch", _call(), None, contract="azure-operation", status_url=url)

    made = [start(n) for n in range(3)]
    assert all(ok_ for ok_, _ in made), made
    ok_, fourth = start(3)
    assert not ok_ and fourth["error"] == "limit_exceeded", fourth
    assert fourth["limit"] == "[agent].max_operations" and fourth["allowed"] == 3
    assert "3 operations" in fourth["message"] and "Nothing was created" in fourth["message"]
    again = start(1)  # a resume of an operation it made is not a new one
    assert again[0] and again[1]["operation_id"] == made[1][1]["operation_id"] and again[1]["reused"] is True
    store = open_store(tmp_path / "home", keys="read")
    try:
        assert len(store.all()) == 3
    finally:
        store.close()
    # A new session (a new server process) has its own count; this one's count survived nothing but itself.
    fresh = Broker(broker.contracts, tmp_path / "home", environ={"AZURE_API_KEY": KEY})
    url = f"{azure_provider.url}/documentintelligence/operations/op-9?api-version=2024-11-30"
    assert fresh.dispatch("start_watch", _call(), None, contract="azure-operation", status_url=url)[0]


def test_submissions_count_against_the_sessions_operations_and_a_repeat_is_free(tmp_path: Path) -> None:
    """submit_job is the other way an agent makes an operation: the same cap, checked before anything is sent."""
    with serving() as provider:
        made = iter(range(1, 100))
        provider.routes[("POST", "/jobs")] = lambda seen: Answer(
            202, json.dumps({"job_id": f"sub-{next(made)}"}).encode()
        )
        contracts = tmp_path / "contracts"
        submit = f'[submit]\nurl = "{provider.url}/jobs"\nidempotency_header = "Idempotency-Key"\njob_id = "job_id"\n'
        agent_contract(contracts, provider.url, agent=f"{submit}[agent]\nmax_operations = 2\n")
        served, problems = load_contracts(contracts)
        assert problems == []
        broker = Broker(served, tmp_path / "home", environ={})

        def submit_job(size: int) -> tuple[bool, dict[str, Any]]:
            return broker.dispatch("submit_job", _call(), None, contract="exports", body={"size": size})

        assert submit_job(1)[0]
        ok_, watched = broker.dispatch("start_watch", _call(), None, contract="exports", job_id="watched-1")
        assert ok_, watched
        ok_, third = submit_job(2)
        assert not ok_ and third["error"] == "limit_exceeded" and third["limit"] == "[agent].max_operations", third
        assert len([seen for seen in provider.seen if seen.method == "POST"]) == 1  # nothing was sent
        again = submit_job(1)  # the same request: its operation, not a new one
        assert again[0] and again[1]["submission"]["already_submitted"] is True, again
