"""A poll's credential is read before its time limits are checked, whichever interface drives it.

Each test's token command is quick until the provider has answered the first poll; after that a run touches
`started` and is held until the test has moved the clock past the operation's 60 s deadline: an expired token
(100 ms) refreshed past the deadline. That refresh ran inside the request's own time bound, so the poll ended as a
transport failure ("connect timed out") counted against a provider that was never asked. Now the deadline is
checked after the refresh (`StatusClient.prepare`, in both of the engine's drivers) and is what the stop says.

The clock moves only once the second poll is reserved (`_second_poll_waits`), not as soon as a run is held: the
held run may be the refresh ahead of need (`token_source.REFRESH_AT`) that the first poll's own look at its token
started, at three quarters of the 100 ms ttl, while the first request was still going out. A clock moved then
moves between the polls, and the second step rightly stops before it claims anything ("deadline ... has passed",
`core.decide.next_step`): a loaded full run did that (issue 25), one run in eight with four of the MCP test at once
beside two burners. Reserved, the second poll has judged the deadline at its start and waits for that run (its
token expired a second before), so the moved clock is read where the refresh ends. Polls are a second apart, ten
ttls: a quick run that began just before the first request (the provider had seen no GET yet) cannot still hold a
fresh token for the second one unless the polling process took that long to notice the run had ended.
The worker's two drivers are covered in tests/fleet/test_worker_claim.py. The Python API, in process, is given a
store whose clock the test moves; the CLI and the MCP server are other processes, tests/instrumented_cli.py's,
whose store's clock is moved by a file the test writes (POLLWARDEN_TEST_STORE_CLOCK). No test waits for the
deadline on the machine's clock (8.5 s each, before).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio.to_thread

import pollwarden
from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator, Step
from tests.conftest import token_command_auth, write_contract
from tests.mcp.support import INSTRUMENTED, Reply, agent_contract, mcp_agent, run

WHY = "passed before the request could go out"
GUARD = 60.0


def _slow_refresh(tmp_path: Path, sim: Simulator, job: str, held: tuple[Path, Path]) -> dict[str, str]:
    """The contract options: a token command quick until the provider has answered one status request for
    `job`; after that (a refresh) it touches `started` and waits for `go`, which the test gives once it has moved
    the clock past the deadline. It asks the simulator, not a clock, so no load can move a refresh to the wrong
    side of the first poll."""
    script = tmp_path / "token.py"
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
        "deadline": "60s",
        "base_delay": "1s",
        "max_delay": "1s",
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


def _second_poll_waits(tmp_path: Path, home: Path, ended: Callable[[], bool]) -> None:
    """Returns once a run is held and the second poll is reserved (unless the command `ended` first): that poll
    judged the deadline at its start and now waits for the held run (see the module's docstring)."""
    _until(lambda: (tmp_path / "started").exists() or ended(), "the refresh never started")
    store = open_store(home)  # opened only now: the command has made the home and the operation
    try:
        _until(
            lambda: ended() or any(s.record.status_requests_used >= 2 for s in store.all()),
            "the second poll was never reserved",
        )
    finally:
        store.close()


def _moved_past_the_deadline(tmp_path: Path, home: Path, ended: Callable[[], bool]) -> None:
    """Once the second poll waits for the held refresh (unless the command `ended` first): the command's store
    clock 120 s ahead, past the 60 s deadline (tests/instrumented_cli.py reads `clock`), then the refresh let go."""
    go, clock = tmp_path / "go", tmp_path / "clock"
    _second_poll_waits(tmp_path, home, ended)
    moved = tmp_path / "clock.new"
    moved.write_text("120")
    moved.rename(clock)  # whole: the command never reads a half-written number
    go.touch()


def _held(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "started", tmp_path / "go"


def test_the_cli_watch(sim: Simulator, tmp_path: Path, home: Path) -> None:
    _running(sim, "cli-1")
    contract = write_contract(tmp_path / "c.toml", sim.url, **_slow_refresh(tmp_path, sim, "cli-1", _held(tmp_path)))
    watch = subprocess.Popen(
        [sys.executable, INSTRUMENTED, "watch", "--contract", str(contract), "--job", "cli-1"],
        env={**os.environ, "POLLWARDEN_HOME": str(home), "POLLWARDEN_TEST_STORE_CLOCK": str(tmp_path / "clock")},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with ThreadPoolExecutor(1) as pool:
        ran = pool.submit(watch.communicate, timeout=GUARD)  # read as it writes: a full pipe would block it
        _moved_past_the_deadline(tmp_path, home, lambda: watch.poll() is not None)
        _, stderr = ran.result()
    assert watch.returncode != 0 and "Traceback" not in stderr, stderr
    _stopped_before_sending(home, sim, "cli-1")


def test_the_python_api(sim: Simulator, tmp_path: Path, home: Path) -> None:
    """In process, the deadline needs no wait: the watch is given a store whose clock (the engine's) the test
    moves past the deadline while the refresh is held, then lets the refresh go."""
    _running(sim, "api-1")
    started, go = _held(tmp_path)
    options = _slow_refresh(tmp_path, sim, "api-1", (started, go))
    contract = write_contract(tmp_path / "c.toml", sim.url, **options)
    store, by = open_store(home), [timedelta(0)]
    store.db_now = lambda: datetime.now(UTC) + by[0]  # type: ignore[method-assign]
    try:
        with ThreadPoolExecutor(1) as pool:
            watching = pool.submit(pollwarden.watch_sync, contract, "api-1", store=store)
            _second_poll_waits(tmp_path, home, watching.done)
            by[0] = timedelta(seconds=120)  # past the 60 s deadline, while the refresh runs
            go.touch()
            outcome = watching.result(timeout=GUARD)
    finally:
        store.close()
    assert isinstance(outcome, pollwarden.Stopped), outcome
    _stopped_before_sending(home, sim, "api-1")


def test_the_mcp_server(sim: Simulator, tmp_path: Path) -> None:
    _running(sim, "mcp-1")
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    options = _slow_refresh(tmp_path, sim, "mcp-1", _held(tmp_path))
    agent_contract(contracts, sim.url, agent=options.pop("extra"), **options)
    env = {"POLLWARDEN_TEST_STORE_CLOCK": str(tmp_path / "clock")}

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env=env, instrumented=True) as agent:
            started = await agent.call("start_watch", contract="exports", job_id="mcp-1")
            assert started.ok, started.text
            answered: list[Reply] = []  # the server steps the watch while a call waits on it: both at once
            async with anyio.create_task_group() as group:
                moving = (_moved_past_the_deadline, tmp_path, home, lambda: bool(answered))
                group.start_soon(anyio.to_thread.run_sync, *moving)
                operation = started.data["operation_id"]
                answered.append(await agent.call("wait_operation", operation_id=operation, max_wait_seconds=120))
            [done] = answered
            assert done.ok and done.data["status"] != "running", done.text

    run(body)
    _stopped_before_sending(home, sim, "mcp-1")
