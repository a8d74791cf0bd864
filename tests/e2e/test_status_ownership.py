"""`status` tells an operation someone is watching from one nobody is (part 12), with real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, write_contract


def _watch(contract: Path, home: Path, operation: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "POLLWARDEN_HOME": str(home)}
    args = ["watch", "--contract", str(contract), "--job", "job", "--operation", operation]
    return subprocess.Popen([sys.executable, "-m", "pollwarden", *args], env=env, stdout=subprocess.DEVNULL)


def _first_poll_recorded(home: Path, operation: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        ran = run_cli("status", operation, "--json", home=home)
        if ran.code == 0:
            shown: dict[str, Any] = json.loads(ran.stdout)
            if shown["status_requests_used"] >= 1 and not shown["polling_now"]:
                return shown
        assert time.monotonic() < deadline, "the watch never recorded its first poll"
        time.sleep(0.05)


WIDE = {"COLUMNS": "100"}
"""The widest a table gets: the owner column is the first a narrower one leaves out (pytest sets COLUMNS=80)."""


def test_a_live_watch_is_named_and_a_killed_one_is_orphaned(sim: Simulator, home: Path, tmp_path: Path) -> None:
    sim.add_job("job", [Step(body={"state": "running"})])
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="2s", max_delay="2s", deadline="10m")
    proc = _watch(contract, home, "op")
    try:
        live = _first_poll_recorded(home, "op")
        assert live["owner"] == {"kind": "watch", "host": os.uname().nodename, "pid": proc.pid, "alive": True}
        assert (live["overdue"], live["orphaned"]) == (False, False)
        table = run_cli("status", home=home, env=WIDE).stdout
        assert f"watch on {os.uname().nodename} (pid {proc.pid}), since" in table
        assert run_cli("status", "--orphaned", home=home).stdout.strip() == "no orphaned operations"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    gone = json.loads(run_cli("status", "op", "--json", home=home).stdout)
    assert gone["owner"]["alive"] is False and gone["orphaned"] is True and gone["phase"] == "active"
    orphans = json.loads(run_cli("status", "--orphaned", "--json", home=home).stdout)
    assert [o["operation"] for o in orphans] == ["op"]
    assert "gone (last" in run_cli("status", home=home, env=WIDE).stdout  # the rest in `status op`
    one = run_cli("status", "op", home=home).stdout
    assert "flags                      orphaned" in one
    # A resume makes it watched again: the new process is its owner, and nothing is flagged.
    sim.add_job("job", [Step(body={"state": "succeeded", "result_url": "/r"})])
    assert run_cli("watch", "--operation", "op", home=home).code == 0
    done = json.loads(run_cli("status", "op", "--json", home=home).stdout)
    assert done["phase"] == "succeeded" and done["orphaned"] is False


def test_the_filters_take_no_operation_id(home: Path) -> None:
    ran = run_cli("status", "op", "--overdue", home=home)
    assert ran.code == 2 and "--overdue and --orphaned filter the table" in ran.stderr
