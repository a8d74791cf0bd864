"""What the fleet claim's look for dead holders costs a lightly loaded worker (SQLite).

Not a test: it prints a table and writes its section of docs/benchmarks.md. Run from the repository root:

    python -m bench.probe_bench [--backlog 10000] [--held 1000] [--seconds 2] [--rounds 3]

A worker whose claim finds fewer free due rows than its batch looks for dead holders' leases on every claim
(`Leases._of_dead_holders`: one GROUP BY over the active rows' leases, then the rows of the holders proved dead).
Each case times `claim_due` back to back on a real SQLite store with nothing due, so every claim is that worker's
claim, with and without the look (`probe` off: `_of_dead_holders` answers nothing without reading). The active
operations wait (not due), so only their count matters; `held` of them are leased by processes that are gone,
spread over ten holders, with leases that do not run out during the run. The rates are set against the raw commit
rate of the same disk (`bench.throughput.sqlite_commit_rate`), in alternating rounds (medians): an empty claim
commits nothing, so its ratio can pass 1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pollwarden import events as ev
from pollwarden.audit import load_or_create_keys
from pollwarden.core import new_record, parse_contract
from pollwarden.engine.installed import install
from pollwarden.simulator import contract_text
from pollwarden.store.owner import process_owner
from pollwarden.store.sqlite import SQLiteStore

from .sections import write_section
from .throughput import sqlite_commit_rate

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
START, END = "<!-- probe_bench:start -->", "<!-- probe_bench:end -->"
BATCH = 16
"""A lane's claim at the worker's default concurrency (32 over two lanes)."""
TTL = timedelta(seconds=30)


@dataclass(frozen=True)
class Case:
    backlog: int
    held: int
    probe: bool

    @property
    def name(self) -> str:
        return f"{self.backlog:,} waiting, {self.held:,} held by dead holders, look {'on' if self.probe else 'off'}"


def _no_process() -> int:
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


@contextmanager
def seeded(home: Path, backlog: int, held: int) -> Iterator[SQLiteStore]:
    """`backlog` active operations due in an hour, the first `held` leased for a day by ten dead holders."""
    keys = load_or_create_keys(home)
    store = SQLiteStore(home / "probe.db", keys=keys, synchronous="OFF")
    contract = parse_contract(contract_text("http://127.0.0.1:9", name="bench", base_delay="1h", max_delay="1h"))
    now = store.db_now()
    install(store, contract, by="bench", via="bench", source="bench.probe_bench", now=now)
    later = now + timedelta(hours=1)
    for n in range(backlog):
        record = replace(new_record(contract, operation_id=f"op{n:06d}", job_id=f"j{n}", now=now), next_poll_at=later)
        store.create(record, contract.source_text, ev.Created.prepared({}))
    gone = _no_process()
    holders = [process_owner("worker", pid=gone + n) for n in range(10)]
    for n in range(held):
        assert store.claim(f"op{n:06d}", holders[n % 10], now, timedelta(days=1)) is not None
    store.close()
    served = SQLiteStore(home / "probe.db", keys=keys)  # the store's own durability, as a worker opens it
    try:
        yield served
    finally:
        served.close()


def claims_per_second(store: SQLiteStore, probe: bool, seconds: float) -> float:
    owner = process_owner("worker")
    if not probe:
        store._of_dead_holders = lambda *args, **kwargs: []  # type: ignore[method-assign]
    n, started = 0, time.perf_counter()
    end = started + seconds
    while time.perf_counter() < end:
        assert store.claim_due(owner, store.db_now(), TTL, BATCH) == []
        n += 1
    return n / (time.perf_counter() - started)


def run(backlog: int, held: int, seconds: float, rounds: int) -> tuple[dict[Case, float], float]:
    """The median claims per second of each case, and of raw commits."""
    sizes = sorted({(0, 0), (backlog, 0), (backlog, held)})
    cases = [Case(size[0], size[1], probe) for size in sizes for probe in (False, True)]
    rates: dict[Case, list[float]] = {case: [] for case in cases}
    raw: list[float] = []
    with tempfile.TemporaryDirectory(prefix="pollwarden-probe-") as tmp, ExitStack() as stack:
        opened = {}
        for size in sizes:
            home = Path(tmp) / f"{size[0]}-{size[1]}"
            home.mkdir()
            opened[size] = stack.enter_context(seeded(home, *size))
        for _ in range(rounds):
            raw.append(sqlite_commit_rate(Path(tmp) / "raw.db", seconds))
            for case in cases:
                store = opened[(case.backlog, case.held)]
                rates[case].append(claims_per_second(store, case.probe, seconds))
                store.__dict__.pop("_of_dead_holders", None)
    return {case: statistics.median(r) for case, r in rates.items()}, statistics.median(raw)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--held", type=int, default=1_000)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rates, commits = run(args.backlog, args.held, args.seconds, args.rounds)
    load_text = f"load average {load:.1f} to {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    lines = [
        "## The fleet claim's look for dead holders (a lightly loaded worker)",
        "",
        f"`python -m bench.probe_bench --backlog {args.backlog} --held {args.held} --seconds {args.seconds:g}"
        f" --rounds {args.rounds}`: `claim_due` of a batch of {BATCH} back to back on SQLite with nothing due,"
        f" medians of {args.rounds} alternating rounds; raw commits {commits:,.0f}/s on the same disk; {load_text}"
        f" ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC). On a loaded machine the rates move from run to run: compare"
        " within a run, look on against look off. docs/performance.md tells what the look cost before.",
        "",
        "| case | claims/s | ratio to raw commits | µs a claim |",
        "|---|---|---|---|",
    ]
    for case, rate in rates.items():
        lines.append(f"| {case.name} | {rate:,.0f} | {rate / commits:.2f} | {1e6 / rate:,.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_doc:
        write_section(DOC, START, END, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
