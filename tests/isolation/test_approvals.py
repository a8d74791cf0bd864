"""Who may decide and approve: an approver, by the kernel's word, never the agent however it asks (issue 22)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pollwarden.simulator import Simulator, Step
from tests.mcp.support import run

from .users import Broker, Place, Users, shim_agent


def _stopped_for_a_decision(users: Users, place: Place, tmp_path: Path) -> tuple[str, str]:
    """An agent's operation stopped on its budget (2 requests), with its open decision: (operation, decision)."""
    found: dict[str, str] = {}

    async def body() -> None:
        async with shim_agent(users, place.socket, tmp_path / "shim.err") as agent:
            started = await agent.call("start_watch", contract="exports", job_id="slow-1", max_requests=2)
            op = started.data["operation_id"]
            stopped = await agent.call("wait_operation", operation_id=op, max_wait_seconds=30)
            assert stopped.data["status"] == "stopped", stopped.data
            found.update(operation=op, decision=stopped.data["decision"]["decision_id"])

    run(body)
    return found["operation"], found["decision"]


def test_only_an_approver_decides_and_the_record_names_them(
    users: Users, place: Place, start: Callable[..., Broker], guarded: Simulator, tmp_path: Path
) -> None:
    start()
    guarded.add_job("slow-1", [Step(body={"state": "running"})])
    operation, decision = _stopped_for_a_decision(users, place, tmp_path)
    sock = str(place.socket)

    # The agent's own attempts: through the broker (refused, recorded), and around it (its files are not theirs).
    for words in (
        ["decide", decision, "--option", "1"],
        ["decide", decision, "--option", "1", "--by", users.approver],
        ["approve-call", "c0123456789", "--by", users.approver],
        ["approve-session", "s0123456789"],
        ["revoke-session", "s0123456789"],
    ):
        tried = users.run(users.agent, *words, "--connect", sock)
        assert tried.returncode == 2, (words, tried.stdout, tried.stderr)
        assert f"refused: {users.agent} (uid {users.uid(users.agent)}) is an agent of this broker" in tried.stderr
    around = users.run(
        users.agent, "decide", decision, "--option", "1", "--by", users.approver, "--home", str(place.home)
    )
    assert around.returncode == 2 and "Permission denied" in around.stderr, around.stderr

    listed = users.run(users.approver, "decisions", "--json", "--connect", sock)
    assert listed.returncode == 0, listed.stderr
    assert [d["decision_id"] for d in json.loads(listed.stdout)] == [decision]  # still open: nothing changed

    other = users.run(users.approver, "decide", decision, "--option", "1", "--by", "someone-else", "--connect", sock)
    assert other.returncode == 2 and "is not you" in other.stderr, other.stderr
    decided = users.run(users.approver, "decide", decision, "--option", "1", "--connect", sock)
    assert decided.returncode == 0, decided.stderr
    assert json.loads(users.run(users.approver, "decisions", "--json", "--connect", sock).stdout) == []
    every = json.loads(users.run(users.approver, "decisions", operation, "--all", "--json", "--connect", sock).stdout)
    assert [d.get("decided_by") for d in every] == [users.approver], every

    trail = users.run(users.approver, "story", "@broker", "--connect", sock)
    agent_uid = users.uid(users.agent)
    assert trail.stdout.count(f"refused to {users.agent} (uid {agent_uid}, pid ") == 5, trail.stdout
    assert f"{users.approver} (uid {users.uid(users.approver)}, pid " in trail.stdout
    assert f"ran decide {decision} through the broker (exit 0)" in trail.stdout
    story = users.run(users.approver, "story", operation, "--connect", sock)
    assert users.approver in story.stdout, story.stdout


def test_a_per_call_approval_is_given_by_an_approver_and_lets_the_next_call_through(
    users: Users, place: Place, start: Callable[..., Broker], guarded: Simulator, tmp_path: Path
) -> None:
    start(POLLWARDEN_MCP_WAIT_WITHOUT_PROGRESS_SECONDS="1")
    guarded.add_job("pc-1", [Step(body={"state": "succeeded", "result_url": "/results/pc-1"})])
    sock = str(place.socket)
    grant = ""

    async def body() -> None:
        nonlocal grant
        async with shim_agent(users, place.socket, tmp_path / "shim.err") as agent:
            op = (await agent.call("start_watch", contract="guarded", job_id="pc-1")).data["operation_id"]
            waiting = await agent.call("wait_operation", operation_id=op, max_wait_seconds=1)
            assert waiting.data.get("waiting_for") == "approval", waiting.data
            grant = waiting.data["grant_id"]
            assert guarded.requests("pc-1") == []
            tried = users.run(users.agent, "approve-call", grant, "--connect", sock)
            assert tried.returncode == 2, tried.stderr
            pending = json.loads(users.run(users.approver, "approvals", "--json", "--connect", sock).stdout)
            assert [g["grant_id"] for g in pending] == [grant]
            approved = users.run(users.approver, "approve-call", grant, "--connect", sock)
            assert approved.returncode == 0, approved.stderr
            done = await agent.call("wait_operation", operation_id=op, max_wait_seconds=1)
            assert done.data["status"] == "succeeded", done.data

    run(body)
    assert len(guarded.requests("pc-1")) == 1
    every = json.loads(users.run(users.approver, "approvals", "--all", "--json", "--connect", sock).stdout)
    assert [(g["grant_id"], g["status"], g["decided_by"]) for g in every] == [(grant, "approved", users.approver)]


def test_only_an_approver_closes_ended_jobs_decisions_in_bulk_and_as_themselves(
    users: Users, place: Place, start: Callable[..., Broker], guarded: Simulator, tmp_path: Path
) -> None:
    """`decisions close` is a person's answer like `decide` (issue 28): the agent is refused, an approver's --by must
    be their own name, and each closed decision names them."""
    start()
    guarded.add_job(
        "slow-1", [Step(body={"state": "failed", "error": "health check failed: 3/5 pods CrashLoopBackOff"})]
    )
    operation, decision = _stopped_for_a_decision(users, place, tmp_path)
    sock = str(place.socket)
    for words in (["decisions", "close"], ["decisions", "close", "--by", users.approver]):
        tried = users.run(users.agent, *words, "--connect", sock)
        assert tried.returncode == 2, (words, tried.stdout, tried.stderr)
        assert f"refused: {users.agent} (uid {users.uid(users.agent)}) is an agent of this broker" in tried.stderr
    other = users.run(users.approver, "decisions", "close", "--by", "someone-else", "--connect", sock)
    assert other.returncode == 2 and "is not you" in other.stderr, other.stderr
    listed = json.loads(users.run(users.approver, "decisions", "--json", "--connect", sock).stdout)
    assert [(d["decision_id"], d["provider_error"]) for d in listed] == [
        (decision, "health check failed: 3/5 pods CrashLoopBackOff")
    ]
    closed = users.run(users.approver, "decisions", "close", "--json", "--connect", sock)
    assert closed.returncode == 0, closed.stderr
    assert json.loads(closed.stdout)["closed"] == 1
    every = json.loads(users.run(users.approver, "decisions", operation, "--all", "--json", "--connect", sock).stdout)
    assert [(d["status"], d.get("decided_by")) for d in every] == [("decided", users.approver)], every
    trail = users.run(users.approver, "story", "@broker", "--connect", sock)
    assert trail.stdout.count(f"refused to {users.agent} (uid {users.uid(users.agent)}, pid ") == 2, trail.stdout
