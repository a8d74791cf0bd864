"""Two agent sessions on one home. Chosen: operations on the contracts a server serves are shared by the agent
sessions of that server (an agent that reconnects gets a new session and must be able to finish its own watch),
but approval is not: a session-approval contract needs each session approved before that session causes any
provider call, also on an operation another, approved session started."""

from __future__ import annotations

from pathlib import Path

from pollwarden.simulator import Simulator

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
