"""The fleet worker end to end: real worker processes, a real provider on loopback, SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import psycopg
import pytest

from pollwarden import events as ev
from pollwarden.core.contract.parse import load_contract
from pollwarden.core.durations import parse_rfc3339
from pollwarden.core.reasons import Phase
from pollwarden.core.record import new_record
from pollwarden.fleet.defaults import POSTGRES_POOL
from pollwarden.simulator import Simulator, Step
from tests.conftest import install, run_cli, write_contract
from tests.e2e.conftest import store_of as _store

pytestmark = pytest.mark.slow


# `db` (tests/e2e/conftest.py): each test that takes it runs on SQLite and on PostgreSQL.


def _enqueue(db: str, home: Path, contract_path: Path, jobs: list[str]) -> None:
    contract = load_contract(contract_path)
    store = _store(db, home)
    try:
        now = store.db_now()
        install(store, contract)
        for job in jobs:
            record = new_record(contract, operation_id=f"op-{job}", job_id=job, now=now)
            store.create(record, contract.source_text, ev.Created.prepared(record.summary()))
    finally:
        store.close()


def _spawn_worker(db: str, home: Path, *extra: str) -> subprocess.Popen[str]:
    """Logs go to a file: a pipe nobody reads fills up and stalls the worker on its next log line."""
    path = home / f"worker-{time.monotonic_ns()}.log"
    log = path.open("w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "pollwarden", "worker", "--processes", "1", "--db", db, "--concurrency", "8", *extra],
        env={**os.environ, "POLLWARDEN_HOME": str(home)},
        stdout=subprocess.DEVNULL,
        stderr=log,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    log.close()
    _LOGS[worker.pid] = path
    return worker


_LOGS: dict[int, Path] = {}


def _log_of(worker: subprocess.Popen[str]) -> str:
    return _LOGS[worker.pid].read_text()


def _wait_all_final(
    db: str, home: Path, count: int, within: float, workers: list[subprocess.Popen[str]] | None = None
) -> list[object]:
    deadline = time.monotonic() + within
    store = _store(db, home)
    try:
        while True:
            # One indexed MIN() while any operation is active: decoding every record (1,000 of them) five times
            # a second took a share of the two cores from the workers it waits for.
            if store.next_due() is None:
                records = [s.record for s in store.all()]
                if len(records) == count and all(r.is_final for r in records):
                    return list(records)
            for worker in workers or []:
                assert worker.poll() is None, f"a worker exited early with {worker.returncode}"
            if time.monotonic() >= deadline:
                active = sum(not s.record.is_final for s in store.all())
                raise AssertionError(f"{active} of {count} operations still active after {within}s")
            time.sleep(0.2)
    finally:
        store.close()


def _drain_and_scrape(db: str, home: Path, count: int) -> tuple[subprocess.Popen[str], list[object], str]:
    """One worker with metrics, until `count` operations are final; its metrics scraped then, and it stopped."""
    worker = _spawn_worker(db, home, "--metrics-port", "0")
    try:
        records = _wait_all_final(db, home, count, within=60, workers=[worker])
        metrics_url = next(
            json.loads(line)["url"] for line in _log_of(worker).splitlines() if '"metrics_serving"' in line
        )
        metrics = httpx.get(metrics_url, timeout=30).text
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    return worker, records, metrics


def _until_it_holds_a_lease(db: str, worker: subprocess.Popen[str], within: float = 60) -> None:
    """Wait for a fact: the worker holds the lease of an operation still active (its owner string carries its pid),
    so a kill now leaves a lease a survivor must take over. One indexed query on one connection per look."""
    deadline = time.monotonic() + within
    with psycopg.connect(db, autocommit=True) as conn:
        query = "SELECT count(*) FROM operations WHERE phase = 'active' AND lease_owner LIKE %s"
        while not (row := conn.execute(query, (f"%:{worker.pid}:%",)).fetchone()) or not row[0]:
            assert time.monotonic() < deadline, f"worker {worker.pid} never held a lease in {within}s"
            assert worker.poll() is None, f"a worker exited early with {worker.returncode}"
            time.sleep(0.005)


def _check_invariants(sim: Simulator, db: str, home: Path) -> None:
    store = _store(db, home)
    try:
        for stored in store.all():
            record = stored.record
            # The provider never saw more than was counted: the simulator counts each job's requests.
            seen = sim.request_count(record.job_id)
            assert seen <= record.status_requests_used <= record.plan.max_status_requests
            # No slot was polled twice: these tests' contracts ask for the reservation number ([headers]
            # X-Pollwarden-Reservation = "{reservation}"); pollwarden sends it only because they do.
            reservations = Counter(int(r.headers["x-pollwarden-reservation"]) for r in sim.requests(record.job_id))
            assert all(n == 1 for n in reservations.values()), (record.operation_id, reservations)
            assert record.is_final
    finally:
        store.close()
    verified = run_cli("audit", "verify", "--db", db, home=home)
    assert verified.code == 0, verified.stdout + verified.stderr


def test_one_worker_drains_a_mixed_queue(db: str, sim: Simulator, home: Path, tmp_path: Path) -> None:
    # A 30 s timeout: the provider is this process, and a `flaky` job has spent two of its three transport
    # failures on its 502 and 503, so one answer a loaded machine made miss a 2 s timeout would stop it.
    contract = write_contract(tmp_path / "c.toml", sim.url, timeout="30s", base_delay="50ms", max_delay="200ms",
                              reservation_header=True, max_requests=6)  # fmt: skip
    jobs = [f"{scenario}-{n}" for n in range(6) for scenario in ("happy", "failed", "unknown_state", "never", "flaky")]
    _enqueue(db, home, contract, jobs)
    worker, records, metrics = _drain_and_scrape(db, home, len(jobs))
    stderr = _log_of(worker)
    assert worker.returncode == 0, stderr
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert [line["event"] for line in lines[:2]] == ["metrics_serving", "worker_started"]
    assert lines[-1]["event"] == "worker_stopped"
    assert all(parse_rfc3339(line["ts"]).tzinfo is not None for line in lines)  # like every other time written
    assert any(line["event"] == "polled" and line["operation"] == "op-happy-0" for line in lines)
    phases = Counter((r.job_id.split("-")[0], r.phase) for r in records)  # type: ignore[attr-defined]
    assert phases[("happy", Phase.SUCCEEDED)] == 6 and phases[("flaky", Phase.SUCCEEDED)] == 6
    assert phases[("never", Phase.STOPPED)] == 6 and phases[("unknown_state", Phase.STOPPED)] == 6
    _check_invariants(sim, db, home)
    assert 'pollwarden_escalations_total{reason="job_failed"} 6.0' in metrics
    assert 'pollwarden_escalations_total{reason="unknown_state"} 6.0' in metrics
    assert 'pollwarden_provider_requests_total{provider="exports"}' in metrics
    assert "pollwarden_scheduling_lateness_seconds_bucket" in metrics
    # Scraped once everything was final: nothing active or due, and the 18 stops wait for a person.
    waiting = [
        line for line in metrics.splitlines() if line.startswith('pollwarden_fleet_open_decisions{contract="exports"')
    ]
    assert sum(float(line.split()[-1]) for line in waiting) == 18.0, waiting  # by reason: three of them, six each
    assert 'reason="job_failed"} 6.0' in "".join(waiting)
    assert 'pollwarden_fleet_active{contract="exports"} 0.0' in metrics
    assert 'pollwarden_fleet_overdue{contract="exports"} 0.0' in metrics
    open_decisions = json.loads(run_cli("decisions", "--json", "--db", db, home=home).stdout)
    assert len(open_decisions) == 18  # failed, unknown_state and never: six each, one decision per stop


def test_four_workers_never_double_poll(db: str, sim: Simulator, home: Path, tmp_path: Path) -> None:
    # 300 on both backends: four workers of 8 in flight each claim from the same due rows from the first batch
    # on, so the count only lengthens the run (1,000 on PostgreSQL cost three times the CPU and proved no more).
    count = 300
    contract = write_contract(
        tmp_path / "c.toml", sim.url, reservation_header=True, base_delay="100ms", max_delay="300ms", max_requests=5
    )
    for n in range(count):
        sim.add_job(f"j{n}", [Step(body={"state": "running"}), Step(body={"state": "succeeded", "result_url": "/r"})])
    _enqueue(db, home, contract, [f"j{n}" for n in range(count)])
    workers = [_spawn_worker(db, home) for _ in range(4)]
    try:
        _wait_all_final(db, home, count, within=240, workers=workers)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        errors = [(worker.wait(timeout=60), _log_of(worker)[-2000:]) for worker in workers]
    assert [w.returncode for w in workers] == [0, 0, 0, 0], errors
    _check_invariants(sim, db, home)


@pytest.mark.parametrize("db", ["postgres"], indirect=True)  # the fleet's case: many processes, one server
def test_chaos_kill_9_workers_and_nothing_is_lost(db: str, sim: Simulator, home: Path, tmp_path: Path) -> None:
    count = 300
    # Whatever a kill interrupts costs a counted request, never a transport failure; but the provider is this
    # process, and on a loaded machine an answer may miss the 2 s timeout (each such miss spends one). What this
    # test asserts is that kills lose nothing, so slow answers must not be able to end a job: the transport budget
    # is the request budget. (The 2 s timeout stays: it sets the 9 s lease the takeovers wait out.)
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="200ms", max_delay="2s", max_requests=200,
                              reservation_header=True, max_transport_failures=200, deadline="5m")  # fmt: skip
    for n in range(count):
        sim.add_job(f"c{n}", [Step(body={"state": "running"}, seconds=6 + n % 8),
                              Step(body={"state": "succeeded", "result_url": "/r"})])  # fmt: skip
    _enqueue(db, home, contract, [f"c{n}" for n in range(count)])
    rng = random.Random(5)
    workers = [_spawn_worker(db, home) for _ in range(4)]
    # Nine kills, 1-2.5 s apart (about 16 s), so they land while jobs are in flight: they run 6-13 s, and an
    # operation a dead worker held waits out its 9 s lease (2 x the 2 s timeout + 5 s) before a survivor takes it
    # over. A count, not a 16 s window: a loaded machine stretches the window instead of skipping kills. The first
    # kill waits until its victim holds a lease, so at least one takeover is certain, not likely: on a loaded
    # machine a victim may still be starting, or the jobs may be over, when a kill at a random moment lands.
    kills = 9
    try:
        for kill in range(kills):
            time.sleep(rng.uniform(1, 2.5))
            victim = rng.randrange(len(workers))
            if kill == 0:
                _until_it_holds_a_lease(db, workers[victim])
            workers[victim].send_signal(signal.SIGKILL)
            workers[victim].wait()
            workers[victim] = _spawn_worker(db, home)
        _wait_all_final(db, home, count, within=180)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=60)
    _check_invariants(sim, db, home)
    store = _store(db, home)
    try:
        records = [s.record for s in store.all()]
        assert all(r.phase is Phase.SUCCEEDED for r in records), Counter(str(r.reason) for r in records)
        takeovers = sum(
            1 for s in store.all() for e in store.events(s.record.operation_id) if e.kind == "lease_taken_over"
        )
    finally:
        store.close()
    assert takeovers >= 1


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)  # PostgreSQL's batches are killed in the chaos test
def test_kill_9_in_the_middle_of_batches_loses_no_count_and_sends_nothing_uncounted(
    db: str, sim: Simulator, home: Path, tmp_path: Path
) -> None:
    """Group commit under kill -9: each answer takes 150 ms, so a kill lands before a batch's reservation
    commit, while its requests are in flight, or around its record commit. Whatever it hits, no operation's
    count goes back and the provider never sees a request that was not counted first."""
    count = 24
    contract = write_contract(tmp_path / "c.toml", sim.url, timeout="1s", base_delay="50ms", max_delay="100ms",
                              reservation_header=True, max_requests=200, deadline="5m")  # fmt: skip
    for n in range(count):  # always running: there is always a free operation to poll
        sim.add_job(f"k{n}", [Step(body={"state": "running"}, delay=0.15)])
    _enqueue(db, home, contract, [f"k{n}" for n in range(count)])
    rng = random.Random(11)
    used_before: dict[str, int] = {}
    for _ in range(5):
        worker = _spawn_worker(db, home)
        try:
            seen = len(sim.requests())
            deadline = time.monotonic() + 30
            while len(sim.requests()) <= seen:  # a batch is on the wire
                assert time.monotonic() < deadline and worker.poll() is None, _log_of(worker)[-2000:]
                time.sleep(0.01)
            time.sleep(rng.uniform(0, 0.3))  # where in the batch the kill lands is the point, not a wait for it
        finally:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
        store = _store(db, home)
        try:
            for stored in store.all():
                record = stored.record
                assert len(sim.requests(record.job_id)) <= record.status_requests_used, record.operation_id
                assert record.status_requests_used >= used_before.get(record.operation_id, 0)
                used_before[record.operation_id] = record.status_requests_used
        finally:
            store.close()
    # Five kills left a log that verifies and no reservation number used twice (the takeover after a kill is the
    # chaos test's, on PostgreSQL, where it waits out the leases).
    for job in (f"k{n}" for n in range(count)):
        numbers = [int(r.headers["x-pollwarden-reservation"]) for r in sim.requests(job)]
        assert len(numbers) == len(set(numbers)), (job, numbers)
    verified = run_cli("audit", "verify", "--db", db, home=home)
    assert verified.code == 0, verified.stdout + verified.stderr


@pytest.mark.parametrize("db", ["postgres"], indirect=True)
def test_a_worker_process_holds_few_connections_whatever_its_concurrency(
    db: str, sim: Simulator, home: Path, tmp_path: Path
) -> None:
    """Its connection pool grew with --concurrency (66 connections for the default 64 on PostgreSQL, whenever its
    operations were stepped one by one: a paced provider's, or a new contract's in the first batch), so the default
    `worker --processes 2` could take 132 of the server's default 100, and every other client was refused ("too
    many clients already"). A connection is held only for a transaction, so a few serve any number in flight."""
    contract = write_contract(
        tmp_path / "c.toml", sim.url, reservation_header=True, base_delay="20ms", max_delay="20ms", max_requests=10
    )
    jobs = [f"c{n}" for n in range(128)]  # twice the concurrency: all 64 slots held at once, stepped one by one
    for job in jobs:
        sim.add_job(job, [Step(body={"state": "running"}, times=2, delay=0.05), Step(body={"state": "succeeded"})])
    _enqueue(db, home, contract, jobs)
    worker = _spawn_worker(db, home, "--concurrency", "64", "--provider-rate", "exports=10000")
    most = 0
    try:
        deadline = time.monotonic() + 60  # a hang guard
        with psycopg.connect(db, autocommit=True) as conn:
            while True:
                row = conn.execute(
                    "SELECT count(*) FILTER (WHERE datname = current_database() AND pid <> pg_backend_pid()),"
                    " (SELECT count(*) FROM operations WHERE phase = 'active') FROM pg_stat_activity"
                ).fetchone()
                assert row is not None
                most = max(most, row[0])
                if not row[1]:
                    break
                assert worker.poll() is None and time.monotonic() < deadline, _log_of(worker)
                time.sleep(0.005)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    assert '"poll_failed"' not in _log_of(worker)
    assert 1 <= most <= POSTGRES_POOL + 1, most  # the pool, and one connection LISTENing for the store's bell
    _check_invariants(sim, db, home)


def test_provider_rate_caps_the_fleet(sim: Simulator, home: Path, tmp_path: Path) -> None:
    """Two workers, 20 operations due at once, a fleet-wide cap of 10 requests per second."""
    db = str(home / "pollwarden.db")
    count = 20  # two requests each: 4 s of slots at 10 per second (the cap, not the count, is the point)
    contract = write_contract(
        tmp_path / "c.toml", sim.url, reservation_header=True, base_delay="100ms", max_delay="100ms", max_requests=3
    )
    for n in range(count):
        sim.add_job(f"p{n}", [Step(body={"state": "running"}), Step(body={"state": "succeeded", "result_url": "/r"})])
    _enqueue(db, home, contract, [f"p{n}" for n in range(count)])
    started = time.time()  # every slot the store hands out is at or after the first claim's clock, so after this
    workers = [_spawn_worker(db, home, "--provider-rate", "exports=10") for _ in range(2)]
    try:
        _wait_all_final(db, home, count, within=60, workers=workers)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=30)
    times = sorted(r.at for r in sim.requests() if r.job_id and r.job_id.startswith("p"))
    assert len(times) == 2 * count
    # The promise, exactly: each request leaves after its own slot, and the fleet's slots are 100 ms apart from a
    # first one no earlier than `started`; so the k-th request to arrive came at least k * 100 ms after it. A loaded
    # machine only makes requests later, never earlier, so this holds however slow the store writes are; unpaced,
    # the 20 first requests would all arrive within a few milliseconds. (1 ms: the stored slot's rounding.)
    early = [(k, round(t - started, 3)) for k, t in enumerate(times) if t < started + k * 0.1 - 0.001]
    assert not early, early
    _check_invariants(sim, db, home)


def test_the_default_concurrency_is_the_backends(db: str, home: Path) -> None:
    """Without --concurrency: 128 requests in flight on SQLite (a batch holds the file's one write lock while it
    commits, so larger batches share it better), 64 on PostgreSQL (more in flight hide the round trips to the
    server; 128 loaded the server more and polled less)."""
    path = home / "default.log"
    with path.open("w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "pollwarden", "worker", "--processes", "1", "--db", db],
            env={**os.environ, "POLLWARDEN_HOME": str(home)},
            stdout=subprocess.DEVNULL,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 60  # a hang guard
        while '"worker_started"' not in path.read_text():
            assert worker.poll() is None and time.monotonic() < deadline, path.read_text()
            time.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    started = next(json.loads(line) for line in path.read_text().splitlines() if '"worker_started"' in line)
    assert started["concurrency"] == (64 if db.startswith("postgresql://") else 128)


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_worker_with_its_stderr_closed_polls_and_stops_cleanly(
    db: str, sim: Simulator, home: Path, tmp_path: Path, processes: str
) -> None:
    """`2>&-` (a service manager that closes it): Python starts with no sys.stderr, and the worker's first log
    line ended it with exit 1 and nothing said. Its log lines go nowhere now; the polls are recorded."""
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="50ms", max_delay="100ms")
    _enqueue(db, home, contract, ["happy-0"])
    command = f"exec {sys.executable} -m pollwarden worker --processes {processes} --db '{db}' 2>&-"
    worker = subprocess.Popen(
        ["sh", "-c", command], env={**os.environ, "POLLWARDEN_HOME": str(home)}, stdin=subprocess.DEVNULL
    )
    try:
        _wait_all_final(db, home, 1, within=60, workers=[worker])  # type: ignore[list-item]
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
    assert code == 0
