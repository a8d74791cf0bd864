"""What one scrape of the fleet gauges costs (`fleet.gauges`), at 10,000 operations, on SQLite and PostgreSQL.

    python -m bench.metrics_bench [--operations 10000] [--decisions 2000] [--rounds 15] [--skip-postgres] [--write]

The store holds `--operations` operations over three contracts: most active (a tenth of them overdue, some rate
limited, some whose watch process is gone) and `--decisions` stopped with a decision open (failed jobs and
spent deadlines). A scrape is `generate_latest` of a registry holding only the fleet gauges, as
`pollwarden metrics` answers it: "uncached" reads the database every time (`fresh_for` 0), "cached" answers
from the last reading (within the second). The figure is the median of `--rounds` scrapes, after one to warm up.
Not a test: it prints a table, and with `--write` puts it in docs/benchmarks.md ("Metrics scrape", between marks
that `bench.conformance` keeps when it writes the rest of that file).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from pollwarden import events as ev
from pollwarden.audit import load_or_create_keys
from pollwarden.core import new_record, parse_contract
from pollwarden.core.escalation import build_request
from pollwarden.core.reasons import StopReason
from pollwarden.fleet.gauges import FleetGauges
from pollwarden.store.base import NewOperation, Store
from pollwarden.store.open import open_store
from pollwarden.store.owner import process_owner

from . import sections
from .contracts import contract_text
from .throughput import _seeding_store, database

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
BEGIN, END = "<!-- metrics_bench -->", "<!-- /metrics_bench -->"


def seed(store: Store, operations: int, decisions: int) -> None:
    now = store.db_now()
    names = ("exports", "renders", "deploys")
    texts = [contract_text(name, limits={"deadline": "2h", "max_requests": 100}) for name in names]
    contracts = [parse_contract(text) for text in texts]
    gone = process_owner("watch", pid=2**22 + 1)  # beyond pid_max: a process known to be gone
    batch: list[NewOperation] = []
    for n in range(operations - decisions):
        which = n % 3
        record = new_record(contracts[which], operation_id=f"op-{n:06d}", job_id=f"job-{n}", now=now)
        due_in = -600 if n % 10 == 0 else 60 + n % 600
        record = replace(record, next_poll_at=now + timedelta(seconds=due_in), status_requests_used=n % 97,
                         rate_limited_consecutive=1 if n % 50 == 0 else 0)  # fmt: skip
        batch.append((record, texts[which], ev.Created.prepared({})))
        if len(batch) == 1000:
            store.create_many(batch)
            batch = []
    store.create_many(batch)
    for n in range(decisions):
        which = n % 3
        op = f"stopped-{n:06d}"
        store.create(
            new_record(contracts[which], operation_id=op, job_id=op, now=now), texts[which], ev.Created.prepared({})
        )
        owner = gone if n % 5 == 0 else process_owner("worker")
        claimed = store.claim(op, owner, now, timedelta(seconds=30))
        assert claimed is not None
        lease, record = claimed
        reason = StopReason.JOB_FAILED if n % 2 else StopReason.DEADLINE_EXCEEDED
        stopped = record.stopped(reason, "health check failed: 3/5 pods CrashLoopBackOff", now)
        request = build_request(stopped, contracts[which], now, decision_id=f"dec-{n:06d}")
        assert store.write(lease, stopped, [ev.Escalated.prepared({})], now, release=True, decision=request)


def scrape_ms(store: Store, *, fresh_for: float, rounds: int) -> float:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    gauges = FleetGauges(lambda: store, fresh_for=fresh_for)
    registry.register(gauges)
    generate_latest(registry)  # warm up (and, cached, take the reading the rest answer from)
    assert gauges.reading().reading is not None, gauges.reading().error
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        generate_latest(registry)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def write_section(table: list[str], command: str) -> None:
    section = "\n".join(
        [
            "## Metrics scrape",
            "",
            f"Written by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.platform()},"
            f" Python {platform.python_version()}. One scrape of the fleet gauges (`fleet/gauges.py`, what"
            " `pollwarden metrics` serves) over three contracts: uncached reads the database (a handful of grouped"
            " queries), cached answers from the reading of the last second. Median of the rounds.",
            "",
            *table,
        ]
    )
    sections.write_section(DOC, BEGIN, END, section)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--operations", type=int, default=10_000)
    parser.add_argument("--decisions", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--write", action="store_true", help="put the table in docs/benchmarks.md")
    args = parser.parse_args(argv)
    backends = ["sqlite"] if args.skip_postgres else ["sqlite", "postgres"]
    table = [
        "| backend | operations | open decisions | scrape, uncached (ms) | scrape, cached (ms) |",
        "|---|---:|---:|---:|---:|",
    ]
    print("\n".join(table))
    for backend in backends:
        with tempfile.TemporaryDirectory() as tmp, database(backend, Path(tmp)) as target:
            home = Path(tmp)
            seeding = _seeding_store(target, home)
            try:
                seed(seeding, args.operations, args.decisions)
            finally:
                seeding.close()
            store = open_store(target, keys=load_or_create_keys(home))
            try:
                uncached = scrape_ms(store, fresh_for=0, rounds=args.rounds)
                cached = scrape_ms(store, fresh_for=3600, rounds=args.rounds)
            finally:
                store.close()
        table.append(f"| {backend} | {args.operations:,} | {args.decisions:,} | {uncached:.1f} | {cached:.2f} |")
        print(table[-1], flush=True)
    if args.write:
        write_section(table, " ".join(["python -m bench.metrics_bench", *(argv if argv is not None else sys.argv[1:])]))


if __name__ == "__main__":
    main()
