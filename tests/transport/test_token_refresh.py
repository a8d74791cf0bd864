"""A poll's credential is read before its time limits are checked, whichever interface drives it.

Each test's token command is quick until the provider has answered the first poll, then takes 8.5 s: an
expired token (100 ms) refreshed past the operation's 8 s deadline. A refresh starts after the first poll, so it
always ends past the deadline; the deadline only leaves a loaded machine time for that first poll (at 3 s, two
busy cores closed it). That refresh ran inside the request's own time bound, so the poll ended as a transport
failure ("connect timed out") counted against a provider that was never asked. Now the deadline is checked
after the refresh (`StatusClient.prepare`, in both of the engine's drivers) and is what the stop says.
The worker's two drivers are covered in tests/fleet/test_worker_claim.py.
"""

from __future__ import annotations

from pathlib import Path

import pollwarden
from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, token_command_auth, write_contract
from tests.mcp.support import agent_contract, mcp_agent, run

WHY = "passed before the request could go out"


def _slow_refresh(tmp_path: Path, sim: Simulator, job: str) -> dict[str, str]:
    """The contract options: a token command quick until the provider has answered one status request for
    `job`, 8.5 s after that (a refresh past the deadline). It asks the simulator, not a clock, so no load can
    move a refresh to the wrong side of the first poll."""
    script = tmp_path / "token.py"
    script.write_text(
        "import json, time, urllib.request\n"
        f"seen = json.load(urllib.request.urlopen({sim.url + '/_sim/requests?job=' + job!r}))\n"
        "if any(r['method'] == 'GET' for r in seen):\n"
        "    time.sleep(8.5)  # a refresh: past the deadline\n"
        "print('tok-REFRESH-321')\n"
    )
    return {
        "timeout": "3s",
        "deadline": "8s",
        "base_delay": "300ms",
        "max_delay": "300ms",
        "extra": token_command_auth(script, ttl="100ms"),
    }


def _stopped_before_sending(home: Path, sim: Simulator, job: str) -> None:
    store = open_store(home)
    try:
        [stored] = store.all()
        assert stored.record.is_final and WHY in str(stored.record.detail), stored.record.detail
        kinds = [e.data["kind"] for e in store.events(stored.record.operation_id) if e.kind == "observed"]
        assert kinds == ["job_state"], kinds  # the first poll's; no transport failure after it
    finally:
        store.close()
    assert sim.request_count(job) == 1


def _running(sim: Simulator, job: str) -> None:
    sim.add_job(job, [Step(body={"state": "running"}, times=100)])


def test_the_cli_watch(sim: Simulator, tmp_path: Path, home: Path) -> None:
    _running(sim, "cli-1")
    contract = write_contract(tmp_path / "c.toml", sim.url, **_slow_refresh(tmp_path, sim, "cli-1"))
    ran = run_cli("watch", "--contract", str(contract), "--job", "cli-1", home=home)
    assert ran.code != 0 and "Traceback" not in ran.stderr, ran.stderr
    _stopped_before_sending(home, sim, "cli-1")


def test_the_python_api(sim: Simulator, tmp_path: Path, home: Path) -> None:
    _running(sim, "api-1")
    contract = write_contract(tmp_path / "c.toml", sim.url, **_slow_refresh(tmp_path, sim, "api-1"))
    outcome = pollwarden.watch_sync(contract, "api-1", home=home)
    assert isinstance(outcome, pollwarden.Stopped), outcome
    _stopped_before_sending(home, sim, "api-1")


def test_the_mcp_server(sim: Simulator, tmp_path: Path) -> None:
    _running(sim, "mcp-1")
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    options = _slow_refresh(tmp_path, sim, "mcp-1")
    agent_contract(contracts, sim.url, agent=options.pop("extra"), **options)

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            started = await agent.call("start_watch", contract="exports", job_id="mcp-1")
            assert started.ok, started.text
            done = await agent.call("wait_operation", operation_id=started.data["operation_id"], max_wait_seconds=30)
            assert done.ok and done.data["status"] != "running", done.text

    run(body)
    _stopped_before_sending(home, sim, "mcp-1")
