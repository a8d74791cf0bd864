"""Embedded watches: N threads of one process calling `pollwarden.watch_sync` at once (issue 13's target).

Not a test: it prints one line per N. Run from the repository root:

    python -m bench.embedded_bench [--watches 1 10 50] [--rounds 3] [--polling 50]
    python -m bench.embedded_bench --ab base=/tmp/base/src head=src     # code trees in interleaved rounds

The provider is `bench.fast_provider` in a process of its own, so what is measured is pollwarden's CPU under
this process's GIL, not a provider's handler threads competing for it. It records when each job's first status
request arrived (time.time(), the same clock this process reads at each call: one machine); the figure is
that time minus the moment its `watch_sync` was called (the target: every first request within 100 ms of its
call). One watch runs first on the same home, so keys and the database exist and the figures are not the first
run's key generation and schema creation. Every job answers `running` and each watch has a budget of three
checks 200 ms apart, so a watch ends on its budget. CPU is this process's (user + system) per watch, over the
whole watch (its three polls), and the median watch thread's CPU until its first step was recorded (the
admission, the claim, the reservation, the request and its record: `on_progress` runs right after).

`--polling N` also measures the steady state: N watches with base = max delay 1 ms poll for a few seconds and the
provider counts their requests per second, to set beside a worker's polls/s (`python -m bench.throughput`).

With $POLLWARDEN_DB set (a PostgreSQL URL of an upgraded database) the watches use that database instead.

`--ab NAME=SRC ...` runs this benchmark once per variant per round with PYTHONPATH=SRC (the provider and this
script are this checkout's), interleaving the variants so a shared machine's load hits them alike. With
`--worker SECONDS` each round also runs one `pollwarden worker` (this checkout's) for that long on 10,000 due
operations (`bench.throughput.measure`): the polls/s an embedded process is to match, under the same load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pollwarden
from bench.throughput import Provider
from pollwarden.simulator.scenarios import contract_text


def _firsts(provider: Provider) -> dict[str, float]:
    with urllib.request.urlopen(provider.url + "/_first", timeout=10) as answer:
        found: dict[str, float] = json.loads(answer.read())
    return found


def measure(count: int, contract: Path, home: Path, tag: str, provider: Provider) -> dict[str, float]:
    """Milliseconds from call to first request (p50, p99 interpolated, max), seconds until every watch ended, CPU
    per watch."""
    called: dict[str, float] = {}
    first_step_cpu: dict[str, float] = {}

    def one(job: str) -> None:
        start = time.thread_time()

        def told(progress: object) -> None:
            first_step_cpu.setdefault(job, time.thread_time() - start)

        called[job] = time.time()
        pollwarden.watch_sync(str(contract), job, home=home, on_progress=told)

    threads = [threading.Thread(target=one, args=(f"{tag}-{i}",)) for i in range(count)]
    cpu, started = time.process_time(), time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ended, cpu = time.monotonic() - started, time.process_time() - cpu
    firsts = _firsts(provider)
    waits = sorted((firsts[job] - at) * 1000 for job, at in called.items())
    return {
        "p50": waits[len(waits) // 2],
        "p99": statistics.quantiles(waits, n=100, method="inclusive")[98] if len(waits) > 1 else waits[-1],
        "max": waits[-1],
        "ended": ended,
        "cpu_ms": cpu * 1000 / count,
        "first_step_cpu_ms": statistics.median(first_step_cpu.values()) * 1000,
    }


def polling(count: int, home: Path, provider: Provider, seconds: float = 4.0) -> tuple[float, float]:
    """Requests per second the provider saw while `count` watches polled as fast as their contract allows, and
    this process's CPU per request (microseconds; a worker's is `bench.throughput`'s worker_cpu_us)."""
    contract = home / "polling.toml"
    contract.write_text(
        contract_text(provider.url, base_delay="1ms", max_delay="1ms", max_requests=1_000_000, deadline="5m")
    )
    watches = [pollwarden.Watch(str(contract), f"{os.getpid()}-poll-{i}", home=home) for i in range(count)]
    threads = [threading.Thread(target=_quiet_run, args=(watch,)) for watch in watches]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # every watch admitted and polling
    before, at, cpu = provider.stats()["requests"], time.monotonic(), time.process_time()
    time.sleep(seconds)
    polls, cpu = provider.stats()["requests"] - before, time.process_time() - cpu
    rate = polls / (time.monotonic() - at)
    for watch in watches:
        watch.cancel()
    for thread in threads:
        thread.join()
    return rate, cpu * 1e6 / max(polls, 1)


def _quiet_run(watch: pollwarden.Watch) -> None:
    with contextlib.suppress(pollwarden.WatchCancelled):
        watch.run()


def run(watches: list[int], rounds: int, polling_count: int) -> list[dict[str, float]]:
    provider = Provider()
    figures: list[dict[str, float]] = []
    try:
        with tempfile.TemporaryDirectory() as temp:
            home = Path(temp)
            contract = home / "bench.toml"
            text = contract_text(provider.url, base_delay="200ms", max_delay="200ms", max_requests=3, deadline="5m")
            contract.write_text(text)
            run_id = f"{os.getpid()}-{time.time_ns()}"  # job ids of their own in a shared $POLLWARDEN_DB too
            measure(1, contract, home, f"{run_id}-warm", provider)
            for round_no in range(rounds):
                for count in watches:
                    found = measure(count, contract, home, f"{run_id}-r{round_no}n{count}", provider)
                    found["watches"] = count
                    figures.append(found)
            if polling_count:
                rate, cpu_us = polling(polling_count, home, provider)
                figures.append({"polling": polling_count, "polls_per_s": rate, "cpu_us_per_poll": cpu_us})
    finally:
        provider.close()
    return figures


def _line(found: dict[str, float]) -> str:
    if "polling" in found:
        return (
            f"{found['polling']:.0f} watches polling: {found['polls_per_s']:.0f} polls/s,"
            f" {found['cpu_us_per_poll']:.0f} us CPU per poll"
        )
    return (
        f"{found['watches']:.0f} watches: first request p50 {found['p50']:.0f} ms, p99 {found['p99']:.0f} ms, max"
        f" {found['max']:.0f} ms after"
        f" the call; all ended in {found['ended']:.1f} s; CPU {found['cpu_ms']:.1f} ms per watch,"
        f" {found['first_step_cpu_ms']:.1f} ms to its first step (median thread)"
    )


def ab(variants: list[str], watches: list[int], rounds: int, polling_count: int, worker: float = 0.0) -> int:
    """Each variant NAME=SRC once per round, in a subprocess with PYTHONPATH=SRC; then the medians."""
    results: dict[str, list[dict[str, float]]] = {}
    for round_no in range(rounds):
        if worker:
            from bench.throughput import measure as worker_run

            run_ = worker_run("sqlite", operations=10_000, seconds=worker)
            figures = {"polls_per_s": run_.rate, "cpu_us_per_poll": run_.worker_cpu_us, "load": os.getloadavg()[0]}
            results.setdefault("one worker", []).append(figures)
            print(
                f"round {round_no} worker: {run_.rate:.0f} polls/s, {run_.worker_cpu_us:.0f} us CPU per poll;"
                f" load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        for variant in variants:
            name, _, src = variant.partition("=")
            here = str(Path(__file__).resolve().parent.parent)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.abspath(src), here])}
            argv = [sys.executable, "-m", "bench.embedded_bench", "--json", "--rounds", "1", "--polling"]
            argv += [str(polling_count), "--watches", *map(str, watches)]
            out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
            for found in json.loads(out):
                found["load"] = os.getloadavg()[0]
                what = f"{found['watches']:.0f} watches" if "watches" in found else f"{found['polling']:.0f} polling"
                results.setdefault(f"{name}, {what}", []).append(found)
                print(f"round {round_no} {name}: {_line(found)}; load {os.getloadavg()[0]:.1f}", flush=True)
    for key, runs in results.items():
        names = [f for f in runs[0] if f not in ("watches", "polling", "load")]
        loads = [x["load"] for x in runs if "load" in x]
        summary = ", ".join(
            f"{f} {statistics.median(x[f] for x in runs):.1f} ({min(x[f] for x in runs):.1f}-"
            f"{max(x[f] for x in runs):.1f})"
            for f in names
        )
        print(f"{key}: {summary}; load {min(loads):.1f}-{max(loads):.1f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watches", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--polling", type=int, default=0, metavar="N", help="also N watches polling: polls/s")
    parser.add_argument("--ab", nargs="+", metavar="NAME=SRC", help="compare code trees in interleaved rounds")
    parser.add_argument("--worker", type=float, default=0.0, metavar="S", help="with --ab: a worker for S s a round")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ab:
        return ab(args.ab, args.watches, args.rounds, args.polling, args.worker)
    figures = run(args.watches, args.rounds, args.polling)
    if args.json:
        print(json.dumps(figures))
    else:
        for found in figures:
            print(_line(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
