"""Learnt schedules against the plain backoff and a fixed delay (issue 26): requests per job and detection lag.

The sans-I/O core on a simulated clock: each job is a record that `decide` moves on, each check an `observe` of a
status body, so what is measured is the schedule the engine keeps, without a network or a store in between.
10,000 jobs per workload, one after another: "on" starts with no history and, like `engine.learning`, reads its
model again (from its last 500 samples, `core.learnt.sample_of` of each ended record) every 50 jobs; "off" is the
contract's plain capped backoff (base 5 s, max 2 m, bounded jitter, first check at once); "fixed" is a
botocore-style waiter whose fixed delay is tuned to the same p95 lag as the target (delay = target / 0.95).

    python -m bench.learn [--jobs 10000] [--lag-target 30] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pollwarden.core import decide, new_record, observe, parse_contract, reserve
from pollwarden.core.contract.parse import Contract
from pollwarden.core.learnt import WINDOW, Learnt, Sample, first_check, learn, sample_of
from pollwarden.core.observe import Response

from .contracts import contract_text

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RUNNING = b'{"state": "running"}'
DONE = b'{"state": "succeeded"}'
REFRESH_EVERY = 50
MARK_START = "<!-- bench-learn:start -->"
MARK_END = "<!-- bench-learn:end -->"


def contract(lag_target: float, *, learning: bool) -> Contract:
    text = contract_text(
        status_url="http://127.0.0.1:9/jobs/{job_id}",
        pending=("running",),
        result=False,
        schedule={"base_delay": "5s", "max_delay": "2m", "lag_target": f"{lag_target:g}s", "learn": learning},
        limits={"deadline": "48h", "max_requests": 5000},
    )
    return parse_contract(text, source="bench-learn.toml")


Workload = Callable[[random.Random], float]


def lognormal(sigma: float) -> Workload:
    return lambda rng: 60.0 * math.exp(rng.gauss(0.0, sigma))


def bimodal(rng: random.Random) -> float:
    centre = 20.0 if rng.random() < 0.5 else 600.0
    return centre * math.exp(rng.gauss(0.0, 0.1))


def pareto(rng: random.Random) -> float:
    return 20.0 * rng.paretovariate(1.5)  # scale 20 s, shape 1.5: mean 60 s, a long tail


WORKLOADS: dict[str, Workload] = {
    "lognormal median 60s, sigma 0.5": lognormal(0.5),
    "lognormal median 60s, sigma 1.0": lognormal(1.0),
    "bimodal 20s or 10min": bimodal,
    "Pareto (scale 20s, shape 1.5)": pareto,
}


@dataclass(frozen=True)
class Result:
    requests: float
    p50: float
    p95: float
    worst: float
    seconds: float


def one_job(
    c: Contract, duration: float, model: Learnt | None, rng: random.Random, n: int
) -> tuple[int, float, Sample | None]:
    record = new_record(c, operation_id=f"op-{n}", job_id=f"job-{n}", now=T0)
    record = first_check(record, model, rng.random())
    end = T0 + timedelta(seconds=duration)
    while not record.is_final:
        now = record.next_poll_at
        reserved = reserve(record, now)
        answer = Response(200, {}, DONE if now >= end else RUNNING, now, now)
        record = decide(reserved, observe(c, answer), now, rng.random(), model).record
    assert record.finished_at is not None
    return record.status_requests_used, (record.finished_at - end).total_seconds(), sample_of(record)


def run(workload: Workload, jobs: int, lag_target: float, *, learning: bool, seed: int) -> Result:
    c = contract(lag_target, learning=learning)
    durations, rng = random.Random(seed), random.Random(seed + 1)
    samples: list[Sample] = []
    model: Learnt | None = None
    requests, lags = 0, []
    started = time.perf_counter()
    for n in range(jobs):
        used, lag, sample = one_job(c, workload(durations), model, rng, n)
        requests += used
        lags.append(lag)
        if sample is not None:
            samples.append(sample)
        if learning and (n + 1) % REFRESH_EVERY == 0:
            model = learn(c.name, samples[-WINDOW:], lag_target)
    return _result(requests, lags, jobs, time.perf_counter() - started)


def fixed(workload: Workload, jobs: int, lag_target: float, *, seed: int) -> Result:
    """A waiter that checks every `delay` seconds from the start (botocore's), tuned to the same p95 lag."""
    delay = lag_target / 0.95
    durations = random.Random(seed)
    requests, lags = 0, []
    for _ in range(jobs):
        d = workload(durations)
        checks = max(1, math.ceil(d / delay))
        requests += checks
        lags.append(checks * delay - d)
    return _result(requests, lags, jobs, 0.0)


def _result(requests: int, lags: list[float], jobs: int, seconds: float) -> Result:
    lags.sort()
    return Result(requests / jobs, lags[len(lags) // 2], lags[int(0.95 * len(lags))], lags[-1], seconds)


def table(jobs: int, lag_target: float, seed: int) -> str:
    lines = [
        f"{jobs:,} jobs per workload, p95 lag target {lag_target:g} s; requests per job and detection lag (s).",
        "",
        "| workload | schedule | requests/job | lag p50 | lag p95 | lag max |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for name, workload in WORKLOADS.items():
        rows = {
            "plain backoff (learn = false)": run(workload, jobs, lag_target, learning=False, seed=seed),
            "learnt (learn = true)": run(workload, jobs, lag_target, learning=True, seed=seed),
            f"fixed {lag_target / 0.95:.1f} s (botocore-style)": fixed(workload, jobs, lag_target, seed=seed),
        }
        for label, r in rows.items():
            lines.append(f"| {name} | {label} | {r.requests:.2f} | {r.p50:.1f} | {r.p95:.1f} | {r.worst:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--lag-target", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--out", type=Path, help="a Markdown file whose bench-learn section is replaced")
    args = parser.parse_args()
    text = table(args.jobs, args.lag_target, args.seed)
    print(text)
    if args.out is not None:
        old = args.out.read_text(encoding="utf-8")
        section = f"{MARK_START}\n{text}\n{MARK_END}"
        if MARK_START in old and MARK_END in old:
            new = old[: old.index(MARK_START)] + section + old[old.index(MARK_END) + len(MARK_END) :]
        else:
            new = old.rstrip("\n") + "\n\n## Learnt schedules (issue 26)\n\n`make bench-learn`\n\n" + section + "\n"
        args.out.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
