"""Waits that agent hosts do not cut (issue 22): every call that waits for a person answers within the host's
bound, a cut call leaves its approval open, each poll is one progress note, and arguments are checked as JSON."""

from __future__ import annotations

from pathlib import Path

import anyio

from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator, Step

from .support import Note, agent_contract, cli, mcp_agent, pending_grant, run

QUICK = {"POLLWARDEN_MCP_WAIT_WITHOUT_PROGRESS_SECONDS": "1"}
"""The bound of a call without a progress token: this (instead of 45 s) plus the 5 s margin."""
PER_CALL = '[agent]\napproval_timeout = "10m"\n'


def _grant_status(home: Path, grant_id: str) -> str:
    store = open_store(home, keys="none")
    try:
        grant = store.get_grant(grant_id)
    finally:
        store.close()
    assert grant is not None
    return grant.status


def test_a_check_waiting_for_a_person_answers_within_the_bound_and_asks_nobody_twice(
    sim: Simulator, tmp_path: Path
) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, approval="per_call", agent=PER_CALL)
    sim.add_job("pend-1", [Step(body={"state": "running"})])

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env=QUICK) as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="pend-1")).data["operation_id"]
            first = await agent.call("check_operation", operation_id=op)
            # Without the bound it would wait the contract's 10 minutes for the person: the test would time out.
            assert first.error == "approval_pending", first.text
            grant = first.data["grant_id"]
            assert first.data["approve_with"] == f"pollwarden approve-call {grant} --by NAME (or --refuse)"
            assert "Calling again is free" in first.data["message"]
            again = await agent.call("check_operation", operation_id=op)
            assert again.error == "approval_pending" and again.data["grant_id"] == grant
            listed = await cli("approvals", "--json", home=home)
            assert listed.stdout.count('"grant_id"') == 1, listed.stdout  # one question for the person
            assert sim.request_count("pend-1") == 0

    run(body)


def test_an_approval_given_after_the_host_cut_the_call_lets_the_next_call_through(
    sim: Simulator, tmp_path: Path
) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, approval="per_call", agent=PER_CALL)
    sim.add_job("cut-1", [Step(body={"state": "succeeded", "result_url": "/results/cut-1"})])

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="cut-1")).data["operation_id"]
            notes: list[Note] = []
            with anyio.CancelScope() as host:  # the host gives up on the call, as at 60 s (notifications/cancelled)

                async def cut_when_asked() -> None:
                    await pending_grant(home, kind="call", scope=op)
                    host.cancel()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(cut_when_asked)
                    await agent.call_reporting("check_operation", notes, operation_id=op)
            grant = (await pending_grant(home, kind="call", scope=op))["grant_id"]
            assert _grant_status(home, grant) == "pending"  # the cut did not expire it
            assert (await cli("approve-call", grant, "--by", "bob", home=home)).code == 0
            done = await agent.call("check_operation", operation_id=op)
            for _ in range(100):  # the cut call the server had not yet heard of may be sending right now
                if done.data.get("status") != "busy":
                    break
                await anyio.sleep(float(done.data["retry_after_seconds"]))  # as the answer says: look again
                done = await agent.call("check_operation", operation_id=op)
            assert done.ok and done.data["status"] == "succeeded", done.text
            assert sim.request_count("cut-1") == 1

    run(body)


def test_each_poll_of_a_wait_sends_one_progress_note(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, base_delay="50ms", max_delay="100ms")
    sim.add_job(
        "notes-1", [Step(body={"state": "running"}, times=3), Step(body={"state": "succeeded", "result_url": "/r"})]
    )

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="notes-1")).data["operation_id"]
            notes: list[Note] = []
            waited = await agent.call_reporting("wait_operation", notes, operation_id=op, max_wait_seconds=60)
            assert waited.data["status"] == "succeeded", waited.text
            polls = sim.request_count("notes-1")
            assert polls == 4
            for number in range(1, polls + 1):
                said = [n.message for n in notes if f"checks {number}/" in (n.message or "")]
                assert len(said) == 1, (number, [n.message for n in notes])

    run(body)


def test_a_numeric_job_id_is_its_string_and_a_wrong_type_is_a_json_refusal(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url)

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            numbered = await agent.call("start_watch", contract="exports", job_id=4242)
            assert numbered.ok and numbered.data["job_id"] == "4242", numbered.text
            for arguments, named in (
                ({"contract": "exports", "job_id": "a", "max_requests": "many-secret-words"}, "max_requests"),
                ({"contract": "exports", "job_id": True}, "job_id"),
                ({"contract": ["exports"], "job_id": "b"}, "contract"),
            ):
                bad = await agent.call("start_watch", **arguments)
                assert bad.error == "invalid_argument", bad.text
                assert named in bad.data["message"] and "nothing was done" in bad.data["message"]
                assert "validation error" not in bad.text and "many-secret-words" not in bad.text
            missing = await agent.call("wait_operation", operation_id="x")
            assert missing.error == "invalid_argument" and "needs the argument 'max_wait_seconds'" in missing.text
            extra = await agent.call("check_operation", operation_id="x", url="http://elsewhere")
            assert extra.error == "invalid_argument" and "takes no argument 'url'" in extra.text

    run(body)


def test_an_agents_deadline_not_longer_than_the_first_check_is_refused_naming_both(
    sim: Simulator, tmp_path: Path
) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    path = agent_contract(contracts, sim.url)
    path.write_text(path.read_text().replace("[schedule]\n", '[schedule]\nfirst_check = "30s"\n'), encoding="utf-8")

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            refused = await agent.call("start_watch", contract="exports", job_id="happy-3", deadline="10s")
            assert refused.error == "invalid_argument", refused.text
            assert "10s is not longer than contract 'exports''s first_check 30s" in refused.data["message"]
        assert sim.request_count("happy-3") == 0

    run(body)
