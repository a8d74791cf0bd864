"""request_cancel over a real MCP client: a question for a person, never a cancel by the agent itself."""

from __future__ import annotations

import json
from pathlib import Path

from pollwarden.simulator import Simulator, Step

from .support import agent_contract, cli, mcp_agent, run

CANCEL = """
[cancel]
url = "{base}/jobs/{{job_id}}/cancel"
"""


def _posts(sim: Simulator, job: str) -> int:
    return len([r for r in sim.requests(job) if r.method == "POST"])


def test_a_cancel_request_on_a_running_job_waits_for_a_person_who_cancels_once(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, agent=CANCEL.format(base=sim.url), base_delay="300ms", max_delay="300ms")
    sim.add_job("long-1", [Step(body={"state": "running"}, times=1000)])

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="long-1")).data["operation_id"]
            first = await agent.call("check_operation", operation_id=op)
            assert first.data["status"] == "polled", first.text

            empty = await agent.call("request_cancel", operation_id=op, reason="  ")
            assert empty.error == "invalid_argument"

            asked = await agent.call("request_cancel", operation_id=op, reason="the user changed the input")
            assert asked.ok, asked.text
            decision = asked.data["decision"]
            assert decision["topic"] == "cancel_request" and decision["reason"] is None
            assert [o["kind"] for o in decision["options"]] == ["cancel", "keep"]
            assert decision["cancel_requests"][0]["reason"] == "the user changed the input"
            assert _posts(sim, "long-1") == 0  # asking sends nothing

            again = await agent.call("request_cancel", operation_id=op, reason="still want it cancelled")
            assert again.ok and again.data["already_requested"] is True
            assert again.data["decision"]["decision_id"] == decision["decision_id"]

            # The operation keeps polling within its limits while the person has not decided.
            waited = await agent.call("wait_operation", operation_id=op, max_wait_seconds=1)
            assert waited.data["status"] == "not_yet" and waited.data["operation"]["phase"] == "active"
            used = waited.data["operation"]["status_requests_used"]
            assert used >= 2

            listed = await cli("decisions", op, home=home)
            assert listed.code == 0, listed.stderr
            assert decision["decision_id"] in listed.stdout
            assert "An agent asks to cancel" in listed.stdout
            assert "cancel at provider and stop watching" in listed.stdout
            assert "the user changed the input" in listed.stdout
            as_json = json.loads((await cli("decisions", op, "--json", home=home)).stdout)
            assert [d["decision_id"] for d in as_json] == [decision["decision_id"]]
            assert _posts(sim, "long-1") == 0

            decided = await cli("decide", decision["decision_id"], "--option", "1", "--by", "alice", home=home)
            assert decided.code == 0, decided.stdout + decided.stderr
            assert _posts(sim, "long-1") == 1
            twice = await cli("decide", decision["decision_id"], "--option", "1", "--by", "bob", home=home)
            assert twice.code != 0 and "already decided" in twice.stderr
            assert _posts(sim, "long-1") == 1

            after = await agent.call("check_operation", operation_id=op)
            assert after.data["status"] == "stopped", after.text
            assert after.data["operation"]["reason"] == "job_cancelled"
            assert "alice" in after.data["operation"]["detail"]
            statuses = [r for r in sim.requests("long-1") if r.method == "GET"]
            late = await agent.call("request_cancel", operation_id=op, reason="again")
            assert late.error == "not_cancellable"  # the job is over: nothing is left to cancel
            assert len([r for r in sim.requests("long-1") if r.method == "GET"]) == len(statuses)

        story = json.loads((await cli("story", op, "--json", home=home)).stdout)
        kinds = [e["kind"] for e in story]
        assert kinds.count("cancel_requested") == 1 and "decided" in kinds
        cancels = [e for e in story if e["kind"] == "action" and e["data"].get("action") == "cancel"]
        assert len(cancels) == 1 and cancels[0]["data"]["ok"] is True and cancels[0]["data"]["http_status"] == 200
        told = (await cli("story", op, home=home)).stdout
        assert "(an agent's cancel request): cancel at provider and stop watching, keep watching" in told
        assert "the agent asked a person to cancel the job" in told and "alice chose [1]" in told

    run(body)


def test_keep_watching_leaves_the_operation_running(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, agent=CANCEL.format(base=sim.url), base_delay="300ms", max_delay="300ms")
    sim.add_job("long-2", [Step(body={"state": "running"}, times=1000)])

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="long-2")).data["operation_id"]
            asked = await agent.call("request_cancel", operation_id=op, reason="not needed")
            decision_id = asked.data["decision"]["decision_id"]
            kept = await cli("decide", decision_id, "--option", "2", "--by", "alice", home=home)
            assert kept.code == 0 and "keeps watching" in kept.stdout, kept.stdout + kept.stderr
            polled = await agent.call("check_operation", operation_id=op)
            assert polled.data["status"] == "polled" and _posts(sim, "long-2") == 0

    run(body)


def test_a_contract_without_a_cancel_action_is_a_clear_refusal(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url)

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="slow-1")).data["operation_id"]
            refused = await agent.call("request_cancel", operation_id=op, reason="stop it")
            assert refused.error == "not_cancellable" and "[cancel]" in refused.data["message"]
            unknown = await agent.call("request_cancel", operation_id="nope", reason="stop it")
            assert unknown.error == "unknown_operation"
        listed = await cli("decisions", home=home)
        assert "no open decisions" in listed.stdout

    run(body)


def test_a_cancel_request_after_a_stop_goes_to_the_stops_own_decision(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, agent=CANCEL.format(base=sim.url), max_requests=2)
    sim.add_job("long-3", [Step(body={"state": "running"}, times=1000)])

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="long-3")).data["operation_id"]
            stopped = await agent.call("wait_operation", operation_id=op, max_wait_seconds=30)
            assert stopped.data["status"] == "stopped", stopped.text
            open_one = (await agent.call("get_decision", operation_id=op)).data["decision"]
            asked = await agent.call("request_cancel", operation_id=op, reason="no longer needed")
            assert asked.ok, asked.text
            assert asked.data["decision"]["decision_id"] == open_one["decision_id"]  # no second question
            option = next(o["number"] for o in open_one["options"] if o["kind"] == "cancel")
            decided = await cli("decide", open_one["decision_id"], "--option", str(option), "--by", "alice", home=home)
            assert decided.code == 0, decided.stdout + decided.stderr
            assert _posts(sim, "long-3") == 1

    run(body)


def test_a_new_cancel_request_is_announced_on_the_webhook_once(sim: Simulator, tmp_path: Path) -> None:
    """In process, through the broker the tools run on, with the delivery loop `pollwarden mcp` runs beside it: the
    person hears of the question as of a stop."""
    import threading

    from pollwarden.home.outbox import delivering_home
    from pollwarden.mcp_server import Broker, CallContext, load_contracts
    from tests.loopback import Answer, serving

    with serving({("POST", "/hook"): Answer(204)}) as hook:
        extra = CANCEL.format(base=sim.url) + (
            f'\n[escalation]\nwebhook_url = "{hook.url}/hook"\nwebhook_secret_env = "PW_HOOK_SECRET"\n'
        )
        agent_contract(tmp_path / "contracts", sim.url, agent=extra)
        contracts, problems = load_contracts(tmp_path / "contracts")
        assert problems == []
        broker = Broker(contracts, tmp_path / "home", environ={"PW_HOOK_SECRET": "hook-secret-456"})
        call = CallContext(cancelled=threading.Event())
        with delivering_home(tmp_path / "home", "mcp", environ=broker.environ) as courier:
            ok, started = broker.dispatch("start_watch", call, None, contract="exports", job_id="long-4")
            assert ok, started
            for reason in ("first", "second"):
                ok, asked = broker.dispatch(
                    "request_cancel", call, None, operation_id=started["operation_id"], reason=reason
                )
                assert ok, asked
            courier.drain(60)  # a guard: the request is sent as soon as it is committed
        assert len(hook.seen) == 1
        payload = json.loads(hook.seen[0].body)
        assert payload["decision"]["topic"] == "cancel_request"
        assert payload["decision"]["decision_id"] == asked["decision"]["decision_id"]
        assert "An agent asks to cancel" in payload["text"] and "hook-secret-456" not in hook.seen[0].body.decode()


def test_an_open_cancel_request_expires_when_the_job_succeeds_first(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, agent=CANCEL.format(base=sim.url))

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="happy-5")).data["operation_id"]
            asked = await agent.call("request_cancel", operation_id=op, reason="maybe not needed")
            decision_id = asked.data["decision"]["decision_id"]
            done = await agent.call("wait_operation", operation_id=op, max_wait_seconds=30)
            assert done.data["status"] == "succeeded", done.text
        assert "no open decisions" in (await cli("decisions", op, home=home)).stdout
        late = await cli("decide", decision_id, "--option", "1", "--by", "alice", home=home)
        assert late.code != 0 and "expired" in late.stderr
        assert not [r for r in sim.requests("happy-5") if r.method == "POST"]

    run(body)


def test_a_cancel_the_provider_refuses_ends_the_watch_without_claiming_a_cancelled_job(
    sim: Simulator, tmp_path: Path
) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    refusing = f'\n[cancel]\nurl = "{sim.url}/no-such-cancel/{{job_id}}"\n'
    agent_contract(contracts, sim.url, agent=refusing)
    sim.add_job("long-6", [Step(body={"state": "running"}, times=1000)])

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="long-6")).data["operation_id"]
            asked = await agent.call("request_cancel", operation_id=op, reason="not needed")
            decision_id = asked.data["decision"]["decision_id"]
            decided = await cli("decide", decision_id, "--option", "1", "--by", "alice", home=home)
            # exit 4 (escalated): a person looks again
            assert decided.code == 4 and "FAILED" in decided.stdout, decided.stdout + decided.stderr
            after = await agent.call("check_operation", operation_id=op)
            assert after.data["operation"]["reason"] == "integration_failure", after.text
            assert "may still run at the provider" in after.data["operation"]["detail"]
        story = json.loads((await cli("story", op, "--json", home=home)).stdout)
        cancels = [e for e in story if e["kind"] == "action" and e["data"].get("action") == "cancel"]
        assert len(cancels) == 1 and cancels[0]["data"]["ok"] is False and cancels[0]["data"]["http_status"] == 404

    run(body)
