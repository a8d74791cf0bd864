"""Same-user mode says what it is: `pollwarden mcp` without a broker tells the person at start and the agent in
list_operations that the agent's user can read the credential and approve (issue 22)."""

from __future__ import annotations

from pathlib import Path

from pollwarden.simulator import Simulator

from .support import agent_contract, mcp_agent, run

NONE = "none (the agent's user can read the credential and approve)"


def test_same_user_mode_says_it_isolates_nothing(sim: Simulator, tmp_path: Path) -> None:
    contracts, home, stderr = tmp_path / "contracts", tmp_path / "home", tmp_path / "stderr.txt"
    agent_contract(contracts, sim.url)

    async def body() -> None:
        async with mcp_agent(contracts, home, stderr) as agent:
            listed = await agent.call("list_operations")
            assert listed.data["isolation"] == NONE

    run(body)
    said = stderr.read_text(encoding="utf-8")
    assert f"isolation: {NONE}. To keep the credential and approvals from the agent, run `pollwarden broker`" in said
