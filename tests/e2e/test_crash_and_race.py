"""Single owner and durable budgets under kill -9 and concurrent watchers (R16, R20, R35, R38)."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pollwarden.core.durations import parse_rfc3339
from pollwarden.simulator import Simulator, Step
from pollwarden.store.sqlite import SQLiteStore
from tests.conftest import run_cli, write_contract

pytestmark = pytest.mark.slow


def _spawn(contract: Path, home: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pollwarden",
            "watch",
            "--contract",
            str(contract),
            "--operation",
            "op",
            "--json",
            *extra,
        ],
        env={**os.environ, "POLLWARDEN_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def _wait_for_request(sim: Simulator, count: int) -> None:
    deadline = time.monotonic() + 20
    while sim.request_count("job") < count:
        assert time.monotonic() < deadline, "the watcher never sent its request"
        time.sleep(0.01)


def _used(home: Path) -> int:
    store = SQLiteStore(home / "pollwarden.db")  # counters need no audit key
    try:
        stored = store.get("op")
        return 0 if stored is None else stored.record.status_requests_used
    finally:
        store.close()


def test_kill_9_never_resets_counts_nor_hides_requests(sim: Simulator, home: Path, tmp_path: Path) -> None:
    # Each answer takes 300 ms, so kills land before, during and after requests are in flight.
    # R36: each reservation and answer is stored when it happens: a kill anywhere loses neither.
    sim.add_job("job", [Step(body={"state": "running"}, delay=0.3)])
    # A long timeout makes the lease ttl 25 s: a resume that waited the lease out would be obvious.
    contract = write_contract(
        tmp_path / "c.toml",
        sim.url,
        timeout="10s",
        base_delay="50ms",
        max_delay="100ms",
        max_requests=40,
        deadline="5m",
    )
    rng = random.Random(7)
    last_used = 0
    for round_no in range(8):
        proc = _spawn(contract, home, "--job", "job")
        if round_no % 2:
            _wait_for_request(sim, sim.request_count("job") + 1)  # kill while a request is in flight
        else:
            time.sleep(rng.uniform(0.2, 0.9))  # where the kill lands is the point of the test, not a wait for it
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        kills = round_no + 1
        used = _used(home)
        seen = sim.request_count("job")
        assert used >= last_used, f"round {round_no}: the budget went back from {last_used} to {used}"
        assert seen <= used, f"round {round_no}: the provider saw {seen} requests but only {used} were counted"
        assert used - seen <= kills, "more reservations were lost than there were crashes"
        last_used = used
    assert last_used > 0
    # The last kill landed while a request was in flight, under its reservation's 25 s lease.
    store = SQLiteStore(home / "pollwarden.db")
    try:
        stored = store.get("op")
        assert stored is not None and stored.lease_expires_at is not None
        dead_lease_until = stored.lease_expires_at
    finally:
        store.close()
    # The job finishes; a resume right after the last crash takes over at once instead of waiting the lease out:
    # its takeover is dated before the dead process's lease would have expired (a stall only moves it later, and
    # would need some 25 s to reach the expiry).
    sim.add_job("job", [Step(body={"state": "succeeded", "result_url": "/r"})])
    ran = run_cli("watch", "--contract", str(contract), "--operation", "op", "--json", home=home)
    assert ran.code == 0, ran.stderr
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["status_requests_used"] >= last_used + 1
    assert sim.request_count("job") <= result["status_requests_used"]
    story = run_cli("story", "op", home=home).stdout
    assert "took over the operation" in story
    events = json.loads(run_cli("story", "op", "--json", home=home).stdout)
    taken_at = max(parse_rfc3339(e["at"]) for e in events if e["kind"] == "lease_taken_over")
    assert taken_at < dead_lease_until, "the resume sat out a dead process's lease"
    # Eight crashes in the middle of appends left a log that verifies: SQLite commits records atomically.
    verified = run_cli("audit", "verify", home=home)
    assert verified.code == 0, verified.stdout


def test_concurrent_watchers_never_send_two_requests_for_one_slot(sim: Simulator, home: Path, tmp_path: Path) -> None:
    sim.add_job(
        "job", [Step(body={"state": "running"}, times=12), Step(body={"state": "succeeded", "result_url": "/r"})]
    )
    contract = write_contract(
        tmp_path / "c.toml", sim.url, reservation_header=True, base_delay="50ms", max_delay="100ms", max_requests=30
    )
    procs = [_spawn(contract, home, "--job", "job") for _ in range(3)]
    outs = [p.communicate(timeout=60) for p in procs]
    codes = [p.returncode for p in procs]
    assert codes == [0, 0, 0], [o[1] for o in outs]
    final = json.loads(outs[0][0].strip().splitlines()[-1])
    reservations = [int(r.headers["x-pollwarden-reservation"]) for r in sim.requests("job")]
    # Every reservation number was used by exactly one request, and nothing was sent without one.
    assert sorted(reservations) == list(range(1, final["status_requests_used"] + 1))
    assert len(reservations) == 13
    # Requests keep to the schedule: no two within the minimum delay (half the 50 ms base), i.e. no burst.
    # Three writers appended to one chain; re-reading the head under the write lock keeps it valid.
    verified = run_cli("audit", "verify", home=home)
    assert verified.code == 0, verified.stdout
    times = sorted(r.at for r in sim.requests("job"))
    assert min(b - a for a, b in itertools.pairwise(times)) >= 0.02
