"""An agent's MCP session through the shim, as the agent user: same tools, same replies, the credential the
broker's (issue 22: `pollwarden mcp --connect`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio

from pollwarden.simulator import Simulator, Step
from tests.mcp.support import Note, run

from .users import Broker, Place, Users, shim_agent


def test_an_agent_session_through_the_shim_reaches_a_success(
    users: Users, place: Place, start: Callable[..., Broker], guarded: Simulator, secret: str, tmp_path: Path
) -> None:
    start()
    guarded.add_job(
        "exp-1", [Step(body={"state": "running"}), Step(body={"state": "succeeded", "result_url": "/results/exp-1"})]
    )
    session = ""

    async def body() -> None:
        nonlocal session
        async with shim_agent(users, place.socket, tmp_path / "shim.err") as agent:
            listed = await agent.call("list_operations")
            assert listed.ok, listed.data
            assert listed.data["isolation"].startswith(f"broker (the agent is {users.agent}, uid")
            session = listed.data["session"]
            started = await agent.call("start_watch", contract="exports", job_id="exp-1")
            assert started.ok, started.data
            waited = await agent.call("wait_operation", operation_id=started.data["operation_id"], max_wait_seconds=30)
            assert waited.data["status"] == "succeeded", waited.data
            for _, _, reply in agent.replies:
                assert secret not in reply.text

    run(body)
    assert len(guarded.requests("exp-1")) == 2  # it answers only to the credential: the provider saw it
    story = users.run(users.approver, "story", f"@agent/{session}", "--connect", str(place.socket))
    assert story.returncode == 0, story.stderr
    uid = users.uid(users.agent)
    assert f"agent {users.agent} (uid {uid}, pid " in story.stdout
    assert "call 1: status_request" in story.stdout
    assert secret not in story.stdout + (tmp_path / "shim.err").read_text()


def test_progress_and_tasks_pass_through_the_shim(
    users: Users, place: Place, start: Callable[..., Broker], guarded: Simulator, tmp_path: Path
) -> None:
    start()
    done = [Step(body={"state": "running"}), Step(body={"state": "succeeded", "result_url": "/results/r"})]
    guarded.add_job("prog-1", done)
    guarded.add_job("task-1", done)

    async def body() -> None:
        async with shim_agent(users, place.socket, tmp_path / "shim.err") as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="prog-1")).data["operation_id"]
            notes: list[Note] = []
            waited = await agent.call_reporting("wait_operation", notes, operation_id=op, max_wait_seconds=30)
            assert waited.data["status"] == "succeeded", waited.data
            assert notes and all(n.message for n in notes)
            assert [n.progress for n in notes] == sorted({n.progress for n in notes})  # growing, as sent
            created = await agent.raw(
                "tools/call",
                {"name": "start_watch", "arguments": {"contract": "exports", "job_id": "task-1"}, "task": {"ttl": 1}},
            )
            task_id = created["task"]["taskId"]
            with anyio.fail_after(60):
                while (await agent.raw("tasks/get", {"taskId": task_id}))["status"] != "completed":
                    await anyio.sleep(0.05)
            result = await agent.raw("tasks/result", {"taskId": task_id})
            assert result["structuredContent"]["status"] == "succeeded", result

    run(body)
    assert len(guarded.requests("task-1")) == 2
