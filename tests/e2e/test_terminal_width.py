"""`watch` on a terminal of 80 columns: no line it prints wraps, the live line's redraws included.

A line one column too long wraps, and a redrawn line that wrapped leaves its first row behind on every redraw.
The ids, the contract path and the provider's error here are all long, so every line would be."""

from __future__ import annotations

import os
from pathlib import Path

from pollwarden.cli.terminal import cell_width
from pollwarden.simulator import Simulator, Step
from tests.conftest import write_contract
from tests.e2e.pty_run import run_on_pty

COLUMNS = 80


def _drawn(screen: str) -> list[str]:
    """Every stretch of text the terminal drew from a line's start: split at newlines and at each return to the
    first column (a redraw), with the erase-line sequence taken out."""
    return [piece.replace("\x1b[K", "") for row in screen.split("\n") for piece in row.split("\r")]


def test_no_line_watch_prints_is_wider_than_the_terminal(sim: Simulator, home: Path, tmp_path: Path) -> None:
    job = "deploys-20261202-193332-" + "x" * 60 + "-0417"
    error = {"code": "E_HEALTH", "message": "health check failed: 3/5 pods CrashLoopBackOff; " * 4}
    sim.add_job(
        job,
        [Step(body={"state": "running"}, times=2), Step(body={"state": "failed", "error": error})],
    )
    directory = tmp_path / ("contracts-" + "d" * 60)
    directory.mkdir()
    contract = write_contract(directory / "c.toml", sim.url, base_delay="1s", max_delay="1s")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"POLLWARDEN_HOME": str(home)}
    code, screen = run_on_pty(
        ["watch", "--contract", str(contract), "--job", job, "--operation", "op-" + "o" * 70],
        env,
        columns=COLUMNS,
        timeout=60,
    )
    assert code == 3, screen
    drawn = _drawn(screen)
    assert any(piece.startswith("deploys-2026") and "checks" in piece for piece in drawn), screen  # the live line
    assert any(piece.startswith("operation op-") for piece in drawn), screen  # the banner
    assert any(piece.startswith("External job failed") for piece in drawn), screen  # the outcome
    too_wide = [piece for piece in drawn if cell_width(piece) >= COLUMNS]
    assert not too_wide, too_wide
    assert any(piece.endswith("…") for piece in drawn)  # cut, not dropped


def test_a_pipe_gets_every_word(sim: Simulator, home: Path, tmp_path: Path) -> None:
    """A log is not a terminal: nothing is cut there."""
    from tests.conftest import run_cli

    job = "long-" + "y" * 90
    sim.add_job(job, [Step(body={"state": "succeeded", "result_url": "/r"})])
    contract = write_contract(tmp_path / "c.toml", sim.url)
    ran = run_cli("watch", "--contract", str(contract), "--job", job, home=home)
    assert ran.code == 0 and job in ran.stdout and "…" not in ran.stdout


def test_no_line_of_one_operations_status_is_wider_than_the_terminal(
    sim: Simulator, home: Path, tmp_path: Path
) -> None:
    """`status OP` on a terminal: its key/value lines (a long job id, the provider's error, the owner) are cut,
    never wrapped; piped, every word is kept."""
    from tests.conftest import run_cli

    job = "deploys-20261202-193332-" + "z" * 60 + "-0417"
    error = {"code": "E_HEALTH", "message": "health check failed: 3/5 pods CrashLoopBackOff; " * 4}
    sim.add_job(job, [Step(body={"state": "failed", "error": error})])
    contract = write_contract(tmp_path / "c.toml", sim.url)
    operation = "op-" + "s" * 70
    assert run_cli("watch", "--contract", str(contract), "--job", job, "--operation", operation, home=home).code == 3
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"POLLWARDEN_HOME": str(home)}
    code, screen = run_on_pty(["status", operation], env, columns=COLUMNS, timeout=60)
    assert code == 0, screen
    drawn = [piece for piece in _drawn(screen) if piece]
    assert any(piece.startswith("job ") for piece in drawn), screen
    too_wide = [piece for piece in drawn if cell_width(piece) >= COLUMNS]
    assert not too_wide, too_wide
    assert any(piece.endswith("…") for piece in drawn)
    piped = run_cli("status", operation, home=home)
    assert job in piped.stdout and "CrashLoopBackOff" in piped.stdout and "…" not in piped.stdout
