"""The broker's push receiver (issue 27: `pollwarden broker --hooks-port`): a watch an agent started through the
broker, asleep for ten minutes by its schedule, is checked at once when its provider posts a signed push to the
broker's `/hooks/{contract}`; the webhook secret comes from the broker's `--secrets` file, and a forged push is
401 and changes nothing."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from pollwarden.simulator import Simulator, Step
from pollwarden.simulator.push import forged, signed_push
from tests.loopback import post
from tests.mcp.support import agent_contract, run

from .users import Broker, Place, Users, shim_agent

HOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
HOOK_ENV = "EXPORTS_HOOK"
PUSH = f'\n[push]\nkind = "standard-webhooks"\nsecret_env = "{HOOK_ENV}"\njob_id = "data.id"\n'
BOUND = 60.0
"""Seconds allowed for a state another process reaches: only a guard against a hang, never a measure."""


def pushes_url(broker: Broker) -> str:
    """The receiver's base URL, as the broker's `serving` line tells it (it chose the port: `--hooks-port 0`)."""
    found = re.search(r"; pushes on (http://\S+)/hooks/CONTRACT", broker.text())
    assert found is not None, broker.text()[-2000:]
    return found.group(1)


async def requests_reach(provider: Simulator, job_id: str, count: int) -> None:
    ends = time.monotonic() + BOUND
    while provider.request_count(job_id) < count:
        assert time.monotonic() < ends, f"the provider never saw status request {count} for {job_id}"
        await anyio.sleep(0.02)


def test_a_signed_push_to_the_brokers_hooks_port_checks_an_agents_watch_at_once(
    users: Users, place: Place, start: Callable[..., Broker], guarded: Simulator, tmp_path: Path
) -> None:
    # `exports` with a schedule that would not look again for ten minutes, and a [push] table.
    agent_contract(place.contracts, guarded.url, base_delay="10m", max_delay="10m", deadline="1h",
                   secret_env="PW_BROKER_TEST_TOKEN", agent=PUSH)  # fmt: skip
    with place.secrets.open("a", encoding="utf-8") as secrets_file:
        secrets_file.write(f"{HOOK_ENV}={HOOK_SECRET}\n")
    broker = start("--hooks-port", "0")
    hooks = pushes_url(broker)
    guarded.add_job("exp-1", [Step(body={"state": "running"}), Step(body={"state": "succeeded", "result_url": "/r/1"})])
    operation = ""

    async def body() -> None:
        nonlocal operation
        async with shim_agent(users, place.socket, tmp_path / "shim.err") as agent:
            started = await agent.call("start_watch", contract="exports", job_id="exp-1")
            assert started.ok, started.data
            operation = started.data["operation_id"]
            waited: dict[str, object] = {}

            async def wait() -> None:  # the MCP wait makes the checks: the first at once, then a ten-minute pause
                waited.update((await agent.call("wait_operation", operation_id=operation, max_wait_seconds=40)).data)

            async with anyio.create_task_group() as waiting:
                waiting.start_soon(wait)
                await requests_reach(guarded, "exp-1", 1)
                headers, push = signed_push(HOOK_SECRET, "exp-1", "msg_forged")
                headers["webhook-signature"] = forged(headers["webhook-signature"])
                assert await anyio.to_thread.run_sync(post, f"{hooks}/hooks/exports", headers, push) == 401
                signed = signed_push(HOOK_SECRET, "exp-1", "msg_2Kx9broker")
                assert await anyio.to_thread.run_sync(post, f"{hooks}/hooks/exports", *signed) == 202
                await requests_reach(guarded, "exp-1", 2)  # due `[push] min_interval` (1 s) after the first answer
            assert waited["status"] == "succeeded", waited

    run(body)
    assert guarded.request_count("exp-1") == 2  # the forged push woke nothing: the signed one caused the second
    story = users.run(users.approver, "story", operation, "--json", "--connect", str(place.socket))
    assert story.returncode == 0, story.stderr
    events = json.loads(story.stdout)
    woken = [e for e in events if e["kind"] == "woken_by_push"]
    assert len(woken) == 1, events
    assert "msg_2Kx9broker" in json.dumps(woken[0]) and "msg_forged" not in story.stdout
    assert HOOK_SECRET not in broker.text() + story.stdout + (tmp_path / "shim.err").read_text()
