"""`pollwarden worker --processes N`: a real supervisor and its children, the real SQLite file, a loopback provider."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from pollwarden.core.reasons import Phase
from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, write_contract
from tests.e2e.conftest import store_of as _store
from tests.e2e.test_worker import _check_invariants, _enqueue

pytestmark = pytest.mark.slow

HANG_GUARD = 120.0
"""How long a wait for another process may last before the test fails as hung: a guard, not a measurement."""


class Group:
    """One `pollwarden worker --processes N` command, its stderr (its own lines and its children's) in a file."""

    def __init__(self, db: str, home: Path, *extra: str, processes: str = "2", own_group: bool = False) -> None:
        self.log_path = home / f"group-{time.monotonic_ns()}.log"
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pollwarden", "worker", "--processes", processes, "--db", db,
                 "--concurrency", "4", *extra],
                env={**os.environ, "POLLWARDEN_HOME": str(home)},
                stdout=subprocess.DEVNULL,
                stderr=log,
                stdin=subprocess.DEVNULL,
                process_group=0 if own_group else None,  # a terminal's Ctrl-C reaches its whole process group
            )  # fmt: skip

    def lines(self) -> list[dict[str, Any]]:
        # The text after the last newline may be a line still being written; a line cut by another process's
        # write would not parse.
        whole = self.log_path.read_text().split("\n")[:-1]
        return [json.loads(line) for line in whole if line.startswith("{")]

    def events(self, event: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line["event"] == event]

    def children(self) -> list[int]:
        """Pids of the children started so far."""
        return [line["pid"] for line in self.events("worker_process_started")]

    def until(self, what: str, holds: Any) -> Any:
        """Wait for a fact about the log (`holds` returns a truthy value), failing as hung past the guard."""
        deadline = time.monotonic() + HANG_GUARD
        while not (found := holds()):
            assert time.monotonic() < deadline, f"never saw {what}:\n{self.log_path.read_text()[-3000:]}"
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}"
            time.sleep(0.05)
        return found

    def polled_by(self) -> Counter[str]:
        return Counter(line["worker"] for line in self.events("polled"))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=HANG_GUARD)


def _gone(pid: int) -> bool:
    """The process has ended: no such pid, or a zombie its new parent has not reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _held_leases(db: str, home: Path) -> list[tuple[str, str]]:
    store = _store(db, home)
    try:
        return [(s.record.operation_id, s.lease_owner) for s in store.all() if s.lease_owner is not None]
    finally:
        store.close()


def _both_polling(sim: Simulator, tmp_path: Path, home: Path, db: str, count: int, delay: float = 0.02) -> Group:
    """`count` jobs that run for ever (each answer `delay` seconds late), and a group of two once both its children
    poll them."""
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="50ms", max_delay="100ms",
                              reservation_header=True, max_requests=100_000, deadline="30m")  # fmt: skip
    for n in range(count):
        sim.add_job(f"r{n}", [Step(body={"state": "running"}, delay=delay)])
    _enqueue(db, home, contract, [f"r{n}" for n in range(count)])
    group = Group(db, home)
    try:
        group.until("both children polling", lambda: len(group.polled_by()) == 2)
    except BaseException:
        group.stop()
        raise
    return group


def test_two_processes_drain_the_queue_as_two_owners_and_one_metrics_page_sums_them(
    db: str, sim: Simulator, home: Path, tmp_path: Path
) -> None:
    count = 120
    contract = write_contract(
        tmp_path / "c.toml", sim.url, reservation_header=True, base_delay="100ms", max_delay="200ms", max_requests=5
    )
    for n in range(count):
        sim.add_job(f"j{n}", [Step(body={"state": "running"}, times=2),
                              Step(body={"state": "succeeded", "result_url": "/r"})])  # fmt: skip
    _enqueue(db, home, contract, [f"j{n}" for n in range(count)])
    group = Group(db, home, "--metrics-port", "0")
    try:
        url = group.until("the metrics address", lambda: group.events("metrics_serving"))[0]["url"]
        early = httpx.get(url, timeout=30).text  # while operations are active: the fleet gauges have a row
        store = _store(db, home)
        try:
            deadline = time.monotonic() + HANG_GUARD
            while store.next_due() is not None or not all(s.record.is_final for s in store.all()):
                assert time.monotonic() < deadline and group.proc.poll() is None, group.log_path.read_text()[-3000:]
                time.sleep(0.2)
            records = [s for s in store.all()]
        finally:
            store.close()
        metrics = httpx.get(url, timeout=30).text
    finally:
        code = group.stop()
    assert code == 0, group.log_path.read_text()[-3000:]
    assert all(s.record.phase is Phase.SUCCEEDED for s in records)
    _check_invariants(sim, db, home)  # no reservation polled twice, nothing sent uncounted, the audit verifies
    started = group.events("worker_started")
    assert len(started) == 2 and len({line["worker"] for line in started}) == 2
    # Both children polled, each as its own owner, and the store names both as watchers.
    polled = group.polled_by()
    assert set(polled) == {line["worker"] for line in started}, polled
    assert {s.watcher for s in records} <= set(polled) and len({s.watcher for s in records}) == 2
    # The supervisor's page sums the children: the provider saw exactly as many status requests as it counts.
    sent = len([r for r in sim.requests() if r.job_id and r.job_id.startswith("j")])
    assert f'pollwarden_provider_requests_total{{provider="exports"}} {float(sent)}' in metrics, metrics
    assert sum(polled.values()) == sent
    # The fleet's gauges, once for the group (the database counts them; the children do not serve them).
    active = re.findall(r'^pollwarden_fleet_active\{contract="exports"\} (\d+)\.0$', early, re.MULTILINE)
    assert len(active) == 1 and 0 < int(active[0]) <= count, early
    assert metrics.count("# TYPE pollwarden_fleet_active gauge") == 1
    assert f"pollwarden_budget_used_ratio_count {float(count)}" in metrics  # a histogram, summed too
    assert [line["event"] for line in group.lines()][-1] == "supervisor_stopped"
    assert len(group.events("worker_stopped")) == 2


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_sigterm_stops_every_child_and_leaves_no_lease_held(
    db: str, sim: Simulator, home: Path, tmp_path: Path
) -> None:
    group = _both_polling(sim, tmp_path, home, db, 40)
    code = group.stop()
    assert code == 0, group.log_path.read_text()[-3000:]
    children = group.children()
    assert len(children) == 2 and all(_gone(pid) for pid in children)
    assert len(group.events("worker_stopped")) == 2
    assert _held_leases(db, home) == [], group.log_path.read_text()[-6000:]
    verified = run_cli("audit", "verify", "--db", db, home=home)
    assert verified.code == 0, verified.stdout + verified.stderr


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_child_killed_with_sigkill_is_restarted_and_polling_goes_on(
    db: str, sim: Simulator, home: Path, tmp_path: Path
) -> None:
    group = _both_polling(sim, tmp_path, home, db, 40)
    try:
        victim = group.children()[0]
        os.kill(victim, signal.SIGKILL)
        ended = group.until("the dead child's log line", lambda: group.events("worker_process_ended"))
        assert ended[0]["pid"] == victim and ended[0]["ended"] == "killed by SIGKILL", ended
        assert ended[0]["restart_in"] == 0.1  # the first restart after a death: the backoff's first step
        successor = group.until("a third child", lambda: group.children()[2:])[0]
        new_owner = group.until(
            "the successor polling",
            lambda: [w for w in group.polled_by() if f":{successor}:" in w],
        )
        assert new_owner
    finally:
        code = group.stop()
    assert code == 0, group.log_path.read_text()[-3000:]
    # The leases left are the killed child's only (they expire on their own); the others gave theirs back.
    assert all(f":{victim}:" in owner for _, owner in _held_leases(db, home))
    for job in (f"r{n}" for n in range(40)):
        numbers = [int(r.headers["x-pollwarden-reservation"]) for r in sim.requests(job)]
        assert len(numbers) == len(set(numbers)), (job, numbers)


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_the_children_stop_by_themselves_when_the_supervisor_is_killed(
    db: str, sim: Simulator, home: Path, tmp_path: Path
) -> None:
    # Answers that take a second: a child holds leases through almost all of each batch, so once one is seen held
    # it still is at the kill (with quick answers the kill sometimes fell between batches, when none was held).
    group = _both_polling(sim, tmp_path, home, db, 20, delay=1.0)
    children = group.children()
    group.until("a child holding a lease", lambda: _held_leases(db, home))
    group.proc.send_signal(signal.SIGKILL)
    group.proc.wait()
    deadline = time.monotonic() + HANG_GUARD
    while not all(_gone(pid) for pid in children):
        assert time.monotonic() < deadline, f"children still running after the supervisor died: {children}"
        time.sleep(0.05)
    # A kill -9 of the command is one of every process in it (SIGKILL from the kernel): nothing stopped
    # gracefully, and what the children held is left as one killed worker leaves it.
    assert group.events("worker_stopped") == []
    held = _held_leases(db, home)
    assert held and all(any(f":{pid}:" in owner for pid in children) for _, owner in held), held
    # The next worker takes a dead holder's lease at once (holder_dead), without waiting out its TTL.
    after = Group(db, home, processes="1")
    try:
        taken = {operation for operation, _ in held}
        after.until(
            "the new worker polling what the dead children held",
            lambda: taken <= {line["operation"] for line in after.events("polled")},
        )
    finally:
        assert after.stop() == 0
    for job in (f"r{n}" for n in range(20)):
        numbers = [int(r.headers["x-pollwarden-reservation"]) for r in sim.requests(job)]
        assert len(numbers) == len(set(numbers)), (job, numbers)


@pytest.mark.parametrize("value", ["0", "65", "-1", "two", "1.5", ""])
def test_bad_process_counts_are_exit_2_naming_the_flag(value: str, home: Path) -> None:
    ran = run_cli("worker", "--processes", value, home=home)
    assert ran.code == 2, (ran.stdout, ran.stderr)
    assert "--processes" in ran.stderr and "auto" in ran.stderr
    assert "supervisor_started" not in ran.stderr and not (home / "pollwarden.db").exists()


@pytest.mark.parametrize("bad", ["db", "provider-rate", "metrics-port"])
def test_a_bad_configuration_is_exit_2_before_any_child_starts(bad: str, home: Path, tmp_path: Path) -> None:
    directory = tmp_path / "a-directory"
    directory.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        flags, named = {
            "db": (["--db", str(directory)], str(directory)),
            "provider-rate": (["--provider-rate", "exports=fast"], "--provider-rate"),
            "metrics-port": (["--metrics-port", str(taken.getsockname()[1])], "cannot serve metrics"),
        }[bad]
        ran = run_cli("worker", "--processes", "2", *flags, home=home)
    assert ran.code == 2, (ran.stdout, ran.stderr)
    assert named in ran.stderr
    assert "worker_process_started" not in ran.stderr and "worker_started" not in ran.stderr


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_burst_of_stop_signals_to_the_whole_group_stops_it(processes: str, db: str, home: Path) -> None:
    """Ctrl-C in a terminal, `timeout` and systemd signal every process of the group, and the supervisor passes
    the signal on too: each worker is given it at least twice at once. A handler that took a lock (Event.set)
    while the one it interrupted held it would wait for ever."""
    group = Group(db, home, processes=processes, own_group=True)
    try:
        group.until("every worker started", lambda: len(group.events("worker_started")) == int(processes))
        for _ in range(50):
            os.killpg(group.proc.pid, signal.SIGINT)
    finally:
        try:
            code = group.proc.wait(timeout=HANG_GUARD)
        finally:
            if group.proc.poll() is None:  # hung: take the whole group down rather than leave it
                os.killpg(group.proc.pid, signal.SIGKILL)
    assert code == 0, group.log_path.read_text()[-3000:]
    assert len(group.events("worker_stopped")) == int(processes)


def test_sighup_stops_a_polling_worker_and_leaves_no_lease(db: str, sim: Simulator, home: Path, tmp_path: Path) -> None:
    """SIGHUP (the terminal closed) is not one of the worker's stop signals but the command's interrupt: it
    ended the command's wait while the lanes went on polling for ever behind it. Now the lanes stop too: each
    finishes its batch and gives its leases back, and the command says it was interrupted (exit 129)."""
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="50ms", max_delay="100ms",
                              reservation_header=True, max_requests=100_000, deadline="30m")  # fmt: skip
    for n in range(8):
        sim.add_job(f"h{n}", [Step(body={"state": "running"}, delay=0.02)])
    _enqueue(db, home, contract, [f"h{n}" for n in range(8)])
    group = Group(db, home, processes="1")
    try:
        group.until("polling", lambda: group.events("polled"))
        group.proc.send_signal(signal.SIGHUP)
    finally:
        try:
            code = group.proc.wait(timeout=HANG_GUARD)
        finally:
            if group.proc.poll() is None:  # polling on: take it down rather than leave it
                group.proc.kill()
    assert code == 128 + signal.SIGHUP, group.log_path.read_text()[-3000:]
    assert "interrupted by SIGHUP" in group.log_path.read_text()
    assert _held_leases(db, home) == [], group.log_path.read_text()[-6000:]
    store = _store(db, home)
    try:
        for stored in store.all():  # still active, resumable: the provider saw no more than was counted
            seen = sim.requests(stored.record.job_id)
            assert len(seen) <= stored.record.status_requests_used and not stored.record.is_final
    finally:
        store.close()
    verified = run_cli("audit", "verify", "--db", db, home=home)
    assert verified.code == 0, verified.stdout + verified.stderr
