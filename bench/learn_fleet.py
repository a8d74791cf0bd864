"""The 50-caller fleet with learnt schedules (issue 26), on loopback with real processes.

50 jobs that all finish at about 20 s (19-21 s, uniform; `--job-seconds`) are enqueued at once with `pollwarden enqueue
--jobs-file` (its own process) and polled to their end by one `pollwarden worker` process; a simulator on loopback
in this process answers `running` until each job's end, then `succeeded`, and dates every request. After that
warm-up of 50 jobs, 50 more are enqueued the same way: that second round is what is measured, per schedule, each
in a home of its own with a fresh worker:

- "plain backoff": the contract's capped backoff, 250 ms doubling to 1 s (bounded jitter), `learn = false`: the
  shape of the issue's baseline (25.9 requests a caller at a median lag of 0.42 s);
- "learnt": 250 ms doubling, `max_delay` 30 s (a learnt wait keeps `max_delay`, so a contract that wants its first
  look at 20 s allows it), `lag_target` 1 s, learning from the warm-up's 50 ended jobs.

Requests per caller are the simulator's status requests for the job; the detection lag is from the job's end to
the first request that found it ended.

    python -m bench.learn_fleet [--callers 50] [--seed 26] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pollwarden.simulator import Simulator, Step

from .contracts import contract_text
from .push import Row
from .sections import write_section
from .throughput import start_workers, stop_workers

MARK_START = "<!-- bench-learn-fleet:start -->"
MARK_END = "<!-- bench-learn-fleet:end -->"
LOAD: list[float] = []
"""The one-minute load average at the start and at the end of a run."""
WAIT = 180.0
"""Seconds a round may take before the benchmark gives up on it (a round needs about 21)."""
SCHEDULES: dict[str, dict[str, str | bool]] = {
    "plain backoff (250 ms to 1 s, learn = false)": {"base_delay": "250ms", "max_delay": "1s", "learn": False},
    "learnt (lag_target 1 s, max_delay 30 s)": {"base_delay": "250ms", "max_delay": "30s", "lag_target": "1s"},
}


def _contract(directory: Path, url: str, schedule: dict[str, str | bool]) -> Path:
    text = contract_text(status_url=f"{url}/jobs/{{job_id}}", top={"timeout": "2s"}, schedule=schedule,
                         limits={"deadline": "5m", "max_requests": 200})  # fmt: skip
    path = directory / "exports.toml"
    path.write_text(text, encoding="utf-8")
    return path


@dataclass(frozen=True)
class Fleet:
    """Where one schedule's rounds run: the provider, the home (its SQLite store), the installed contract."""

    sim: Simulator
    home: Path
    contract: Path
    callers: int
    job_seconds: float


def one_round(fleet: Fleet, prefix: str, rng: random.Random) -> Row:
    """`callers` jobs started and enqueued at once, each taking its `job_seconds` +-5 %; waits until each has been
    found ended."""
    sim, home, callers = fleet.sim, fleet.home, fleet.callers
    ends: dict[str, float] = {}
    for n in range(callers):
        job, seconds = f"{prefix}-{n}", rng.uniform(0.95 * fleet.job_seconds, 1.05 * fleet.job_seconds)
        ends[job] = time.time() + seconds
        sim.add_job(job, [Step(body={"state": "running"}, seconds=seconds),
                          Step(body={"state": "succeeded", "result_url": f"/r/{job}"})])  # fmt: skip
    jobs_file = home / f"{prefix}.txt"
    jobs_file.write_text("\n".join(ends) + "\n", encoding="utf-8")
    _pollwarden("enqueue", "--contract", str(fleet.contract), "--jobs-file", str(jobs_file),
                "--operation-prefix", prefix, "--home", str(home))  # fmt: skip
    found: dict[str, float] = {}
    give_up = time.monotonic() + WAIT
    while len(found) < callers:
        if time.monotonic() > give_up:
            raise RuntimeError(f"{callers - len(found)} jobs of {prefix} were not found ended in {WAIT:.0f} s")
        time.sleep(0.5)
        for job, end in ends.items():
            seen = [r.at for r in sim.requests(job) if r.method == "GET" and r.at >= end]
            if seen and job not in found:
                found[job] = min(seen) - end
    time.sleep(1.0)  # the worker records each end before the next round reads what was learnt
    requests, lags = [sim.request_count(job) for job in ends], [found[job] for job in ends]
    return Row(prefix, callers, len(found), requests, lags, answers=[])


def _pollwarden(*argv: str) -> None:
    """One pollwarden command in its own process, as an operator or an agent runs it."""
    subprocess.run([sys.executable, "-m", "pollwarden", *argv], check=True, stdout=subprocess.DEVNULL,
                   stdin=subprocess.DEVNULL)  # fmt: skip


def rounds(schedule: dict[str, str | bool], callers: int, seed: int, job_seconds: float = 20.0) -> tuple[Row, Row]:
    """The warm-up round and the measured round of one schedule, in a home of its own."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="pw-learn-fleet-") as tmp, Simulator() as sim:
        home = Path(tmp)
        contract = _contract(home, sim.url, schedule)
        _pollwarden("contracts", "install", str(contract), "--by", "bench", "--home", str(home))
        workers = start_workers(str(home / "pollwarden.db"), home, [home / "worker.log"], ("--processes", "1"))
        try:
            fleet = Fleet(sim, home, contract, callers, job_seconds)
            warm = one_round(fleet, "warm", rng)
            measured = one_round(fleet, "measured", rng)
        finally:
            stop_workers(workers)
    return warm, measured


def section(rows: dict[str, tuple[Row, Row]], command: str, seconds: float, job_seconds: float) -> str:
    load = " to ".join(f"{a:.1f}" for a in LOAD)  # the lags wait on a busy machine's scheduler
    lines = [
        "## The 50-caller fleet, learnt (issue 26)",
        "",
        f"`{command}` ({seconds:.0f} s, load average {load}): {len(next(iter(rows.values()))[1].requests)} callers,"
        f" jobs of {0.95 * job_seconds:g}-{1.05 * job_seconds:g} s,",
        "one `pollwarden worker` process, real `pollwarden enqueue` processes, the simulator on loopback; the second",
        "round of each schedule, after a warm-up round of as many jobs (the first round is shown for the learnt",
        "schedule too: before 20 jobs had ended, it ran the plain backoff). Goal: at most 5 requests a caller at a",
        "median lag within 1 s.",
        "",
        "| schedule | round | requests/caller | max | lag p50 (s) | lag p95 (s) | lag max (s) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, (warm, measured) in rows.items():
        for label, r in (("warm-up", warm), ("measured", measured)):
            lines.append(
                f"| {name} | {label} | {r.per_job:.2f} | {max(r.requests)} | {r.p(0.5):.2f} | {r.p(0.95):.2f}"
                f" | {max(r.lags):.2f} |"
            )
    lines.append("")
    for name, (_, r) in rows.items():
        met = r.per_job <= 5 and r.p(0.5) <= 1.0
        lines.append(
            f"- {name}: {r.per_job:.2f} requests a caller at a median lag of {r.p(0.5):.2f} s after the warm-up:"
            f" the goal is {'met' if met else 'not met'}."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callers", type=int, default=50)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--job-seconds", type=float, default=20.0, help="how long each job takes, +-5 %%")
    parser.add_argument("--out", type=Path, help="a Markdown file whose bench-learn-fleet section is replaced")
    args = parser.parse_args(argv)
    started = time.time()
    LOAD.append(os.getloadavg()[0])
    rows = {name: rounds(schedule, args.callers, args.seed, args.job_seconds) for name, schedule in SCHEDULES.items()}
    command = " ".join(["python -m bench.learn_fleet", *(argv if argv is not None else sys.argv[1:])])
    LOAD.append(os.getloadavg()[0])
    text = section(rows, command, time.time() - started, args.job_seconds)
    print(text)
    if args.out is not None:
        write_section(args.out, MARK_START, MARK_END, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
