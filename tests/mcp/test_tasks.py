"""MCP tasks over a real client: a task-augmented call answers at once and the server does the waiting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from pollwarden.mcp_server.tasks import MIN_POLL_MS
from pollwarden.simulator import Simulator, Step

from .support import Agent, agent_contract, cli, mcp_agent, pending_grant, run

CANCEL = """
[cancel]
url = "{base}/jobs/{{job_id}}/cancel"
"""


async def _task_call(agent: Agent, tool: str, **arguments: Any) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments, "task": {"ttl": 60000}}
    return await agent.raw("tools/call", params)


async def _until(agent: Agent, task_id: str, wanted: set[str], seen: list[dict[str, Any]]) -> dict[str, Any]:
    with anyio.fail_after(30):
        while True:
            task = await agent.raw("tasks/get", {"taskId": task_id})
            seen.append(task)
            if task["status"] in wanted:
                return task
            await anyio.sleep(0.05)


def test_a_task_augmented_wait_returns_at_once_and_completes(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    # `slow` answers running for 3 s; checks 100-400 ms apart (bounded jitter) spend the default 12 in as
    # little as 2.1 s, so one run in ten ran out of budget first. 40 checks outlast the job whatever the draws.
    agent_contract(contracts, sim.url, max_requests=40)

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            initialized = agent.session.initialize_result
            assert initialized is not None and initialized.protocol_version == "2025-11-25"
            offered = initialized.capabilities.tasks  # this wire's form of the tasks extension's offer
            assert offered is not None and offered.requests is not None and offered.requests.tools is not None
            assert offered.cancel is not None
            listed = {tool.name: tool for tool in (await agent.session.list_tools()).tools}
            support = {name: tool.execution.task_support if tool.execution else None for name, tool in listed.items()}
            assert support.pop("wait_operation") == support.pop("start_watch") == "optional"
            assert set(support.values()) == {None}  # the others answer only as plain calls
            op = (await agent.call("start_watch", contract="exports", job_id="slow-1")).data["operation_id"]

            created = await _task_call(agent, "wait_operation", operation_id=op, max_wait_seconds=300)
            task = created["task"]
            assert task["taskId"] == op and task["status"] == "working"  # answered before the job could finish
            assert "content" not in created
            assert task["ttl"] == 60_000  # the contract's deadline of 1m, from the operation's creation
            # To the next due check (the contract's delays are 100-400 ms) and the margin for making it, but
            # never sooner than a second: a task is not looked at more often than that.
            assert task["pollInterval"] == MIN_POLL_MS

            seen: list[dict[str, Any]] = []
            try:
                done = await _until(agent, op, {"completed", "failed", "cancelled"}, seen)
            except TimeoutError:  # a hang: what the server said and what the task last showed, to find why
                server_said = (tmp_path / "stderr.txt").read_text(errors="replace")[-4000:]
                raise AssertionError(f"the task never ended; last {seen[-1:]}; server stderr:\n{server_said}") from None
            assert done["status"] == "completed", done
            assert {t["status"] for t in seen[:-1]} <= {"working"}
            assert "checks" in seen[0]["statusMessage"]
            assert "pollInterval" not in done  # nothing is due any more

            result = await agent.raw("tasks/result", {"taskId": op})
            assert result["isError"] is False
            assert result["structuredContent"]["status"] == "succeeded"
            assert json.loads(result["content"][0]["text"])["operation"]["operation_id"] == op
            assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": op}
            assert sim.request_count("slow-1") == result["structuredContent"]["operation"]["status_requests_used"]

            task_list = await agent.raw("tasks/list", {})
            assert [t["taskId"] for t in task_list["tasks"]] == [op]

            with pytest.raises(MCPError) as unknown:
                await agent.raw("tasks/get", {"taskId": "no-such-task"})
            assert unknown.value.error.code == -32602 and "no task" in unknown.value.error.message
            with pytest.raises(MCPError):
                await agent.raw("tasks/cancel", {"taskId": op})  # a finished task has nothing to cancel

            refused = await _task_call(agent, "wait_operation", operation_id="nope", max_wait_seconds=1)
            assert refused["isError"] is True and refused["structuredContent"]["error"] == "unknown_operation"

    run(body)


def test_a_task_augmented_start_watch_and_a_stop_that_needs_a_person(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, max_requests=2)
    sim.add_job("long-7", [Step(body={"state": "running"}, times=1000)])

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            created = await _task_call(agent, "start_watch", contract="exports", job_id="long-7")
            op = created["task"]["taskId"]
            seen: list[dict[str, Any]] = []
            asking = await _until(agent, op, {"input_required", "completed", "failed"}, seen)
            assert asking["status"] == "input_required", asking
            decision = (await agent.call("get_decision", operation_id=op)).data["decision"]
            assert decision["decision_id"] in asking["statusMessage"]
            assert (
                "pollwarden decide" in asking["statusMessage"] and "request_budget_exhausted" in asking["statusMessage"]
            )
            assert sim.request_count("long-7") == 2  # the budget holds: the server's watch sends no more

            # An extension makes the operation active again: the server's watch resumes and spends the new checks.
            extend = next(o for o in decision["options"] if o["kind"] == "extend")
            extended = await cli("decide", decision["decision_id"], "--option", str(extend["number"]), "--by", "alice",
                                 home=home)  # fmt: skip
            assert extended.code == 0, extended.stderr
            with anyio.fail_after(30):
                while sim.request_count("long-7") < 2 + extend["extra_checks"]:
                    await anyio.sleep(0.05)
            again = await _until(agent, op, {"input_required"}, seen)
            decision = (await agent.call("get_decision", operation_id=op)).data["decision"]
            assert decision["decision_id"] in again["statusMessage"]

            close = next(o["number"] for o in decision["options"] if o["kind"] == "close")
            decided = await cli("decide", decision["decision_id"], "--option", str(close), "--by", "alice", home=home)
            assert decided.code == 0, decided.stderr
            ended = await _until(agent, op, {"completed", "failed", "cancelled"}, seen)
            assert ended["status"] == "failed"
            result = await agent.raw("tasks/result", {"taskId": op})
            assert result["structuredContent"]["status"] == "stopped"
            assert result["structuredContent"]["reason"] == "request_budget_exhausted"

    run(body)


def test_tasks_cancel_stops_the_servers_wait_at_once_and_leaves_the_operation_resumable(
    sim: Simulator, tmp_path: Path
) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, agent=CANCEL.format(base=sim.url), base_delay="300ms", max_delay="300ms")
    sim.add_job("long-8", [Step(body={"state": "running"}, times=1000)])

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="long-8")).data["operation_id"]
            await _task_call(agent, "wait_operation", operation_id=op, max_wait_seconds=300)
            asked = await agent.raw("tasks/cancel", {"taskId": op})
            # Cancelled before the answer, as the tasks spec asks; the job itself is nobody's to cancel here.
            assert asked["taskId"] == op and asked["status"] == "cancelled", asked
            assert "pollInterval" not in asked and "the server stopped waiting" in asked["statusMessage"]
            assert (await agent.raw("tasks/get", {"taskId": op}))["status"] == "cancelled"
            with pytest.raises(MCPError) as over:
                await agent.raw("tasks/cancel", {"taskId": op})
            assert "already over" in over.value.error.message
            assert json.loads((await cli("decisions", op, "--all", "--json", home=home)).stdout) == []
            assert not [r for r in sim.requests("long-8") if r.method == "POST"]
            # The operation is as it was: active, with its budget, and a wait resumes it.
            polls = sim.request_count("long-8")
            resumed = await agent.call("wait_operation", operation_id=op, max_wait_seconds=2)
            assert resumed.ok and resumed.data["operation"]["phase"] == "active", resumed.text
            assert sim.request_count("long-8") > polls
            session = (await agent.call("list_operations")).data["session"]
            story = await cli("story", f"@agent/{session}", home=home)
            assert f"the agent cancelled its task on {op}: the server stopped waiting" in story.stdout

    run(body)


def test_hostile_task_requests_are_clear_json_rpc_errors(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url)

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="slow-2")).data["operation_id"]
            for method, params in (
                ("tasks/get", {"taskId": 5}),
                ("tasks/get", {}),
                ("tasks/result", {"taskId": op}),  # an operation, but no task of this session
                ("tasks/cancel", {"taskId": "../../etc"}),
                ("tools/call", {"name": "wait_operation", "arguments": {"operation_id": op}, "task": "soon"}),
            ):
                with pytest.raises(MCPError) as refused:
                    await agent.raw(method, params)
                assert refused.value.error.code == -32602, (method, refused.value.error)
            odd = await _task_call(agent, "start_watch", contract="exports", job_id="slow-3", headers={"X": "1"})
            assert odd["isError"] is True and odd["structuredContent"]["error"] == "invalid_argument"
            assert "headers" in odd["structuredContent"]["message"]
            for arguments in ({"operation_id": 7}, {"operation_id": ["x"]}, {}):
                bad = await _task_call(agent, "wait_operation", **arguments)
                assert bad["isError"] is True, bad
            assert sim.request_count("slow-2") == 0  # none of it reached the provider
            assert (await agent.raw("tasks/list", {}))["tasks"] == []

    run(body)


def test_a_task_waits_for_a_person_to_approve_the_session(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, approval="session")

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            created = await _task_call(agent, "start_watch", contract="exports", job_id="happy-9")
            op = created["task"]["taskId"]
            seen: list[dict[str, Any]] = []
            asking = await _until(agent, op, {"input_required"}, seen)
            assert "approve-session" in asking["statusMessage"]
            assert sim.request_count("happy-9") == 0  # nothing is sent before a person approves
            grant = await pending_grant(home, kind="session")
            approved = await cli("approve-session", grant["grant_id"], "--by", "bob", home=home)
            assert approved.code == 0, approved.stderr
            done = await _until(agent, op, {"completed", "failed", "cancelled"}, seen)
            assert done["status"] == "completed", done
            assert sim.request_count("happy-9") == 4

    run(body)
