"""Credential isolation (R47): the secret never reaches the agent, a log, a story or the database, and no tool
argument can send it anywhere but the contract's status URL."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from pollwarden.simulator import Simulator, Step

from .support import SECRET_ENV, Agent, agent_contract, cli, mcp_agent, run


def _variants(secret: str) -> list[str]:
    return [secret, quote(secret, safe=""), base64.b64encode(secret.encode()).decode().rstrip("=")]


@pytest.fixture
def attacker() -> Iterator[Simulator]:
    """Somewhere else: another loopback address when the host has one, another port otherwise."""
    with contextlib.ExitStack() as stack:
        try:
            simulator = stack.enter_context(Simulator(host="127.0.0.2"))
        except OSError:
            simulator = stack.enter_context(Simulator())
        yield simulator


def _assert_clean(label: str, text: str, secret: str) -> None:
    for variant in _variants(secret):
        assert variant not in text, f"the secret (or an encoding of it) appeared in {label}"


def test_the_secret_never_leaves_the_server(guarded: Simulator, secret: str, tmp_path: Path) -> None:
    contracts, home, stderr = tmp_path / "contracts", tmp_path / "home", tmp_path / "stderr.txt"
    agent_contract(contracts, guarded.url, secret_env=SECRET_ENV, base_delay="50ms", max_delay="100ms")
    agent_contract(contracts, guarded.url, name="unset", secret_env="PW_NOT_SET_ANYWHERE")
    guarded.add_job("leaky", [Step(body={"state": "failed", "error": {"message": "boom"}})])
    operations: list[str] = []
    session = ""

    async def body() -> None:
        nonlocal session
        async with mcp_agent(contracts, home, stderr, env={SECRET_ENV: secret}) as agent:
            await _exercise(agent, operations)
            session = (await agent.call("list_operations")).data["session"]
            for _, _, reply in agent.replies:
                _assert_clean("a tool reply", reply.text, secret)
                _assert_clean("a tool reply", json.dumps(reply.data), secret)
            assert any(not reply.ok for _, _, reply in agent.replies)  # errors were exercised too

        assert guarded.requests() and all(r.auth_ok for r in guarded.requests())  # the secret was really used
        _assert_clean("the server's stderr", stderr.read_text(encoding="utf-8"), secret)
        outputs = [await cli("status", "--json", home=home), await cli("decisions", "--all", "--json", home=home)]
        outputs += [await cli("approvals", "--all", "--json", home=home)]
        outputs += [await cli("story", op, "--json", home=home) for op in operations]
        session_story = await cli("story", f"@agent/{session}", "--json", home=home)
        outputs.append(session_story)
        for ran in outputs:
            assert ran.code == 0, ran.stderr
            _assert_clean("CLI output", ran.stdout + ran.stderr, secret)
        kinds = [event["kind"] for event in json.loads(session_story.stdout)]
        assert kinds[0] == "session_started"
        assert kinds.index("call_intent") < kinds.index("call_result")
        for path in home.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                for variant in _variants(secret):
                    assert variant.encode() not in data, f"the secret is in {path.name}"

    run(body)


async def _exercise(agent: Agent, operations: list[str]) -> None:
    """Success, failure, refusals and mistakes: every kind of reply an agent can get."""
    happy = await agent.call("start_watch", contract="exports", job_id="happy-1")
    operations.append(happy.data["operation_id"])
    assert (await agent.call("wait_operation", operation_id=operations[0], max_wait_seconds=20)).data[
        "status"
    ] == "succeeded"
    assert (await agent.call("fetch_result", operation_id=operations[0])).ok
    for job in ("leaky", "unauthorized-1", "unknown_state-1"):
        started = await agent.call("start_watch", contract="exports", job_id=job)
        operations.append(started.data["operation_id"])
        stopped = await agent.call("wait_operation", operation_id=operations[-1], max_wait_seconds=20)
        assert stopped.data["status"] == "stopped"
        await agent.call("fetch_result", operation_id=operations[-1])
        await agent.call("request_extension", operation_id=operations[-1], minutes=5, checks=2, reason="please")
        await agent.call("get_decision", operation_id=operations[-1])
    assert (await agent.call("start_watch", contract="unset", job_id="happy-2")).error == "not_ready"
    assert (await agent.call("start_watch", contract="missing", job_id="x")).error == "unknown_contract"
    assert (await agent.call("check_operation", operation_id="../../etc")).error == "unknown_operation"
    assert not (await agent.call("wait_operation", operation_id="x", max_wait_seconds="soon")).ok


def test_no_argument_sends_the_credential_anywhere_else(
    guarded: Simulator, attacker: Simulator, secret: str, tmp_path: Path
) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, guarded.url, secret_env=SECRET_ENV, max_requests=1)
    guarded.add_job("bounce", [Step(status=302, headers={"Location": f"{attacker.url}/steal"})])
    elsewhere = attacker.url.removeprefix("http://")
    job_ids = [
        "../../x",
        "..",
        ".",
        "%2F..",
        "%2e%2e/admin",
        "x/../../_sim/requests",
        f"{attacker.url}/steal",
        f"//{elsewhere}/steal",
        f"@{elsewhere}",
        f"x?next={attacker.url}",
        "x#fragment",
        "bounce",
    ]
    header_like = ["x\r\nHost: 127.0.0.2", "x\nAuthorization: Bearer stolen", "x\x00y"]
    contract_names = ["../exports", str(contracts / "exports.toml"), "exports.toml", attacker.url, "exports\r\nX: y"]

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env={SECRET_ENV: secret}) as agent:
            for job_id in job_ids:
                started = await agent.call("start_watch", contract="exports", job_id=job_id)
                assert started.ok, started.text
                checked = await agent.call("check_operation", operation_id=started.data["operation_id"])
                assert checked.ok, checked.text
            for job_id in header_like:
                assert (await agent.call("start_watch", contract="exports", job_id=job_id)).error == "invalid_argument"
            for name in contract_names:
                assert (await agent.call("start_watch", contract=name, job_id="happy-1")).error == "unknown_contract"
            listed = await agent.call("list_operations")
            assert "status_url" not in listed.text and secret not in listed.text

    run(body)
    assert attacker.requests() == []
    seen = guarded.requests()
    assert len(seen) == len(job_ids)  # one status request per operation, nothing else
    for request in seen:
        assert request.method == "GET" and request.auth_ok
        assert re.fullmatch(r"/jobs/[^/?#]+", request.path), request.path
    paths = {request.path for request in seen}
    assert "/jobs/..%2F..%2Fx" in paths and "/jobs/%2E%2E" in paths and "/jobs/%252F.." in paths


def _basic_forms(user: str, password: str) -> tuple[str, list[str]]:
    """A Basic credential as the environment holds it (one trailing newline, as a mounted file has) and every form
    a provider or an agent may echo it in."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    escaped = "".join(f"\\u{ord(ch):04x}" for ch in password)
    forms = [token, f"Basic {token}", f"{user}:{password}", password, escaped, quote(password, safe="")]
    return token + "\n", forms


def test_a_basic_credential_echoed_in_any_form_reaches_no_reply_and_no_log(tmp_path: Path) -> None:
    password = "pw-" + secrets.token_hex(12)
    env_value, forms = _basic_forms("agentuser", password)
    token = forms[0]
    contracts, home, stderr = tmp_path / "contracts", tmp_path / "home", tmp_path / "stderr.txt"
    with Simulator() as provider:
        path = agent_contract(contracts, provider.url, secret_env=SECRET_ENV, base_delay="50ms", max_delay="100ms")
        auth = f'secret_env = "{SECRET_ENV}"\n'
        path.write_text(path.read_text(encoding="utf-8").replace(auth, auth + 'scheme = "Basic"\n'), encoding="utf-8")
        # The provider echoes the credential: base64 and decoded in a message, the password JSON-escaped.
        message = f"rejected Basic {token} for agentuser:{password}"
        echo = json.dumps({"state": "failed", "error": {"message": message, "hint": "@"}}).replace("@", forms[4])
        provider.add_job("echo", [Step(body=echo.encode())])

        async def body() -> None:
            async with mcp_agent(contracts, home, stderr, env={SECRET_ENV: env_value}) as agent:
                started = await agent.call("start_watch", contract="exports", job_id="echo")
                assert started.ok, started.text
                op = started.data["operation_id"]
                stopped = await agent.call("wait_operation", operation_id=op, max_wait_seconds=20)
                assert stopped.data["status"] == "stopped", stopped.text
                await agent.call("get_decision", operation_id=op)
                await agent.call("list_operations")
                # An agent that guessed a form of the credential gets it back in no reply either.
                for guess in (f"agentuser:{password}", password):
                    refused = await agent.call("start_watch", contract="exports", job_id=guess)
                    assert refused.error == "invalid_argument", refused.text  # never stored, never sent
                await agent.call("start_watch", contract=f"agentuser:{password}", job_id="x")
                for tool, _, reply in agent.replies:
                    for form in forms:
                        assert form not in reply.text and form not in json.dumps(reply.data), (tool, form)

        run(body)
        assert provider.requests(), "the provider was asked"
    log = stderr.read_text(encoding="utf-8")
    for form in forms:
        assert form not in log, form
