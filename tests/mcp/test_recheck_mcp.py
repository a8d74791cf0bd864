"""An agent's watch refused by the provider (a wrong key): the decision a person sees offers one check with the
credential configured now; once the key is fixed where the server reads it, the agent's next wait sends that one
check and the watch goes on. The agent itself can ask for nothing more (R27, R30)."""

from __future__ import annotations

from pathlib import Path

from pollwarden.simulator import Simulator, Step

from .support import SECRET_ENV, agent_contract, cli, mcp_agent, run


def test_a_key_fixed_after_a_401_is_checked_once_by_the_agents_next_wait(
    guarded: Simulator, secret: str, tmp_path: Path
) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, guarded.url, secret_env=SECRET_ENV)
    guarded.add_job("mcp-401", [Step(body={"state": "succeeded", "result_url": "/r/mcp"})])

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr-1.txt", env={SECRET_ENV: "pw-wrong-4d"}) as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="mcp-401")).data["operation_id"]
            stopped = await agent.call("wait_operation", operation_id=op, max_wait_seconds=20)
            assert stopped.data["status"] == "stopped" and stopped.data["reason"] == "authorization_denied"
            options = stopped.data["decision"]["options"]
            assert (options[0]["kind"], options[0]["label"]) == (
                "recheck",
                "check once with the credential configured now",
            ), options
            asked = await agent.call("request_extension", operation_id=op, minutes=5, checks=1, reason="retry")
            assert asked.error == "not_extendable", asked.text
            assert "check once with the credential configured now" in asked.data["message"]
            decision = stopped.data["decision"]["decision_id"]
        assert guarded.request_count("mcp-401") == 1
        decided = await cli("decide", decision, "--option", "1", "--by", "carol", home=home)
        assert decided.code == 0 and guarded.request_count("mcp-401") == 1, decided.stdout + decided.stderr
        async with mcp_agent(contracts, home, tmp_path / "stderr-2.txt", env={SECRET_ENV: secret}) as agent:
            done = await agent.call("wait_operation", operation_id=op, max_wait_seconds=20)
            assert done.data["status"] == "succeeded", done.text
        assert guarded.request_count("mcp-401") == 2

    run(body)
