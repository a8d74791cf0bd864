"""Every decision request an agent's tool makes reaches the contract's webhook, through the one outbox path: the
store queues the delivery in the transaction that writes the request, and the MCP server delivers it."""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from pollwarden.simulator import Simulator
from tests.loopback import Answer, Loopback, serving

from .support import agent_contract, cli, mcp_agent, run

SECRET = {"PW_HOOK_SECRET": "hook-secret-extension"}


def _decisions_told(hook: Loopback) -> list[str]:
    return [json.loads(seen.body)["decision"]["decision_id"] for seen in hook.seen if seen.path == "/hook"]


def test_an_agents_extension_request_that_opens_a_decision_is_sent_to_the_webhook(
    sim: Simulator, tmp_path: Path
) -> None:
    """The finding: `request_extension` wrote a new decision request and never sent the webhook that
    `request_cancel` sent (each tool announced, or forgot to, on its own)."""
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    with serving({("POST", "/hook"): Answer(204)}) as hook:
        webhook = f'\n[escalation]\nwebhook_url = "{hook.url}/hook"\nwebhook_secret_env = "PW_HOOK_SECRET"\n'
        agent_contract(contracts, sim.url, agent=webhook, base_delay="50ms", max_delay="100ms")

        async def body() -> None:
            async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env=SECRET) as agent:
                op = (await agent.call("start_watch", contract="exports", job_id="never-2", max_requests=2)).data[
                    "operation_id"
                ]
                stopped = await agent.call("wait_operation", operation_id=op, max_wait_seconds=20)
                assert stopped.data["status"] == "stopped", stopped.text
                first = stopped.data["decision"]["decision_id"]
                refused = await cli("decide", first, "--refuse", "--by", "alice", home=home)
                assert refused.code == 0, refused.stderr
                asked = await agent.call("request_extension", operation_id=op, minutes=10, checks=3, reason="large")
                assert asked.ok and asked.data["attached"] is False, asked.text
                second = asked.data["decision"]["decision_id"]
                with anyio.fail_after(30):  # a guard, not a pace: the server delivers as soon as it commits
                    while second not in _decisions_told(hook):
                        await anyio.sleep(0.02)
                assert _decisions_told(hook) == [first, second]
                story = (await cli("story", op, home=home)).stdout
                assert f"webhook for {second} sent after 1 attempt" in story, story

        run(body)
