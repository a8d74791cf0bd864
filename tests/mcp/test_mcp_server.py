"""The MCP server driven by a real MCP client over stdio: the tools an agent sees and what each one may do."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import anyio

from pollwarden.simulator import Simulator, Step

from .support import TOOLS, Reply, agent_contract, cli, mcp_agent, pending_grant, run


def test_tools_then_a_full_watch_to_success_and_the_result(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url)

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            listed = await agent.session.list_tools()
            assert {tool.name for tool in listed.tools} == TOOLS
            assert len(listed.tools) == len(TOOLS)

            early = await agent.call("fetch_result", operation_id="nope")
            assert early.error == "unknown_operation"

            started = await agent.call("start_watch", contract="exports", job_id="happy-1")
            assert started.ok, started.text
            op = started.data["operation_id"]
            assert started.data["max_status_requests"] == 12
            refused = await agent.call("fetch_result", operation_id=op)
            assert refused.error == "no_result"  # nothing to fetch before a validated success
            assert sim.request_count("happy-1") == 0  # start_watch itself sends nothing

            done = await agent.call("wait_operation", operation_id=op, max_wait_seconds=30)
            assert done.ok, done.text
            assert done.data["status"] == "succeeded"
            assert done.data["result"] == "/results/happy-1"
            assert done.data["operation"]["status_requests_used"] == sim.request_count("happy-1") == 4

            fetched = await agent.call("fetch_result", operation_id=op)
            assert fetched.ok, fetched.text
            assert json.loads(fetched.data["text"]) == {"job_id": "happy-1", "data": "result of happy-1"}
            assert re.fullmatch(r"[0-9a-f]{64}", fetched.data["sha256"])

            listing = await agent.call("list_operations")
            assert [o["operation_id"] for o in listing.data["operations"]] == [op]
            assert listing.data["contracts"]["exports"]["approval"] == "none"

            again = await agent.call("check_operation", operation_id=op)
            assert again.data["status"] == "succeeded"
            assert sim.request_count("happy-1") == 4  # a finished operation is never polled again

        story = await cli("story", op, "--json", home=home)
        assert story.code == 0, story.stderr
        kinds = [e["kind"] for e in json.loads(story.stdout)]
        assert kinds[0] == "created" and "succeeded" in kinds and kinds[-1] == "action"

    run(body)


def test_check_operation_says_not_yet_without_a_provider_request(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, base_delay="3s", max_delay="5s")

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="happy-2")).data["operation_id"]
            first = await agent.call("check_operation", operation_id=op)
            assert first.data["status"] == "polled" and first.data["state"] == "queued"
            assert sim.request_count("happy-2") == 1
            for _ in range(8):  # an agent in a tight loop
                reply = await agent.call("check_operation", operation_id=op)
                assert reply.ok and reply.data["status"] == "not_yet", reply.text
                assert reply.data["retry_after_seconds"] > 0
                await agent.call("list_operations")
                await agent.call("get_decision", operation_id=op)
            assert sim.request_count("happy-2") == 1  # the provider saw only the planned request

            short = await agent.call("wait_operation", operation_id=op, max_wait_seconds=0.3)
            assert short.data["status"] == "not_yet" and short.data["wait_ended"] is True
            assert sim.request_count("happy-2") == 1

    run(body)


def _per_call_contracts(directory: Path, base_url: str) -> None:
    for name, timeout in (("patient", "20s"), ("hasty", "1s")):
        table = f'[agent]\napproval_timeout = "{timeout}"\n'
        agent_contract(directory, base_url, name=name, approval="per_call", agent=table)


def test_per_call_approval_granted_by_a_person_while_the_call_waits(sim: Simulator, tmp_path: Path) -> None:
    # R42, R48: a per-call contract needs a person's approval of each provider call.
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    _per_call_contracts(contracts, sim.url)
    sim.add_job("one-shot", [Step(body={"state": "succeeded", "result_url": "/results/one-shot"})])

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            op = (await agent.call("start_watch", contract="patient", job_id="one-shot")).data["operation_id"]
            replies: dict[str, Reply] = {}

            async def call(tool: str) -> None:
                replies[tool] = await agent.call(tool, operation_id=op)

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "check_operation")
                grant = await pending_grant(home, kind="call", scope=op)
                assert grant["detail"]["purpose"] == "status_request"
                assert grant["detail"]["status_request"] == 1
                assert sim.request_count("one-shot") == 0  # nothing is sent while a person has not answered
                approved = await cli("approve-call", grant["grant_id"], "--by", "bob", home=home)
                assert approved.code == 0, approved.stderr
            checked = replies["check_operation"]
            assert checked.ok and checked.data["status"] == "succeeded", checked.text
            assert sim.request_count("one-shot") == 1

            async with anyio.create_task_group() as tg:  # fetching the result is a provider call too
                tg.start_soon(call, "fetch_result")
                grant = await pending_grant(home, kind="call", scope=op)
                assert grant["detail"]["purpose"] == "fetch_result"
                assert (await cli("approve-call", grant["grant_id"], "--by", "bob", home=home)).code == 0
            assert replies["fetch_result"].ok and replies["fetch_result"].data["status"] == "fetched"

            twice = await cli("approve-call", grant["grant_id"], "--by", "eve", home=home)
            assert twice.code == 2 and "approved by bob" in twice.stderr

    run(body)


def test_per_call_refused_and_timed_out_never_fail_open(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    _per_call_contracts(contracts, sim.url)

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            op = (await agent.call("start_watch", contract="patient", job_id="happy-3")).data["operation_id"]
            replies: dict[str, Reply] = {}

            async def check() -> None:
                replies["refused"] = await agent.call("check_operation", operation_id=op)

            async with anyio.create_task_group() as tg:
                tg.start_soon(check)
                grant = await pending_grant(home, kind="call", scope=op)
                refused = await cli("approve-call", grant["grant_id"], "--refuse", "--by", "bob", home=home)
                assert refused.code == 0, refused.stderr
            assert replies["refused"].error == "approval_refused"
            assert replies["refused"].data["grant_id"] == grant["grant_id"]
            assert replies["refused"].data["refused_by"] == "bob"

            hasty = (await agent.call("start_watch", contract="hasty", job_id="happy-4")).data["operation_id"]
            started = time.monotonic()
            timed_out = await agent.call("wait_operation", operation_id=hasty, max_wait_seconds=300)
            # The error itself says the 1 s approval timeout ended the wait (the cap, 45 s here, would answer
            # not_yet), so no upper bound in seconds (a loaded machine may stretch the 1 s): it cannot come before
            # that second.
            assert timed_out.error == "approval_timeout", timed_out.text
            assert time.monotonic() - started > 0.9
            assert sim.request_count("happy-3") == sim.request_count("happy-4") == 0

            answered = await cli("approvals", "--all", "--json", home=home)
            statuses = {g["grant_id"]: g["status"] for g in json.loads(answered.stdout)}
            assert statuses[grant["grant_id"]] == "refused"
            assert statuses[timed_out.data["grant_id"]] == "expired"
            late = await cli("approve-call", timed_out.data["grant_id"], "--by", "bob", home=home)
            assert late.code == 2 and "expired" in late.stderr  # a late yes changes nothing
            assert (await cli("approvals", "--json", home=home)).stdout.strip() == "[]"

    run(body)


def test_session_approval_is_needed_once_and_revocation_takes_it_back(sim: Simulator, tmp_path: Path) -> None:
    # R42, R48: a session approval covers low-risk calls until revoked.
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, approval="session", base_delay="100ms", max_delay="200ms")

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="never-1")).data["operation_id"]
            first = await agent.call("check_operation", operation_id=op)
            assert first.error == "approval_required", first.text
            grant_id = first.data["grant_id"]
            assert f"pollwarden approve-session {grant_id}" in first.data["approve_with"]
            again = await agent.call("wait_operation", operation_id=op, max_wait_seconds=5)
            assert again.error == "approval_required" and again.data["grant_id"] == grant_id  # one request, not many
            assert sim.request_count("never-1") == 0

            listed = json.loads((await cli("approvals", "--json", home=home)).stdout)
            assert [(g["grant_id"], g["kind"], g["scope"]) for g in listed] == [(grant_id, "session", "exports")]
            ok = await cli("approve-session", grant_id, "--by", "alice", home=home)
            assert ok.code == 0, ok.stderr

            polled = await agent.call("check_operation", operation_id=op)
            assert polled.ok and polled.data["status"] == "polled", polled.text
            waited = await agent.call("wait_operation", operation_id=op, max_wait_seconds=0.6)
            assert waited.ok and waited.data["status"] == "not_yet"
            # Routine polls inside the approved session need no further click (R40): looking again until the
            # next poll (100-200 ms away) went out, no call is refused. Waiting for that fact, not for 0.6 s to
            # have held one: a loaded machine may stall the server for longer.
            with anyio.fail_after(60):
                while sim.request_count("never-1") < 2:
                    again = await agent.call("check_operation", operation_id=op)
                    assert again.ok and again.data["status"] in ("polled", "not_yet"), again.text
                    await anyio.sleep(0.05)
            seen = sim.request_count("never-1")

            revoked = await cli("revoke-session", grant_id, "--by", "alice", home=home)
            assert revoked.code == 0, revoked.stderr
            await anyio.sleep(0.3)  # let the next poll fall due
            after = await agent.call("check_operation", operation_id=op)
            assert after.error == "approval_required"
            assert after.data["grant_id"] != grant_id  # later calls need a new approval
            assert sim.request_count("never-1") == seen
            reuse = await cli("approve-session", grant_id, "--by", "alice", home=home)
            assert reuse.code == 2 and "revoked" in reuse.stderr

    run(body)


def test_an_agent_may_ask_for_less_never_more(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, deadline="10m", agent='[agent]\nmax_deadline = "5m"\nmax_requests = 4\n')

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            longer = await agent.call("start_watch", contract="exports", job_id="happy-5", deadline="6m")
            assert longer.error == "limit_exceeded" and longer.data["limit"] == "[agent].max_deadline"
            assert "[agent].max_deadline" in longer.data["message"]
            more = await agent.call("start_watch", contract="exports", job_id="happy-5", max_requests=5)
            assert more.error == "limit_exceeded" and "[agent].max_requests" in more.data["message"]
            vague = await agent.call("start_watch", contract="exports", job_id="happy-5", deadline="soon")
            assert vague.error == "invalid_argument"
            assert (await agent.call("list_operations")).data["operations"] == []  # nothing was created

            default = await agent.call("start_watch", contract="exports", job_id="happy-5")
            assert default.data["max_status_requests"] == 4  # the most an agent may have, not [limits]'s 12
            less = await agent.call("start_watch", contract="exports", job_id="happy-6", deadline="2m", max_requests=2)
            assert less.ok and less.data["max_status_requests"] == 2
            assert sim.request_count("happy-5") == sim.request_count("happy-6") == 0

    run(body)


def test_request_extension_asks_a_person_who_alone_can_grant_it(sim: Simulator, tmp_path: Path) -> None:
    # R41, R43: an extension is a request a person grants, never the agent.
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, base_delay="50ms", max_delay="100ms")

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            active = (await agent.call("start_watch", contract="exports", job_id="happy-7")).data["operation_id"]
            early = await agent.call("request_extension", operation_id=active, minutes=5, checks=2, reason="slow")
            assert early.error == "not_stopped"

            op = (await agent.call("start_watch", contract="exports", job_id="never-2", max_requests=2)).data[
                "operation_id"
            ]
            stopped = await agent.call("wait_operation", operation_id=op, max_wait_seconds=20)
            assert stopped.data["status"] == "stopped" and stopped.data["reason"] == "request_budget_exhausted"
            assert stopped.data["decision"] is not None
            assert sim.request_count("never-2") == 2

            opened = stopped.data["decision"]["decision_id"]
            asked = await agent.call(
                "request_extension", operation_id=op, minutes=10, checks=3, reason="the export is large today"
            )
            assert asked.ok, asked.text
            decision = asked.data["decision"]
            # Added to the decision the stop opened, not a second one beside it.
            assert decision["decision_id"] == opened and decision["status"] == "open", asked.text
            assert asked.data["attached"] is True
            (attached,) = decision["agent_requests"]
            assert (attached["minutes"], attached["checks"], attached["reason"]) == (10, 3, "the export is large today")
            assert attached["requested_by"].startswith("agent session ")
            repeat = await agent.call("request_extension", operation_id=op, minutes=60, checks=9, reason="again")
            assert repeat.ok and repeat.data["already_requested"] is True, repeat.text
            assert repeat.data["decision"]["decision_id"] == opened
            assert [r["reason"] for r in repeat.data["decision"]["agent_requests"]] == ["the export is large today"]

            every = json.loads((await cli("decisions", op, "--all", "--json", home=home)).stdout)
            assert [d["decision_id"] for d in every] == [opened], every
            story = await cli("story", op, home=home)
            assert story.stdout.count("the agent asked for more time") == 1, story.stdout
            assert f"the agent asked for more time for {op}: the export is large today" in story.stdout
            session = (await agent.call("list_operations")).data["session"]
            trail = json.loads((await cli("story", f"@agent/{session}", "--json", home=home)).stdout)
            asked_events = [e for e in trail if e["kind"] == "extension_requested"]
            assert len(asked_events) == 1 and asked_events[0]["data"]["decision_id"] == opened, asked_events
            decision = {**decision, "options": stopped.data["decision"]["options"]}

            # The agent has no tool to grant it, and asking again or polling changes nothing.
            names = {tool.name for tool in (await agent.session.list_tools()).tools}
            assert not names & {"decide", "approve", "approve_call", "approve_session", "extend"}
            sneaky = await agent.call("decide", decision=decision["decision_id"], option=1)
            assert not sneaky.ok
            assert (await agent.call("check_operation", operation_id=op)).data["status"] == "stopped"
            shown = await agent.call("get_decision", operation_id=op)
            assert shown.data["decision"]["decision_id"] == decision["decision_id"]
            assert sim.request_count("never-2") == 2

            granted = await cli("decide", decision["decision_id"], "--option", "1", "--by", "carol", home=home)
            assert granted.code == 0, granted.stderr
            resumed = await agent.call("wait_operation", operation_id=op, max_wait_seconds=20)
            assert resumed.data["status"] == "stopped" and resumed.data["reason"] == "request_budget_exhausted"
            granted_checks = decision["options"][0]["extra_checks"]
            assert decision["options"][0]["kind"] == "extend"
            assert sim.request_count("never-2") == 2 + granted_checks  # exactly the checks a person granted
            history = (await agent.call("get_decision", operation_id=op)).data["history"]
            assert {"decision_id": decision["decision_id"], "status": "decided", "decided_by": "carol"}.items() <= {
                k: v for h in history if h["decision_id"] == decision["decision_id"] for k, v in h.items()
            }.items()

    run(body)


def test_list_operations_names_the_contract_files_that_are_not_served(sim: Simulator, tmp_path: Path) -> None:
    """A contract the server could not load used to show only on the server's stderr; the agent now sees why."""
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url)
    (contracts / "broken.toml").write_text('name = "broken"\nstatus_url = 42\n', encoding="utf-8")

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            listed = await agent.call("list_operations")
            assert listed.ok, listed.text
            assert list(listed.data["contracts"]) == ["exports"]
            (problem,) = listed.data["contracts_not_served"]
            assert "broken.toml" in problem["problem"] and "status_url" in problem["problem"]
            assert "restart `pollwarden mcp`" in problem["fix"]

    run(body)
