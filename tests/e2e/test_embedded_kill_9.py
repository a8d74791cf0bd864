"""kill -9 on the embedded path: one process running 20 `pollwarden.watch_sync` at once on one home, so their
admissions, claims, reservations and records go through SQLite group commit (one writer, batched COMMITs).
Killed at random moments, it must leave what a lone writer would: no operation whose counted requests are
fewer than the provider saw (a reservation is durable before its request goes out), and a log that verifies."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pollwarden.simulator import Simulator, Step
from pollwarden.store.sqlite import SQLiteStore
from tests.conftest import run_cli, write_contract

pytestmark = pytest.mark.slow

WATCHES = 20

_CHILD = r"""
import json, sys, threading
import pollwarden

contract, home, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
lock = threading.Lock()

def say(line):
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

def one(i):
    try:
        outcome = pollwarden.watch_sync(contract, f"job-{i}", home=home, operation_id=f"op-{i}")
        say(json.dumps({"op": f"op-{i}", "outcome": type(outcome).__name__}))
    except Exception as exc:
        say(json.dumps({"op": f"op-{i}", "error": f"{type(exc).__name__}: {exc}"}))

threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
for thread in threads:
    thread.start()
say("started")
for thread in threads:
    thread.join()
"""


def _spawn(contract: Path, home: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(contract), str(home), str(WATCHES)],
        env={**os.environ, "POLLWARDEN_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def _used(home: Path) -> dict[str, int]:
    store = SQLiteStore(home / "pollwarden.db")  # counters need no audit key
    try:
        return {s.record.operation_id: s.record.status_requests_used for s in store.all()}
    finally:
        store.close()


def _seen(sim: Simulator) -> dict[str, int]:
    return {f"op-{i}": sim.request_count(f"job-{i}") for i in range(WATCHES)}


def test_kill_9_during_twenty_embedded_watches_keeps_every_count_and_the_log(
    sim: Simulator, home: Path, tmp_path: Path
) -> None:
    for i in range(WATCHES):
        sim.add_job(f"job-{i}", [Step(body={"state": "running"}, delay=0.05)])
    contract = write_contract(
        tmp_path / "c.toml", sim.url, timeout="10s", base_delay="50ms", max_delay="100ms", max_requests=500
    )
    rng = random.Random(20)
    last: dict[str, int] = {}
    kills = 5
    for round_no in range(kills):
        proc = _spawn(contract, home)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "started", proc.stderr.read() if proc.stderr else ""
        if round_no % 2:
            before = sum(_seen(sim).values())
            deadline = time.monotonic() + 30
            while sum(_seen(sim).values()) < before + WATCHES:  # kill while many requests are in flight
                assert time.monotonic() < deadline, "the watches never polled"
                time.sleep(0.005)
        else:
            time.sleep(rng.uniform(0.0, 1.0))  # where the kill lands is the point, not a wait for something
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        used, seen = _used(home), _seen(sim)
        for op, count in seen.items():
            counted = used.get(op, 0)
            assert counted >= seen[op], f"round {round_no}: {op}: the provider saw {count}, only {counted} counted"
            assert counted >= last.get(op, 0), f"round {round_no}: {op}'s budget went back"
            assert counted - count <= round_no + 1, f"{op}: more reservations lost than there were crashes"
        last = used
        verified = run_cli("audit", "verify", home=home)
        assert verified.code == 0, f"round {round_no}: {verified.stdout}{verified.stderr}"
    assert sum(last.values()) > 0
    # Every watch resumes after the last crash and finishes: the operations were left whole.
    for i in range(WATCHES):
        sim.add_job(f"job-{i}", [Step(body={"state": "succeeded", "result_url": "/r"})])
    proc = _spawn(contract, home)
    out, err = proc.communicate(timeout=120)
    results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert sorted(r["op"] for r in results) == sorted(f"op-{i}" for i in range(WATCHES)), err
    assert {r.get("outcome") for r in results} == {"Succeeded"}, results
    used, seen = _used(home), _seen(sim)
    assert all(used[op] >= seen[op] for op in seen)
    verified = run_cli("audit", "verify", home=home)
    assert verified.code == 0, verified.stdout
