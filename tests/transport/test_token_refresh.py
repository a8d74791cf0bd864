"""A poll's credential is read before its time limits are checked, whichever interface drives it.

Each test's token command is quick until the provider has answered the first poll, then takes 8.5 s: an
expired token (100 ms) refreshed past the operation's 8 s deadline. A refresh starts after the first poll, so it
always ends past the deadline; the deadline only leaves a loaded machine time for that first poll (at 3 s, two
busy cores closed it). That refresh ran inside the request's own time bound, so the poll ended as a transport
failure ("connect timed out") counted against a provider that was never asked. Now the deadline is checked
after the refresh (`StatusClient.prepare`, in both of the engine's drivers) and is what the stop says.
The worker's two drivers are covered in tests/fleet/test_worker_claim.py. The Python API, in process, is given a
store whose clock the test moves past the deadline while the refresh is held (no 8 s wait); the CLI and the MCP
server are other processes, whose clock is the machine's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pollwarden
from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, token_command_auth, write_contract
from tests.mcp.support import agent_contract, mcp_agent, run

WHY = "passed before the request could go out"
GUARD = 60.0


def _slow_refresh(tmp_path: Path, sim: Simulator, job: str, held: tuple[Path, Path] | None = None) -> dict[str, str]:
    """The contract options: a token command quick until the provider has answered one status request for
    `job`, 8.5 s after that (a refresh past the deadline). It asks the simulator, not a clock, so no load can
    move a refresh to the wrong side of the first poll. With `held` (started, go), that refresh touches `started`
    and waits for `go` instead (a test that moves the clock past the deadline itself)."""
    script = tmp_path / "token.py"
    if held is None:
        slow = "    time.sleep(8.5)  # a refresh: past the deadline\n"
    else:
        started, go = held
        slow = (
            f"    started, go = pathlib.Path({str(started)!r}), pathlib.Path({str(go)!r})\n"
            "    started.touch()\n"
            "    deadline = time.monotonic() + 120\n"
            "    while not go.exists() and time.monotonic() < deadline:  # held until the test says\n"
            "        time.sleep(0.01)\n"
        )
    script.write_text(
        "import json, pathlib, time, urllib.request\n"
        f"seen = json.load(urllib.request.urlopen({sim.url + '/_sim/requests?job=' + job!r}))\n"
        "if any(r['method'] == 'GET' for r in seen):\n" + slow + "print('tok-REFRESH-321')\n"
    )
    return {
        "timeout": "3s",
        "deadline": "8s",
        "base_delay": "300ms",
        "max_delay": "300ms",
        "extra": token_command_auth(script, ttl="100ms"),
    }


def _until(condition: Callable[[], bool], what: str) -> None:
    """Waits for `condition` (a guard of GUARD seconds against a stall, never the assertion)."""
    deadline = time.monotonic() + GUARD
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


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
    """In process, the deadline needs no wait: the watch is given a store whose clock (the engine's) the test
    moves past the deadline while the refresh is held, then lets the refresh go."""
    _running(sim, "api-1")
    started, go = tmp_path / "started", tmp_path / "go"
    options = _slow_refresh(tmp_path, sim, "api-1", held=(started, go))
    contract = write_contract(tmp_path / "c.toml", sim.url, **options)
    store, by = open_store(home), [timedelta(0)]
    store.db_now = lambda: datetime.now(UTC) + by[0]  # type: ignore[method-assign]
    try:
        with ThreadPoolExecutor(1) as pool:
            watching = pool.submit(pollwarden.watch_sync, contract, "api-1", store=store)
            _until(lambda: started.exists() or watching.done(), "the refresh never started")
            by[0] = timedelta(seconds=20)  # past the 8 s deadline, while the refresh runs
            go.touch()
            outcome = watching.result(timeout=GUARD)
    finally:
        store.close()
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
