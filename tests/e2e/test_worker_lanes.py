"""Nothing slow on the lanes: a real worker keeps polling healthy operations while another contract's token command
hangs and two providers accept connections and never answer.

Before, a refresh of a hung token command ran on the lane that was about to send (30 s, then again for the request
itself), and a batch waited for its slowest request (a silent provider's: its whole timeout), so both lanes stood
still and every contract's operations with them. Now the command runs off the lanes and its contract is passed
over until it ends; a silent provider's requests wait aside, holding their own slots.

Counted, not timed: the test waits until the hung command is hanging and both silent providers hold requests, then
until the healthy provider has answered N more polls, and asserts the command was still the same hung run all that
while (the old worker gave up on it after 30 s, having polled almost nothing meanwhile). Then it releases them all:
the hung contract's operations are polled once its command ends, and the worker stops cleanly.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pollwarden.simulator import Simulator, Step
from tests.conftest import hanging_token, process_alive, write_contract
from tests.e2e.test_worker import _enqueue, _log_of, _spawn_worker
from tests.transport.test_http_keepalive import holding

pytestmark = pytest.mark.slow

GUARD = 90.0
"""How long the test waits for what must happen before failing it as stalled: a guard, never the assertion."""

HEALTHY = 20
MORE = 100
"""Healthy polls counted while everything else hangs: five per healthy operation, half a second at the normal
rate here, and far more than the old worker made in the 30 s it waited on the hung command."""


def _until(condition: Callable[[], object], what: str, *, also: Callable[[], None] = lambda: None) -> None:
    deadline = time.monotonic() + GUARD
    while not condition():
        assert time.monotonic() < deadline, what
        also()
        time.sleep(0.02)


def test_healthy_operations_are_polled_while_a_token_command_hangs_and_two_providers_never_answer(
    db: str, sim: Simulator, home: Path, tmp_path: Path
) -> None:
    token = hanging_token(tmp_path)
    runs, release = token.runs, token.release
    often = {"base_delay": "50ms", "max_delay": "100ms", "deadline": "10m", "max_requests": 5000}
    healthy = write_contract(tmp_path / "healthy.toml", sim.url, name="healthy", timeout="30s", **often)
    hanging = write_contract(
        tmp_path / "hanging.toml", sim.url, name="hanging", timeout="30s", extra=token.extra, **often
    )
    for n in range(HEALTHY):
        sim.add_job(f"h{n}", [Step(body={"state": "running"}, times=100000)])
    for n in range(4):
        sim.add_job(f"t{n}", [Step(body={"state": "running"}, times=100000)])
    _enqueue(db, home, healthy, [f"h{n}" for n in range(HEALTHY)])
    _enqueue(db, home, hanging, [f"t{n}" for n in range(4)])
    release_first, release_second = threading.Event(), threading.Event()
    with (
        holding(release_first, None, guard=GUARD * 2) as first,
        holding(release_second, None, guard=GUARD * 2) as second,
    ):
        for name, server in (("silent-a", first), ("silent-b", second)):
            silent = write_contract(tmp_path / f"{name}.toml", server.url, name=name, **{**often, "timeout": "60s"})
            _enqueue(db, home, silent, [f"{name}-{n}" for n in range(2)])
        worker = _spawn_worker(db, home, "--concurrency", "32")
        try:

            def running() -> None:
                assert worker.poll() is None, f"the worker exited with {worker.returncode}: {_log_of(worker)[-2000:]}"

            def healthy_polls() -> int:
                return sum(1 for r in sim.requests() if r.job_id is not None and r.job_id.startswith("h"))

            _until(token.hanging, "the token command's refresh never started", also=running)
            _until(
                lambda: len(first.requests) >= 2 and len(second.requests) >= 2,
                "the silent providers were never asked",
                also=running,
            )
            command = token.hanging()
            assert command is not None
            start = healthy_polls()

            def still_hung() -> None:
                running()
                assert process_alive(command), (
                    f"the hung token command was given up on after {healthy_polls() - start} healthy polls"
                )

            _until(
                lambda: healthy_polls() >= start + MORE, "the healthy operations stopped being polled", also=still_hung
            )
            still_hung()
            assert not release.exists() and len(first.requests) == len(second.requests) == 2
            tokens_before = sum(1 for r in sim.requests() if r.job_id is not None and r.job_id.startswith("t"))
            release.touch()
            release_first.set()
            release_second.set()
            _until(
                lambda: (
                    sum(1 for r in sim.requests() if r.job_id is not None and r.job_id.startswith("t")) > tokens_before
                ),
                "the hung contract's operations were not polled once its command ended",
                also=running,
            )
        finally:
            release.touch()
            release_first.set()
            release_second.set()
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=GUARD)
    log = _log_of(worker)
    assert worker.returncode == 0, log[-3000:]
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert not [line for line in lines if line["event"] == "poll_failed"], log[-3000:]
    assert "tok-HUNG-CONTRACT-0042" not in log
    assert int(runs.read_text()) >= 2  # its first run, then the refresh that hung
