"""Item 20: a closed stdout and a signal end a command the way a shell user expects, with the record kept."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pollwarden.simulator import Simulator, Step
from pollwarden.store.sqlite import SQLiteStore
from tests.conftest import run_cli, write_contract


def _start(args: list[str], home: Path, **popen: object) -> subprocess.Popen[str]:
    proc: subprocess.Popen[str] = subprocess.Popen(
        [sys.executable, "-m", "pollwarden", *args],
        env={**os.environ, "POLLWARDEN_HOME": str(home)},
        text=True,
        stdin=subprocess.DEVNULL,
        **popen,  # type: ignore[call-overload]
    )
    return proc


def test_watch_into_a_closed_pipe_exits_141_without_a_traceback(sim: Simulator, tmp_path: Path, home: Path) -> None:
    sim.add_job("long-1", [Step(body={"state": "running"})])
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="50ms", max_delay="50ms", max_requests=50)
    read, write = os.pipe()
    proc = _start(["watch", "--contract", str(contract), "--job", "long-1", "--operation", "op"], home,
                  stdout=write, stderr=subprocess.PIPE)  # fmt: skip
    os.close(write)
    with os.fdopen(read) as reader:
        assert reader.readline().startswith("operation op:")  # `| head -1`: read one line, then go away
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


def test_audit_verify_into_a_closed_pipe(sim: Simulator, tmp_path: Path, home: Path) -> None:
    sim.add_job("odd-1", [Step(body={"state": "odd"})])
    contract = write_contract(tmp_path / "c.toml", sim.url)
    assert run_cli("watch", "--contract", str(contract), "--job", "odd-1", home=home).code == 4
    read, write = os.pipe()
    os.close(read)  # `| head` that has already gone
    proc = _start(["audit", "verify"], home, stdout=write, stderr=subprocess.PIPE)
    os.close(write)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 141, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr


@pytest.mark.parametrize(
    ("signum", "code", "ignored"),
    [
        (signal.SIGINT, 130, False),
        (signal.SIGINT, 130, True),
        (signal.SIGTERM, 143, False),
        (signal.SIGHUP, 129, False),
    ],
)
def test_a_signal_during_watch_keeps_the_record_and_a_resume_polls_at_once(
    signum: int, code: int, ignored: bool, sim: Simulator, tmp_path: Path, home: Path
) -> None:
    # A long request timeout makes the lease TTL 65 s; the signal gives the lease back (asserted on the store),
    # so a resume polls at once rather than waiting for a holder to be found dead or its lease to run out.
    sim.add_job("long-1", [Step(body={"state": "running"})])
    contract = write_contract(tmp_path / "c.toml", sim.url, timeout="30s", base_delay="1s", max_delay="1s")
    args = ["watch", "--contract", str(contract), "--job", "long-1", "--operation", "op", "--home", str(home)]

    def ignore_sigint() -> None:  # as a shell starts `pollwarden watch ... &`
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = _start(args, home, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                  preexec_fn=ignore_sigint if ignored else None)  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("operation op:")
    assert "state running" in proc.stdout.readline()  # the first poll is recorded; the signal lands after it
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    assert f"interrupted; the record is kept. Resume with: pollwarden watch --operation op --home {home}" in stderr
    status = json.loads(run_cli("status", "op", "--json", home=home).stdout)
    assert status["status_requests_used"] >= 1 and status["phase"] == "active"
    # The same `interrupted` event the Python API's cancel leaves, written by the engine for both.
    trail = json.loads(run_cli("story", "op", "--json", home=home).stdout)
    (interrupted,) = [e["data"] for e in trail if e["kind"] == "interrupted"]
    assert interrupted["by"] == "cli" and interrupted["why"] == signal.Signals(signum).name
    assert interrupted["resumable"] is True and interrupted["operation"] == "op"
    assert interrupted["status_requests_used"] == status["status_requests_used"]
    assert interrupted["deadline_at"] == status["deadline_at"]
    store = SQLiteStore(home / "pollwarden.db")  # the lease needs no audit key to read
    try:
        stored = store.get("op")
        assert stored is not None and stored.lease_owner is None and stored.lease_expires_at is None
    finally:
        store.close()
    story = run_cli("story", "op", home=home).stdout
    assert f"watch interrupted by cli ({signal.Signals(signum).name}); resume operation op" in story
    sim.add_job("long-1", [Step(body={"state": "succeeded", "result_url": "https://files.example/r"})])
    resumed = run_cli("watch", "--contract", str(contract), "--operation", "op", "--json", home=home, timeout=60)
    assert resumed.code == 0, resumed.stderr
    assert json.loads(resumed.stdout.splitlines()[-1])["outcome"] == "succeeded"
