"""submit_job over stdio against a loopback provider: the submission is durable before it is sent, sent once,
watched, gated like any provider call, and refused with nothing sent when it cannot be what the contract says."""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from pollwarden.actions.provider import fingerprint
from pollwarden.core.admission import submission_operation_id
from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator
from tests.loopback import Answer, Route, Seen, serving

from .support import SECRET_ENV, Note, Reply, agent_contract, cli, mcp_agent, pending_grant, run

SUBMIT = """
[submit]
url = "{base}/jobs"
idempotency_header = "Idempotency-Key"
job_id = "job_id"
"""
SECRET = "sk-submit-test-9f3c2a"


def test_a_submission_is_durable_before_it_is_sent_sent_once_and_watched(tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    with serving() as provider:
        rows: list[tuple[str, str, str | None, str]] = []
        agent_contract(contracts, provider.url, agent=SUBMIT.format(base=provider.url))
        provider.routes[("POST", "/jobs")] = _route(home, f"{provider.url}/jobs", rows)

        async def body() -> None:
            async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
                job = {"scenario": "happy", "size": 3, "labels": ["a", "b"]}
                sent = await agent.call("submit_job", contract="exports", body=job, max_requests=5)
                assert sent.ok, sent.text
                assert sent.data["status"] == "watching" and sent.data["job_id"] == "sub-1", sent.text
                assert sent.data["max_status_requests"] == 5 and sent.data["reused"] is False
                facts = sent.data["submission"]
                assert facts["submitted"] is True and facts["idempotent"] is True
                assert facts["idempotency_header"] == "Idempotency-Key"
                assert facts["request_fingerprint"].startswith("sha256:")
                op = sent.data["operation_id"]

                # The same request again (its keys in another order): the same operation, nothing sent.
                again = await agent.call("submit_job", contract="exports", body=dict(reversed(job.items())))
                assert again.ok and again.data["operation_id"] == op, again.text
                assert again.data["submission"]["already_submitted"] is True
                assert "nothing was sent again" in again.data["message"]
                listed = await agent.call("list_operations")
                assert [o["operation_id"] for o in listed.data["operations"]] == [op]

                other = await agent.call("submit_job", contract="exports", body={**job, "size": 4})
                assert other.ok and other.data["operation_id"] != op  # another request is another job

            posts = [s for s in provider.seen if s.method == "POST"]
            assert len(posts) == 2, posts
            first = posts[0]
            assert json.loads(first.body) == job
            token = first.headers["idempotency-key"]
            assert token and token != posts[1].headers["idempotency-key"]
            # When the POST arrived, the fingerprint and this very token were already in the store.
            assert rows[0] == (op, facts["request_fingerprint"], token, "sending")

            story = await cli("story", op, "--json", home=home)
            kinds = [e["kind"] for e in json.loads(story.stdout)]
            assert kinds[:2] == ["submission_intent", "submitted"], kinds
            intent = json.loads(story.stdout)[0]["data"]
            assert intent["created_by"].startswith("agent session ") and token not in story.stdout
            session = listed.data["session"]
            trail = json.loads((await cli("story", f"@agent/{session}", "--json", home=home)).stdout)
            calls = [e["data"] for e in trail if e["kind"] == "call_intent"]
            assert [c["purpose"] for c in calls] == ["submit", "submit"], calls

        run(body)


def _route(home: Path, url: str, rows: list[tuple[str, str, str | None, str]]) -> Route:
    """The provider's 202, after reading what the store held the moment the POST arrived: its submission row."""

    def route(seen: Seen) -> Answer:
        operation_id = submission_operation_id("exports", fingerprint("POST", url, seen.body))
        store = open_store(home, keys="none")
        try:
            held = store.get_submission(operation_id)
        finally:
            store.close()
        if held is not None:
            rows.append((held.operation_id, held.fingerprint, held.idempotency_token, held.state))
        job = "sub-1" if json.loads(seen.body).get("size") == 3 else "sub-2"
        return Answer(202, json.dumps({"job_id": job}).encode(), {"Content-Type": "application/json"})

    return route


def test_what_cannot_be_submitted_is_refused_with_nothing_sent(tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    with serving() as provider:
        limits = '[agent]\nmax_deadline = "5m"\nmax_requests = 4\n'
        agent_contract(
            contracts,
            provider.url,
            secret_env=SECRET_ENV,
            deadline="10m",
            agent=limits + SUBMIT.format(base=provider.url),
        )
        agent_contract(contracts, provider.url, name="plain", secret_env=SECRET_ENV)  # no [submit]
        provider.routes[("POST", "/jobs")] = Answer(202, b'{"job_id": "never"}')

        async def body() -> None:
            async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env={SECRET_ENV: SECRET}) as agent:
                plain = await agent.call("submit_job", contract="plain", body={"a": 1})
                assert plain.error == "no_submit" and "[submit]" in plain.data["message"], plain.text
                # (A string that holds a JSON object is parsed by the SDK first, as hosts that quote their
                # arguments send it; plain words, arrays, numbers and null are not objects.)
                for wrong in (["a", 1], "plain words", "[1, 2]", 7, None):
                    bad = await agent.call("submit_job", contract="exports", body=wrong)
                    assert bad.error == "invalid_argument" and "JSON object" in bad.data["message"], (wrong, bad.text)
                huge = await agent.call("submit_job", contract="exports", body={"data": "x" * 70_000})
                assert huge.error == "invalid_argument" and "65536" in huge.data["message"], huge.text
                keyed = await agent.call("submit_job", contract="exports", body={"token": SECRET})
                assert keyed.error == "invalid_argument" and "credential" in keyed.data["message"], keyed.text
                longer = await agent.call("submit_job", contract="exports", body={"a": 1}, deadline="6m")
                assert longer.error == "limit_exceeded" and longer.data["limit"] == "[agent].max_deadline"
                more = await agent.call("submit_job", contract="exports", body={"a": 1}, max_requests=5)
                assert more.error == "limit_exceeded" and longer.ok is False, more.text
                unknown = await agent.call("submit_job", contract="nope", body={"a": 1})
                assert unknown.error == "unknown_contract", unknown.text
                assert (await agent.call("list_operations")).data["operations"] == []
                for _, _, reply in agent.replies:
                    assert SECRET not in reply.text

        run(body)
        assert provider.seen == []


def test_a_submission_waits_for_the_session_approval_like_any_provider_call(tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    with serving() as provider:
        rows: list[tuple[str, str, str | None, str]] = []
        agent_contract(contracts, provider.url, approval="session", agent=SUBMIT.format(base=provider.url))
        provider.routes[("POST", "/jobs")] = _route(home, f"{provider.url}/jobs", rows)

        async def body() -> None:
            async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
                job = {"size": 3}
                first = await agent.call("submit_job", contract="exports", body=job)
                assert first.error == "approval_required", first.text
                assert provider.seen == []
                store = open_store(home, keys="none")
                try:  # not even recorded: a refused gate leaves no submission behind
                    op = submission_operation_id("exports", fingerprint("POST", f"{provider.url}/jobs", b'{"size":3}'))
                    assert store.get_submission(op) is None
                finally:
                    store.close()
                approved = await cli("approve-session", first.data["grant_id"], "--by", "alice", home=home)
                assert approved.code == 0, approved.stderr
                sent = await agent.call("submit_job", contract="exports", body=job)
                assert sent.ok and sent.data["operation_id"] == op and sent.data["approval"] == "session", sent.text

        run(body)
        assert [s.method for s in provider.seen] == ["POST"] and len(rows) == 1


def test_a_submitted_job_is_the_agents_to_wait_on_and_fetch(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, agent=SUBMIT.format(base=sim.url))

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            sent = await agent.call("submit_job", contract="exports", body={"scenario": "happy"})
            assert sent.ok and sent.data["job_id"] == "happy-sub1", sent.text
            op = sent.data["operation_id"]
            done = await agent.call("wait_operation", operation_id=op, max_wait_seconds=30)
            assert done.ok and done.data["status"] == "succeeded", done.text
            fetched = await agent.call("fetch_result", operation_id=op)
            assert fetched.ok and json.loads(fetched.data["text"])["job_id"] == "happy-sub1", fetched.text
            again = await agent.call("submit_job", contract="exports", body={"scenario": "happy"})
            assert again.ok and again.data["status"] == "succeeded" and again.data["operation_id"] == op
            assert again.data["submission"]["already_submitted"] is True

    run(body)
    assert len([r for r in sim.requests() if r.method == "POST"]) == 1


def test_a_submission_waiting_for_a_per_call_approval_beats_and_is_sent_once_approved(tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    with serving() as provider:
        rows: list[tuple[str, str, str | None, str]] = []
        table = '[agent]\napproval_timeout = "20s"\n' + SUBMIT.format(base=provider.url)
        agent_contract(contracts, provider.url, approval="per_call", agent=table)
        provider.routes[("POST", "/jobs")] = _route(home, f"{provider.url}/jobs", rows)

        async def body() -> None:
            env = {"POLLWARDEN_MCP_HEARTBEAT_SECONDS": "0.2"}
            async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env=env) as agent:
                notes: list[Note] = []
                replies: dict[str, Reply] = {}

                async def submit() -> None:
                    replies["submit"] = await agent.call_reporting(
                        "submit_job", notes, contract="exports", body={"size": 3}
                    )

                async with anyio.create_task_group() as tg:
                    tg.start_soon(submit)
                    grant = await pending_grant(home, kind="call")
                    assert grant["detail"]["purpose"] == "submit" and provider.seen == []
                    waiting = f"waiting for approval {grant['grant_id']} by"
                    with anyio.fail_after(60):  # heartbeats while nobody has answered (0.2 s apart here)
                        while sum(waiting in (n.message or "") for n in notes) < 2:
                            await anyio.sleep(0.05)
                    # A heartbeat may come before the gate asks (the call's state, while it looks for an open
                    # grant); from the first note that names the grant on, every note does.
                    named = next(i for i, n in enumerate(notes) if waiting in (n.message or ""))
                    assert all(waiting in (n.message or "") for n in notes[named:]), notes
                    assert (await cli("approve-call", grant["grant_id"], "--by", "bob", home=home)).code == 0
                sent = replies["submit"]
                assert sent.ok and sent.data["job_id"] == "sub-1", sent.text

        run(body)
        assert [s.method for s in provider.seen] == ["POST"] and len(rows) == 1
