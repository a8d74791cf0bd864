"""Fleet benchmark: worker throughput on SQLite and PostgreSQL, and provider pressure from 50 agents.

Not a test: it prints tables and writes docs/fleet-benchmark.md. Run from the repository root:

    python -m bench.fleet_bench [--operations 10000] [--seconds 20] [--skip-postgres]

Throughput is measured on the real thing: worker processes (`pollwarden worker`), the real database, and a
real provider on loopback (`Simulator`), with every operation's job answering `running`, so each poll is a
full durable step (claim, reserve, request, record, audit). Pressure drives the pure core (`decide`) for
50 agents against a scripted provider on a virtual clock, so an hour of waiting takes a second and every
schedule (pollwarden's, a fixed 10 s interval, unjittered exponential) sees exactly the same jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pollwarden.audit import load_or_create_keys
from pollwarden.core import Response, decide, new_record, observe, parse_contract, reserve
from pollwarden.core.decide import Poll, next_step
from pollwarden.core.record import OperationRecord
from pollwarden.simulator import Simulator, Step
from pollwarden.store.open import open_store

DOC = Path(__file__).resolve().parents[1] / "docs" / "fleet-benchmark.md"
CONTRACT = """
name = "bench"
status_url = "{url}/jobs/{{job_id}}"
timeout = "5s"
[states]
pending = ["queued", "running"]
success = ["succeeded"]
failure = ["failed"]
[fields]
state = "state"
result = "result_url"
[schedule]
base_delay = "1s"
max_delay = "2s"
[limits]
deadline = "2h"
max_requests = 100000
max_transport_failures = 100
"""


# -- throughput -------------------------------------------------------------------------------------------


@dataclass
class Throughput:
    backend: str
    workers: int
    operations: int
    seconds: float
    polls: int
    p50_ms: float
    p99_ms: float
    rss_mb: float

    @property
    def rate(self) -> float:
        return self.polls / self.seconds


def _create_database() -> str:
    import psycopg

    name = f"pollwarden_bench_{os.getpid()}_{int(time.time())}"
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    from pollwarden.store.postgres import upgrade_database

    upgrade_database(url)
    return url


def _drop_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


def throughput(backend: str, workers: int, operations: int, seconds: float) -> Throughput:
    with tempfile.TemporaryDirectory(prefix="pw-bench-") as tmp, Simulator() as sim:
        home = Path(tmp)
        target = str(home / "pollwarden.db") if backend == "sqlite" else _create_database()
        try:
            contract = parse_contract(CONTRACT.format(url=sim.url))
            store = open_store(target, keys=load_or_create_keys(home))
            now = store.db_now()
            for n in range(operations):
                sim.add_job(f"j{n}", [Step(body={"state": "running"})])
                record = new_record(contract, operation_id=f"op{n}", job_id=f"j{n}", now=now)
                store.create(record, contract.source_text, {"bench": True})
            store.close()
            logs = [home / f"w{i}.log" for i in range(workers)]
            procs = [
                subprocess.Popen(
                    [sys.executable, "-m", "pollwarden", "worker", "--db", target, "--concurrency", "16"],
                    env={**os.environ, "POLLWARDEN_HOME": str(home)},
                    stdout=subprocess.DEVNULL,
                    stderr=log.open("w"),
                )
                for log in logs
            ]
            time.sleep(3)  # start-up is not throughput
            start_count, started = len(sim.requests()), time.monotonic()
            time.sleep(seconds)
            polls, elapsed = len(sim.requests()) - start_count, time.monotonic() - started
            rss = sum(_rss_mb(p.pid) for p in procs)
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(timeout=60)
            lateness = [
                json.loads(line)["lateness"]
                for log in logs
                for line in log.read_text().splitlines()
                if '"event": "polled"' in line
            ]
        finally:
            if backend == "postgres":
                _drop_database(target)
    quantiles = statistics.quantiles(lateness, n=100) if len(lateness) > 100 else [0.0] * 99
    return Throughput(backend, workers, operations, elapsed, polls, quantiles[49] * 1000, quantiles[98] * 1000, rss)


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# -- pressure ---------------------------------------------------------------------------------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PRESSURE_CONTRACT = """
name = "exports"
status_url = "https://provider.example/jobs/{job_id}"
[states]
pending = ["queued", "running"]
success = ["succeeded"]
failure = ["failed"]
[fields]
state = "state"
result = "result_url"
[schedule]
base_delay = "5s"
max_delay = "120s"
[limits]
deadline = "2h"
max_requests = 1000
max_transport_failures = 1000
"""


@dataclass(frozen=True)
class Agent:
    submitted: float  # seconds after T0
    duration: float  # seconds the job runs


def agents(seed: int) -> list[Agent]:
    rng = random.Random(seed)
    return [Agent(rng.uniform(0, 60), rng.uniform(300, 900)) for _ in range(50)]


OUTAGE = (600.0, 660.0)
"""The provider answers 503 to everyone for one minute: the moment fixed intervals line up."""


def _provider(agent: Agent, t: float) -> tuple[int, bytes]:
    if OUTAGE[0] <= t < OUTAGE[1]:
        return 503, b'{"error": "unavailable"}'
    if t - agent.submitted >= agent.duration:
        return 200, b'{"state": "succeeded", "result_url": "/r"}'
    return 200, b'{"state": "running"}'


def pollwarden_times(agent: Agent, rng: random.Random) -> list[float]:
    """The real core decides every wait: backoff, jitter, and the same provider answers."""
    contract = parse_contract(PRESSURE_CONTRACT)
    start = T0 + timedelta(seconds=agent.submitted)
    record: OperationRecord = new_record(contract, operation_id="op", job_id="j", now=start)
    times: list[float] = []
    while not record.is_final:
        now = max(record.next_poll_at, start)
        if not isinstance(next_step(record, now), Poll):
            break
        t = (now - T0).total_seconds()
        times.append(t)
        status, body = _provider(agent, t)
        response = Response(status=status, headers={}, body=body, sent_at=now, received_at=now)
        record = decide(reserve(record, now), observe(contract, response), now, rng.random()).record
    return times


def fixed_times(agent: Agent, interval: float = 10.0) -> list[float]:
    times, t = [], agent.submitted
    while True:
        times.append(t)
        status, body = _provider(agent, t)
        if status == 200 and b"succeeded" in body:
            return times
        t += interval


def exponential_times(agent: Agent, base: float = 5.0, cap: float = 120.0) -> list[float]:
    times, t, attempt = [], agent.submitted, 0
    while True:
        times.append(t)
        status, body = _provider(agent, t)
        if status == 200 and b"succeeded" in body:
            return times
        attempt += 1
        t += min(cap, base * 2**attempt)


@dataclass
class Pressure:
    schedule: str
    requests: int
    peak: int
    mean: float
    detection_lag_s: float
    after_outage_peak: int

    @property
    def ratio(self) -> float:
        return self.peak / self.mean


def pressure(name: str, make: Callable[[Agent], list[float]], population: list[Agent]) -> Pressure:
    all_times = [make(agent) for agent in population]
    flat = [t for times in all_times for t in times]
    per_second = Counter(int(t) for t in flat)
    span = max(flat) - min(flat) + 1
    lags = [times[-1] - (a.submitted + a.duration) for a, times in zip(population, all_times, strict=True)]
    after = max((per_second[s] for s in range(int(OUTAGE[1]), int(OUTAGE[1]) + 120)), default=0)
    return Pressure(name, len(flat), max(per_second.values()), len(flat) / span, statistics.mean(lags), after)


# -- report -----------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--skip-postgres", action="store_true")
    args = parser.parse_args()

    runs = [throughput("sqlite", 1, args.operations, args.seconds)]
    if not args.skip_postgres:
        runs += [throughput("postgres", n, args.operations, args.seconds) for n in (1, 2, 4)]
    population = agents(seed=42)
    rng = random.Random(7)
    pressures = [
        pressure("pollwarden (5s..120s, bounded jitter, core decide)", lambda a: pollwarden_times(a, rng), population),
        pressure("fixed 10 s interval", fixed_times, population),
        pressure("exponential 5s..120s, no jitter", exponential_times, population),
    ]
    lines = [
        "# Fleet benchmark",
        "",
        f"Written by `bench/fleet_bench.py` (a benchmark, not a test) on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.",
        f"Command: `python -m bench.fleet_bench --operations {args.operations} --seconds {args.seconds:g}`",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}.",
        "",
        "## Worker throughput",
        "",
        f"{args.operations} live operations, every job `running`, base delay 1 s (so the queue is always due);"
        " each worker process runs 16 threads. A poll is the whole durable step: batch claim with a fenced lease,"
        " reservation committed before sending, the HTTP request to a loopback provider, the fenced record with"
        " its sealed, chained audit events. Lateness is how long after `next_poll_at` a due operation was polled:"
        " when the queue is saturated it is the backlog, not a scheduling error. On a 2-core machine the"
        " workers, PostgreSQL and the provider simulator share two CPUs, so more worker processes add"
        " contention rather than throughput: these rows are one machine's capacity, not fleet scaling.",
        "",
        "| backend | workers | polls/s | lateness p50 | lateness p99 | peak RSS (all workers) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.backend} | {r.workers} | {r.rate:.0f} | {r.p50_ms:.0f} ms | {r.p99_ms:.0f} ms | {r.rss_mb:.0f} MB |"
        for r in runs
    ]
    lines += [
        "",
        "## Provider pressure: 50 agents submitting within one minute",
        "",
        "Each agent's job runs 5 to 15 minutes; the provider answers 503 to everyone from minute 10 to 11 (an"
        " outage is when fixed schedules line up). Same agents, same jobs, same outage for every schedule.",
        "",
        "| schedule | requests | peak req/s | mean req/s | peak/mean | peak req/s in the 2 min after the outage"
        " | mean detection lag |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {p.schedule} | {p.requests} | {p.peak} | {p.mean:.2f} | {p.ratio:.1f} | {p.after_outage_peak}"
        f" | {p.detection_lag_s:.0f} s |"
        for p in pressures
    ]
    lines += [
        "",
        "Reading it: peak/mean is the ratio the issue asks for, but backoff lowers the mean (far fewer requests"
        " over the same span), which raises the ratio; the absolute peak and the peak right after the outage are"
        " the pressure a provider feels. The fixed interval sends several times more requests; unjittered"
        " exponential keeps agents that failed together in step after the outage; pollwarden's bounded jitter"
        " spreads them. The price of backoff is detection lag: a job that finishes between two widely spaced"
        " polls is noticed later; contracts for short jobs should lower `max_delay` (R8).",
    ]
    text = "\n".join(lines) + "\n"
    DOC.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
