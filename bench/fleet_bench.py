"""Fleet benchmark: worker throughput on SQLite and PostgreSQL, and provider pressure from 50 agents.

Not a test: it prints tables and writes docs/fleet-benchmark.md. Run from the repository root:

    python -m bench.fleet_bench [--operations 10000] [--large 50000] [--seconds 15] [--skip-postgres]

Throughput is measured on the real thing (`bench.throughput`): `pollwarden worker` processes with their default
settings, the real database, and `bench.fast_provider` on loopback, with every operation's job answering
`running`, so each poll is a full durable step (claim, reserve, request, record, audit). Each row also gives the
raw commit rate of the same database measured in the same run, and the CPU per poll of the worker, the provider
and the database server. Pressure drives the pure core (`decide`) for 50 agents against a scripted provider on
a virtual clock, so an hour of waiting takes a second and every schedule (pollwarden's, a fixed 10 s interval,
unjittered exponential) sees exactly the same jobs.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pollwarden.core import Response, decide, new_record, observe, parse_contract, reserve
from pollwarden.core.decide import Poll, next_step
from pollwarden.core.record import OperationRecord

from .contracts import contract_text
from .throughput import lateness_run, measure, throughput_section

DOC = Path(__file__).resolve().parents[1] / "docs" / "fleet-benchmark.md"


# -- pressure ---------------------------------------------------------------------------------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PRESSURE_CONTRACT = contract_text(
    schedule={"base_delay": "5s", "max_delay": "120s"},
    limits={"deadline": "2h", "max_requests": 1000, "max_transport_failures": 1000},
)


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
    parser.add_argument("--large", type=int, default=50_000, help="the second backlog, for rate against backlog")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--skip-postgres", action="store_true")
    args = parser.parse_args()

    runs = [measure("sqlite", operations=args.operations, seconds=args.seconds)]
    runs.append(measure("sqlite", operations=args.large, seconds=args.seconds))
    if not args.skip_postgres:
        runs += [measure("postgres", workers=n, operations=args.operations, seconds=args.seconds) for n in (1, 2, 4)]
    late = [lateness_run("sqlite", runs[0].rate, seconds=args.seconds)]
    if not args.skip_postgres:
        late.append(lateness_run("postgres", runs[2].rate, seconds=args.seconds))
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
        f"Command: `python -m bench.fleet_bench --operations {args.operations} --large {args.large}"
        f" --seconds {args.seconds:g}`",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}.",
        "",
        *throughput_section(runs, late),
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
