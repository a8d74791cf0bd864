"""Results from where they should be (issue 23): `fetch_result` downloaded a result URL on another host (a
stand-in for a cloud metadata address) and handed its body to the agent.

A result URL is fetched only from the status URL's origin or a host `[result].hosts` names, and only from a
public address after the name is resolved (loopback only when the status URL is loopback itself). The
"metadata service" here is a loopback server on 127.0.0.2 (another host on Linux) whose body must never reach
the agent; the agent is the MCP server's broker in process, with a real store and the simulator.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from pollwarden.home.operating import open_store
from pollwarden.mcp_server import Broker, CallContext, load_contracts
from pollwarden.simulator import Simulator, Step
from tests.loopback import Answer, Loopback, serving

from .support import agent_contract

CREDENTIALS = "/latest/meta-data/iam/security-credentials/admin"
LOOT = b'{"AccessKeyId": "ASIA-METADATA-LOOT", "SecretAccessKey": "metadata-loot-secret"}'


def _call() -> CallContext:
    return CallContext(cancelled=threading.Event())


@pytest.fixture
def metadata() -> Iterator[Loopback]:
    with serving({("GET", CREDENTIALS): Answer(200, LOOT)}, host="127.0.0.2") as server:
        yield server


def _succeeded(broker: Broker, job: str) -> str:
    ok, started = broker.dispatch("start_watch", _call(), None, contract="exports", job_id=job)
    assert ok, started
    ok, done = broker.dispatch(
        "wait_operation", _call(), None, operation_id=started["operation_id"], max_wait_seconds=30
    )
    assert ok and done["status"] == "succeeded", done
    return str(started["operation_id"])


def _fetch(broker: Broker, operation_id: str) -> tuple[bool, dict[str, Any]]:
    return broker.dispatch("fetch_result", _call(), None, operation_id=operation_id)


def _broker(tmp_path: Path, sim: Simulator, extra: str = "") -> Broker:
    agent_contract(tmp_path / "contracts", sim.url, agent=extra)
    contracts, problems = load_contracts(tmp_path / "contracts")
    assert problems == []
    return Broker(contracts, tmp_path / "home", environ={})


def _actions(home: Path, operation_id: str) -> list[Mapping[str, Any]]:
    store = open_store(home, keys="read")
    try:
        return [event.data for event in store.events(operation_id) if event.kind == "action"]
    finally:
        store.close()


def test_a_result_url_on_another_host_is_never_fetched_for_the_agent(
    sim: Simulator, metadata: Loopback, tmp_path: Path
) -> None:
    sim.add_job("ssrf-1", [Step(body={"state": "succeeded", "result_url": metadata.url + CREDENTIALS})])
    broker = _broker(tmp_path, sim)
    operation_id = _succeeded(broker, "ssrf-1")
    ok, reply = _fetch(broker, operation_id)
    assert not ok and reply["error"] == "fetch_failed", reply
    assert "[result].hosts" in reply["message"] and "nothing was sent" in reply["message"], reply
    assert metadata.seen == []  # not a byte went there
    assert b"metadata-loot" not in str(reply).encode()
    [audited] = _actions(tmp_path / "home", operation_id)
    assert audited["ok"] is False and "[result].hosts" in audited["detail"]
    # Refused before the approval gate: no call intent, so no person is asked to approve a fetch that cannot be.
    store = open_store(tmp_path / "home", keys="read")
    try:
        intents = [e.data for e in store.events(broker.log_id) if e.kind == "call_intent"]
    finally:
        store.close()
    assert [intent["purpose"] for intent in intents if intent["purpose"] == "fetch_result"] == []


def test_a_named_host_that_resolves_to_a_refused_address_is_refused_after_resolution(
    sim: Simulator, metadata: Loopback, tmp_path: Path
) -> None:
    """The contract names the host (by mistake, or a name whose DNS now answers an internal address): the address
    actually connected to decides. 0.0.0.0, the unspecified address, connects to this machine on Linux."""
    port = metadata.url.rpartition(":")[2]
    sim.add_job("ssrf-2", [Step(body={"state": "succeeded", "result_url": f"http://0.0.0.0:{port}{CREDENTIALS}"})])
    broker = _broker(tmp_path, sim, f'[result]\ncredential = false\nhosts = ["0.0.0.0:{port}"]\n')
    ok, reply = _fetch(broker, _succeeded(broker, "ssrf-2"))
    assert not ok and "0.0.0.0 is an unspecified address" in reply["message"], reply
    assert metadata.seen == [] and b"metadata-loot" not in str(reply).encode()


def test_a_host_the_contract_names_is_fetched_and_others_are_not(
    sim: Simulator, metadata: Loopback, tmp_path: Path
) -> None:
    with serving({("GET", "/files/out.txt"): Answer(200, b"the output")}) as files:
        port = files.url.rpartition(":")[2]
        sim.add_job("named-1", [Step(body={"state": "succeeded", "result_url": files.url + "/files/out.txt"})])
        sim.add_job("named-2", [Step(body={"state": "succeeded", "result_url": metadata.url + CREDENTIALS})])
        broker = _broker(tmp_path, sim, f'[result]\ncredential = false\nhosts = ["127.0.0.1:{port}"]\n')
        ok, fetched = _fetch(broker, _succeeded(broker, "named-1"))
        assert ok and fetched["text"] == "the output", fetched
        ok, refused = _fetch(broker, _succeeded(broker, "named-2"))
        assert not ok and refused["error"] == "fetch_failed", refused
    assert metadata.seen == []
