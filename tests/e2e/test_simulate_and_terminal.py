"""`pollwarden simulate` as a separate process, and `watch` on a real terminal (a pty)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, write_contract
from tests.e2e.pty_run import run_on_pty


def test_simulate_serves_a_watch_from_another_process(home: Path, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pollwarden", "simulate", "--port", "0", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("simulated provider listening on http://127.0.0.1:"), line
        url = line.rsplit(" ", 1)[1].strip()
        contract = write_contract(tmp_path / "c.toml", url)
        ran = run_cli("watch", "--contract", str(contract), "--job", "hint-1", "--json", home=home)
        assert ran.code == 0, ran.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_simulate_refuses_a_missing_token_variable(home: Path) -> None:
    ran = run_cli("simulate", "--port", "0", "--token-env", "PW_NOT_SET_ANYWHERE", home=home)
    assert ran.code == 2 and "PW_NOT_SET_ANYWHERE" in ran.stderr


def test_a_terminal_sees_the_countdown_and_a_pipe_does_not(sim: Simulator, home: Path, tmp_path: Path) -> None:
    sim.add_job("t", [Step(body={"state": "running"}), Step(body={"state": "succeeded", "result_url": "/r"})])
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="1500ms", max_delay="2s")
    env = {**os.environ, "POLLWARDEN_HOME": str(home)}
    code, screen = run_on_pty(["watch", "--contract", str(contract), "--job", "t", "--operation", "tty"], env)
    assert code == 0, screen
    # One line redrawn in place: each frame starts by going back to the line's start and erasing it.
    frames = [frame for frame in screen.split("\r\x1b[K") if frame.startswith("t: ")]
    assert frames, screen
    first = frames[0]
    assert first.startswith("t: running · checks 1/12 · next check in ") and "(backoff)" in first, first
    assert " · deadline in " in first and "\n" not in first
    assert "succeeded: job t, result /r" in screen.split("\r\x1b[K")[-1]  # the outcome, on a cleared line
    assert "state running · checks" not in screen  # no scrolling lines per decision on a terminal
    sim.add_job("q", [Step(body={"state": "running"}), Step(body={"state": "succeeded", "result_url": "/r"})])
    code, quiet = run_on_pty(
        ["watch", "--contract", str(contract), "--job", "q", "--operation", "quiet", "--quiet"], env
    )
    assert code == 0 and "\x1b[K" not in quiet and "state running · checks 1/12 · next check in" in quiet, quiet
    sim.add_job("p", [Step(body={"state": "running"}), Step(body={"state": "succeeded", "result_url": "/r"})])
    piped = run_cli("watch", "--contract", str(contract), "--job", "p", "--operation", "pipe", home=home)
    assert piped.code == 0
    assert " · deadline in " not in piped.stdout and "\r" not in piped.stdout  # no live line
    assert "state running · checks 1/12 · next check in" in piped.stdout  # a plain line per decision
