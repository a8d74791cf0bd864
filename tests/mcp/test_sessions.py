"""Two agent sessions on one home. Chosen: operations on the contracts a server serves are shared by the agent
sessions of that server (an agent that reconnects gets a new session and must be able to finish its own watch),
but approval is not: a session-approval contract needs each session approved before that session causes any
provider call, also on an operation another, approved session started."""

from __future__ import annotations

import json
from pathlib import Path

from pollwarden.simulator import Simulator
from tests.conftest import run_cli

from .support import agent_contract, cli, mcp_agent, run


def test_a_second_session_sees_the_operation_but_needs_its_own_approval(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, approval="session", base_delay="50ms", max_delay="100ms")

    async def body() -> None:
        async with (
            mcp_agent(contracts, home, tmp_path / "a.txt") as alice,
            mcp_agent(contracts, home, tmp_path / "b.txt") as bob,
        ):
            op = (await alice.call("start_watch", contract="exports", job_id="never-1")).data["operation_id"]
            asked = await alice.call("check_operation", operation_id=op)
            assert asked.error == "approval_required", asked.text
            approved = await cli("approve-session", asked.data["grant_id"], "--by", "carol", home=home)
            assert approved.code == 0, approved.stderr
            assert (await alice.call("check_operation", operation_id=op)).data["status"] == "polled"
            sent = sim.request_count("never-1")

            listed = await bob.call("list_operations")
            assert op in {o["operation_id"] for o in listed.data["operations"]}, listed.text
            # Waiting polls as soon as a check is due: that is where bob's session must be asked for.
            piggyback = await bob.call("wait_operation", operation_id=op, max_wait_seconds=5)
            assert piggyback.error == "approval_required", piggyback.text
            assert piggyback.data["grant_id"] != asked.data["grant_id"]
            assert piggyback.data["session"] != asked.data["session"]
            assert sim.request_count("never-1") == sent  # bob caused no provider request

    run(body)


def test_an_agent_neither_sees_nor_acts_on_an_operation_a_person_started(sim: Simulator, tmp_path: Path) -> None:
    """Chosen: agents act only on operations an agent session created (the `created` event's `created_by`). A
    person's operation on a served contract is theirs, budget and result: no tool lists it, every tool answers it as
    unknown (so an agent cannot even probe which exist), and start_watch on its job refuses instead of rejoining."""
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    contract = agent_contract(contracts, sim.url, base_delay="50ms", max_delay="100ms")
    watched = run_cli("watch", "--contract", str(contract), "--job", "happy-1", "--operation", "person-done", home=home)
    assert watched.code == 0, watched.stderr
    queued = run_cli(
        "enqueue", "--contract", str(contract), "--job", "never-1", "--operation", "person-open", home=home
    )
    assert queued.code == 0, queued.stderr
    sent = sim.request_count("happy-1")

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            mine = (await agent.call("start_watch", contract="exports", job_id="happy-2")).data["operation_id"]
            listed = await agent.call("list_operations")
            assert [o["operation_id"] for o in listed.data["operations"]] == [mine], listed.text
            for op in ("person-done", "person-open"):
                for tool, extra in (
                    ("check_operation", {}),
                    ("wait_operation", {"max_wait_seconds": 1}),
                    ("get_decision", {}),
                    ("fetch_result", {}),
                    ("request_extension", {"minutes": 5, "checks": 2, "reason": "mine now"}),
                ):
                    refused = await agent.call(tool, operation_id=op, **extra)
                    assert refused.error == "unknown_operation", (tool, op, refused.text)
            for job in ("happy-1", "never-1"):
                rejoined = await agent.call("start_watch", contract="exports", job_id=job)
                assert rejoined.error == "conflict", rejoined.text
                assert "person-" not in rejoined.text, rejoined.text  # not even the operation's id
            done = await agent.call("wait_operation", operation_id=mine, max_wait_seconds=20)
            assert done.data["status"] == "succeeded", done.text  # its own operation, as before

    run(body)
    assert sim.request_count("happy-1") == sent and sim.request_count("never-1") == 0  # nothing spent
    status = run_cli("status", "person-open", "--json", home=home)
    assert status.code == 0, status.stderr
    assert json.loads(status.stdout)["status_requests_used"] == 0, status.stdout
