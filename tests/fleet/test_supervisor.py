"""The supervisor of `worker --processes N` with real child processes that stand in for workers: how it restarts,
when it gives up, and how a child follows it."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from pollwarden.fleet.defaults import SUPERVISOR_ENV
from pollwarden.fleet.supervisor import Supervisor, ended_how, start_parent_watch
from pollwarden.fleet.worker import JsonLog
from tests.conftest import run_cli

HANG_GUARD = 120.0


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def _sigterm_after(stream: io.StringIO, ended: int) -> threading.Thread:
    """SIGTERM to this process (the supervisor's main thread handles it) once `ended` children have ended."""

    def watch() -> None:
        event = threading.Event()
        for _ in range(int(HANG_GUARD / 0.02)):
            if sum(line["event"] == "worker_process_ended" for line in _lines(stream)) >= ended:
                break
            event.wait(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_child_that_keeps_dying_is_restarted_with_a_doubling_backoff_until_sigterm() -> None:
    stream = io.StringIO()
    crash = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    supervisor = Supervisor(crash, 1, log=JsonLog(stream, worker="test"), check_every=0.01)
    watcher = _sigterm_after(stream, 4)
    assert supervisor.run() == 0
    watcher.join(HANG_GUARD)
    lines = _lines(stream)
    ended = [line for line in lines if line["event"] == "worker_process_ended"]
    started = [line for line in lines if line["event"] == "worker_process_started"]
    assert [line["restart_in"] for line in ended[:4]] == [0.1, 0.2, 0.4, 0.8]
    assert all(line["ended"] == "killed by SIGKILL" for line in ended)
    assert [line["pid"] for line in ended] == [line["pid"] for line in started][: len(ended)]
    assert lines[-1] == {**lines[-1], "event": "supervisor_stopped", "why": "SIGTERM"}
    assert signal.getsignal(signal.SIGTERM) is not supervisor._on_signal  # the previous handler is back


def test_a_child_that_exits_2_stops_the_group_with_exit_2(capfd: Any) -> None:
    stream = io.StringIO()
    refuse = [sys.executable, "-c", "import sys; sys.stderr.write('no such database\\n'); sys.exit(2)"]
    supervisor = Supervisor(refuse, 3, log=JsonLog(stream, worker="test"), check_every=0.01)
    assert supervisor.run() == 2
    assert supervisor.refused is not None and supervisor.refused[1] == 2
    assert "no such database" in capfd.readouterr().err  # the child's own words, on the stderr it shares
    lines = _lines(stream)
    assert not [line for line in lines if line["event"] == "worker_process_ended" and line["restart_in"]]
    assert lines[-1]["event"] == "supervisor_stopped"
    assert all(slot.proc is None or slot.proc.returncode is not None for slot in supervisor.slots)


def test_sigterm_reaches_every_child_and_is_waited_for(tmp_path: Path) -> None:
    stream = io.StringIO()
    # Each child ends only when told (exit 0 from its handler), as a worker finishes its in-flight requests; it
    # leaves a file once its handler is in place, so the SIGTERM is sent to children that are ready for it.
    child = [sys.executable, "-c", "import os, signal, sys, time\n"
             "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
             f"open(os.path.join({str(tmp_path)!r}, str(os.getpid())), 'w').close()\n"
             "time.sleep(600)"]  # fmt: skip
    supervisor = Supervisor(child, 2, log=JsonLog(stream, worker="test"), check_every=0.01)

    def stop_when_ready() -> None:
        event = threading.Event()
        for _ in range(int(HANG_GUARD / 0.02)):
            if len(list(tmp_path.iterdir())) == 2:
                break
            event.wait(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop_when_ready, daemon=True).start()
    assert supervisor.run() == 0
    codes = [slot.proc.returncode if slot.proc else None for slot in supervisor.slots]
    assert codes == [0, 0], (codes, stream.getvalue())
    assert sorted(int(p.name) for p in tmp_path.iterdir()) == sorted(s.proc.pid for s in supervisor.slots if s.proc)
    assert supervisor.env[SUPERVISOR_ENV] == str(os.getpid())  # what each child checks is still its parent


def test_how_a_child_ended_is_said_in_words() -> None:
    assert ended_how(-9) == "killed by SIGKILL"
    assert ended_how(1) == "exit 1"
    assert ended_how(-200) == "killed by signal 200"


def test_a_child_follows_only_the_parent_it_was_given() -> None:
    code = (
        "import os, threading; from pollwarden.fleet.supervisor import follow_supervisor, watch_parent;"
        " print(follow_supervisor(str(os.getppid())), follow_supervisor(str(os.getppid() + 1)),"
        " watch_parent(str(os.getppid()), threading.Event()) is None)"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD)
    # On Linux the kernel follows the parent (PR_SET_PDEATHSIG), so no thread watches it.
    linux = sys.platform.startswith("linux")
    assert ran.stdout.split() == ["True", "False", str(linux)], ran.stderr


def test_a_child_whose_supervisor_is_already_gone_starts_nothing(tmp_path: Any) -> None:
    home = tmp_path / "home"
    ran = run_cli("worker", "--processes", "1", home=home, env={SUPERVISOR_ENV: "1"})
    assert ran.code == 0, ran.stderr
    assert [json.loads(line)["event"] for line in ran.stderr.splitlines()] == ["supervisor_gone"]


def test_the_parent_watch_stops_a_worker_whose_parent_changed() -> None:
    stop = threading.Event()
    start_parent_watch(str(os.getppid() + 1), stop, every=0.01)
    assert stop.wait(HANG_GUARD)


def test_a_supervisor_pid_that_is_no_pid_is_exit_2_naming_the_variable(tmp_path: Any) -> None:
    """Only a supervisor sets it, always to its pid: anything else was set by hand or leaked from elsewhere, and a
    worker that then started nothing and exited 0 would look to systemd like one that finished its work."""
    for value in ("abc", "-5", "0", "9" * 5000, "1\n2"):
        ran = run_cli("worker", "--processes", "1", home=tmp_path / "home", env={SUPERVISOR_ENV: value})
        assert ran.code == 2, (value[:20], ran.stderr)
        assert SUPERVISOR_ENV in ran.stderr and "Traceback" not in ran.stderr and len(ran.stderr) < 600
