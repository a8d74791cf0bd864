"""`story`, `why` and `decisions` on a terminal of 80 columns (issue 28): their prose is word-wrapped to the width,
so the terminal never wraps a line and no word is lost (a cut would drop the provider's error or what an option
does); with `COLUMNS` set, piped output is wrapped to it; piped without it, every line is as written (scripts parse
it). Then every view a person reads on a terminal, over one fleet, fits 80 columns."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pollwarden.cli.terminal import cell_width
from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, write_contract
from tests.e2e.pty_run import run_on_pty
from tests.e2e.test_terminal_width import _drawn

COLUMNS = 80
CONTRACT = "deploys-" + "n" * 44
"""Long enough that the schedules line naming it is wider than the terminal."""
OPERATION = "op-" + "w" * 60
JOB = "deploys-20261202-193332-" + "x" * 40 + "-0417"
ERROR = {"code": "E_HEALTH", "message": "health check failed: 3/5 pods CrashLoopBackOff; " * 4}


@pytest.fixture
def stopped(sim: Simulator, home: Path, tmp_path: Path) -> Path:
    """A home whose one operation's job failed at the provider with a long error: a decision waits."""
    sim.add_job(JOB, [Step(body={"state": "running"}), Step(body={"state": "failed", "error": ERROR})])
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="1s", max_delay="1s")
    contract.write_text(contract.read_text().replace('name = "exports"', f'name = "{CONTRACT}"'))
    ran = run_cli("watch", "--contract", str(contract), "--job", JOB, "--operation", OPERATION, home=home)
    assert ran.code == 3, ran.stderr
    return contract


def _on_terminal(args: list[str], home: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"POLLWARDEN_HOME": str(home)}
    code, screen = run_on_pty(args, env, columns=COLUMNS, timeout=60)
    assert code == 0, screen
    return [piece for piece in _drawn(screen) if piece]


PROSE = [["story", OPERATION], ["why", OPERATION], ["decisions"], ["decisions", OPERATION], ["decisions", "--all"]]


@pytest.mark.parametrize("args", PROSE, ids=" ".join)
def test_prose_is_word_wrapped_to_the_terminal_and_keeps_every_word(stopped: Path, home: Path, args: list[str]) -> None:
    piped = run_cli(*args, home=home, env={"COLUMNS": ""})
    assert piped.code == 0, piped.stderr
    assert any(cell_width(line) >= COLUMNS for line in piped.stdout.splitlines())  # as written: wider than 80
    drawn = _on_terminal(args, home)
    too_wide = [line for line in drawn if cell_width(line) >= COLUMNS]
    assert not too_wide, too_wide
    # Wrapped at spaces, never cut: the same words in the same order as the pipe's.
    assert " ".join(drawn).split() == piped.stdout.split()
    assert any(line.startswith("  ") and not line.startswith("   ") for line in drawn)  # a hanging indent


@pytest.mark.parametrize("args", PROSE[:3], ids=" ".join)
def test_piped_prose_is_wrapped_to_columns_when_it_is_set(stopped: Path, home: Path, args: list[str]) -> None:
    piped = run_cli(*args, home=home, env={"COLUMNS": ""}).stdout
    narrow = run_cli(*args, home=home, env={"COLUMNS": "60"}).stdout
    # Every character kept (an id longer than a row of 60 is broken across rows, so compare without the spaces).
    assert "".join(narrow.split()) == "".join(piped.split()) and narrow != piped
    assert all(cell_width(line) < 60 for line in narrow.splitlines()), narrow


def test_every_terminal_view_fits_80_columns(sim: Simulator, stopped: Path, home: Path) -> None:
    """Each view of one fleet, drawn on a terminal of 80 columns: `watch` (its banner, live line and outcome:
    tests/e2e/test_terminal_width.py draws its redraws), `status`, `status OP`, `contracts`, `story`, `why`,
    `decisions`, `schedules`. `metrics` serves HTTP and logs JSON lines (a log is not a view: nothing is cut)."""
    sim.add_job("again-1", [Step(body={"state": "running"}), Step(body={"state": "succeeded", "result_url": "/r"})])
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"POLLWARDEN_HOME": str(home)}
    code, screen = run_on_pty(
        ["watch", "--contract", str(stopped), "--job", "again-1", "--operation", "op-again-" + "a" * 60],
        env,
        columns=COLUMNS,
        timeout=60,
    )
    assert code == 0, screen
    views: dict[str, list[str]] = {"watch": [piece for piece in _drawn(screen) if piece]}
    for args in (["status"], ["status", OPERATION], ["contracts"], *PROSE, ["schedules"]):
        views[" ".join(args)] = _on_terminal(args, home)
    assert all(views.values()), views  # each drew something
    assert any(CONTRACT in line for line in views["schedules"]) or any("…" in line for line in views["schedules"])
    # A table line may fill all 80 columns (printed once, its newline follows); a cut or wrapped line stops at 79.
    fits = {name: COLUMNS if name in ("status", "contracts") else COLUMNS - 1 for name in views}
    too_wide = {
        name: wide for name, lines in views.items() if (wide := [x for x in lines if cell_width(x) > fits[name]])
    }
    assert not too_wide, too_wide
