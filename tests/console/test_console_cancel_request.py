"""An agent's cancel request, answered in the console: the card says what is asked, and cancelling sends once."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx

from pollwarden.core.reasons import Phase
from pollwarden.home.operating import open_store
from pollwarden.mcp_server import Broker, CallContext, load_contracts
from pollwarden.simulator import Simulator, Step
from tests.mcp.support import agent_contract

from .conftest import decision
from .test_console_http import csrf_of, flash_after

CANCEL = '\n[cancel]\nurl = "{base}/jobs/{{job_id}}/cancel"\n'


def _requested(sim: Simulator, tmp_path: Path, home: Path, job: str) -> tuple[str, str]:
    """A running agent operation with a cancel request, made by the MCP broker itself (no client needed)."""
    agent_contract(tmp_path / "contracts", sim.url, agent=CANCEL.format(base=sim.url))
    contracts, _ = load_contracts(tmp_path / "contracts")
    broker = Broker(contracts, home, environ={})
    sim.add_job(job, [Step(body={"state": "running"}, times=1000)])
    call = CallContext(cancelled=threading.Event())
    ok, started = broker.dispatch("start_watch", call, None, contract="exports", job_id=job)
    assert ok, started
    ok, asked = broker.dispatch(
        "request_cancel", call, None, operation_id=started["operation_id"], reason="the <b>input</b> changed"
    )
    assert ok, asked
    return started["operation_id"], asked["decision"]["decision_id"]


def test_the_console_answers_a_cancel_request_once(
    home: Path, sim: Simulator, tmp_path: Path, client: httpx.Client
) -> None:
    operation_id, decision_id = _requested(sim, tmp_path, home, "long-c1")
    page = client.get("/decisions").text
    assert "<h2>An agent asks to cancel an external job</h2>" in page
    assert "Still running" in page and "the &lt;b&gt;input&lt;/b&gt; changed" in page
    assert 'value="1">[1] cancel at provider and stop watching' in page and 'value="2">[2] keep watching' in page
    assert "the watch goes on within its limits and nothing is sent" in page
    token = csrf_of(client)
    # The first click asks again on a page of its own, and sends nothing: a cancel cannot be taken back.
    asked = client.post(f"/decisions/{decision_id}/decide", data={"option": "1", "by": "alice", "csrf": token})
    assert asked.status_code == 200 and "<h1>Cancel the job at the provider?</h1>" in asked.text
    assert 'name="confirm" value="yes"' in asked.text and 'value="alice"' in asked.text
    assert [r for r in sim.requests("long-c1") if r.method == "POST"] == []
    assert decision(home, decision_id).status == "open"
    sure = {"option": "1", "by": "alice", "csrf": token, "confirm": "yes"}
    decided = client.post(f"/decisions/{decision_id}/decide", data=sure)
    assert flash_after(client, decided).startswith("ok: cancel at provider sent for job long-c1; the watch stopped")
    again = client.post(f"/decisions/{decision_id}/decide", data={"option": "1", "by": "bob", "csrf": token})
    assert "already decided by alice" in flash_after(client, again)
    assert len([r for r in sim.requests("long-c1") if r.method == "POST"]) == 1
    store = open_store(home, keys="none")
    try:
        stored = store.get(operation_id)
    finally:
        store.close()
    assert stored is not None and stored.record.phase is Phase.STOPPED
    assert stored.record.reason is not None and stored.record.reason.value == "job_cancelled"


def test_refusing_a_cancel_request_keeps_the_watch(
    home: Path, sim: Simulator, tmp_path: Path, client: httpx.Client
) -> None:
    operation_id, decision_id = _requested(sim, tmp_path, home, "long-c2")
    token = csrf_of(client)
    for hostile in ("\u00b2", "9" * 5000, "-1"):  # '²' passes str.isdigit, and int() refuses it
        odd = client.post(f"/decisions/{decision_id}/decide", data={"option": hostile, "by": "carol", "csrf": token})
        assert flash_after(client, odd) == "error: Choose one of the options (or refuse). Nothing changed.", hostile
    refused = client.post(f"/decisions/{decision_id}/decide", data={"option": "refuse", "by": "carol", "csrf": token})
    assert flash_after(client, refused) == (
        f"ok: refused decision {decision_id}; operation {operation_id} keeps watching within its limits"
    )
    assert not [r for r in sim.requests("long-c2") if r.method == "POST"]
