"""The console at fleet scale: `/` and `/decisions` with 10,000 operations and 2,000 open decisions.

Builds the fleet straight through the store (no provider: what is measured is the page, not the polls), serves the
console on loopback and fetches each page a few times; reports the server's time per page (the median of the
fetches, on a warm store) and the page's size. Results go in docs/benchmarks.md. Run from the repository root:

    python -m bench.console [--operations 10000] [--decisions 2000] [--rounds 5] [--statements]
                            [--db postgresql://... [--vacuum]]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import psycopg

from pollwarden import events as ev
from pollwarden.clock import utcnow
from pollwarden.console import ConsoleServer
from pollwarden.console.pages import ListView
from pollwarden.console.views import list_reads
from pollwarden.core.contract.parse import Contract, parse_contract
from pollwarden.core.escalation import build_request
from pollwarden.core.reasons import StopReason
from pollwarden.core.record import new_record
from pollwarden.home.operating import open_store
from pollwarden.store.base import FencedWrite, NewOperation, Store

CONTRACTS = ("deploys", "exports", "transcripts")
TOKEN = "console-bench-token-0123456789abcdef"
STOPS = (
    (StopReason.JOB_FAILED, "health check failed: 3/5 pods CrashLoopBackOff"),
    (StopReason.DEADLINE_EXCEEDED, None),
    (StopReason.JOB_CANCELLED, "cancelled by the provider's operator"),
    (StopReason.RATE_LIMITED, None),
    (StopReason.JOB_EXPIRED, "the job expired after 24 h in the queue"),
)
BATCH = 500


def contract_text(name: str) -> str:
    return (
        f'name = "{name}"\nstatus_url = "http://127.0.0.1:9/jobs/{{job_id}}"\n'
        '[states]\npending = ["running"]\nsuccess = ["succeeded"]\nfailure = ["failed"]\n[fields]\nstate = "state"\n'
        '[limits]\ndeadline = "24h"\n'
    )


def operation_id(contract: str, n: int) -> str:
    """Generated ids share a long prefix: the console must show their distinct ends."""
    return f"{contract}-20261202-193332-{n:06x}"


def _id(n: int) -> str:
    return operation_id(CONTRACTS[n % len(CONTRACTS)], n)


def build_fleet(store: Store, *, operations: int, decisions: int, now: datetime) -> None:
    """`operations` operations over three contracts: the first `decisions` stopped with an open decision (a mix of
    reasons, with the provider's error where the provider ended the job), a tenth of the rest succeeded, a tenth
    overdue by half an hour, the others active and due in one to two hours."""
    texts = {name: contract_text(name) for name in CONTRACTS}
    parsed = {name: parse_contract(text) for name, text in texts.items()}
    for start in range(0, operations, BATCH):
        batch: list[NewOperation] = []
        for n in range(start, min(start + BATCH, operations)):
            name = CONTRACTS[n % len(CONTRACTS)]
            late = n >= decisions and n % 10 == 1
            created = now - timedelta(minutes=30 if late else 1, seconds=n % 600)
            record = new_record(parsed[name], operation_id=operation_id(name, n), job_id=f"job-{n:06d}", now=created)
            if not late:  # due an hour or two from now: none turns overdue while a test or a measurement reads
                record = record.deferred(now + timedelta(hours=1, seconds=n % 3600))
            batch.append((record, texts[name], ev.Created.prepared(record.summary())))
        store.create_many(batch)
    _stop(store, parsed, list(range(decisions)), now)
    _finish(store, [n for n in range(decisions, operations) if n % 10 == 2], now)


def _stop(store: Store, parsed: dict[str, Contract], numbers: Sequence[int], now: datetime) -> None:
    for start in range(0, len(numbers), BATCH):
        chunk = numbers[start : start + BATCH]
        claims = [
            (operation_id(CONTRACTS[n % len(CONTRACTS)], n), "bench/console", timedelta(minutes=5)) for n in chunk
        ]
        writes: list[FencedWrite] = []
        for n, answer in zip(chunk, store.claim_many(claims, now), strict=True):
            assert answer is not None
            lease, record = answer
            reason, error = STOPS[n % len(STOPS)]
            at = now - timedelta(seconds=n)
            stopped = (
                record.ended(reason, "stopped", at, error) if reason.job_ended else record.stopped(reason, "x", at)
            )
            contract = parsed[CONTRACTS[n % len(CONTRACTS)]]
            request = build_request(stopped, contract, at, decision_id=f"dec-{n:06d}")
            stop = (ev.JobEnded if reason.job_ended else ev.Escalated).prepared({"reason": reason.value})
            writes.append(FencedWrite(lease, stopped, [stop], True, request))
        store.write_many(writes, now)


def _finish(store: Store, numbers: Sequence[int], now: datetime) -> None:
    for start in range(0, len(numbers), BATCH):
        chunk = numbers[start : start + BATCH]
        claims = [
            (operation_id(CONTRACTS[n % len(CONTRACTS)], n), "bench/console", timedelta(minutes=5)) for n in chunk
        ]
        writes = []
        for answer in store.claim_many(claims, now):
            assert answer is not None
            lease, record = answer
            done = record.succeeded({"ok": True}, "succeeded", now)
            writes.append(FencedWrite(lease, done, [ev.SucceededEvent.prepared({"state": "succeeded"})], True))
        store.write_many(writes, now)


def fetch(console: ConsoleServer, paths: Sequence[str], rounds: int) -> dict[str, tuple[float, int]]:
    """Each path's median time (ms) and size (bytes), through a logged-in session."""
    found: dict[str, tuple[float, int]] = {}
    with httpx.Client(base_url=console.url, timeout=60) as client:
        client.get(f"/login?token={TOKEN}")
        for path in paths:
            times = []
            size = 0
            for _ in range(rounds):
                started = time.perf_counter()
                response = client.get(path)
                times.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, (path, response.status_code)
                size = len(response.content)
            found[path] = (statistics.median(times), size)
    return found


def statement_times(home: Path, paths: Sequence[str], rounds: int) -> dict[str, tuple[float, int]]:
    """For each `/` path: the median over `rounds` of the time its reads (`views.list_reads`) spent in the database,
    summed over their statements as the store sends them (ms), and how many statements. The server's whole answer
    also renders and sends the page; this is the part the database serves, which the ranking changes."""
    store = open_store(home, keys="none")
    spent: list[float] = []
    send = getattr(store, "_fetchall")  # noqa: B009  # every read statement goes through it (store/trail.py)

    def timed(query: str, params: Sequence[Any]) -> Any:
        started = time.perf_counter()
        try:
            return send(query, params)
        finally:
            spent.append((time.perf_counter() - started) * 1000)

    setattr(store, "_fetchall", timed)  # noqa: B010  # not part of the Store protocol: a SQL store's own
    found: dict[str, tuple[float, int]] = {}
    try:
        for path in paths:
            view = ListView.parse(parse_qs(urlsplit(path).query))
            totals = []
            for _ in range(rounds):
                spent.clear()
                list_reads(store, view)
                totals.append(sum(spent))
            found[path] = (statistics.median(totals), len(spent))
    finally:
        store.close()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.console")
    parser.add_argument("--operations", type=int, default=10_000)
    parser.add_argument("--decisions", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--db", help="a PostgreSQL database upgraded with `pollwarden db upgrade` (emptied first)")
    parser.add_argument(
        "--statements",
        action="store_true",
        help="also time the database's part of each `/` page: its read statements, summed (median of --rounds)",
    )
    parser.add_argument(
        "--vacuum",
        action="store_true",
        help="VACUUM ANALYZE the fresh fleet (PostgreSQL): an operator's table, vacuumed by autovacuum, not a new one",
    )
    args = parser.parse_args(argv)
    if args.db:
        os.environ["POLLWARDEN_DB"] = args.db
        with psycopg.connect(args.db, autocommit=True) as conn:
            conn.execute("TRUNCATE operations, decisions, audit_records, audit_heads, audit_heads_pending, outbox")
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        store = open_store(home)
        try:
            started = time.perf_counter()
            build_fleet(store, operations=args.operations, decisions=args.decisions, now=utcnow())
            built = time.perf_counter() - started
        finally:
            store.close()
        if args.db:  # the statistics autovacuum would gather within a minute of so many new rows
            with psycopg.connect(args.db, autocommit=True) as conn:
                # VACUUM also sets the visibility map an index-only scan needs, as autovacuum does in time for a
                # table that lives on; ANALYZE alone leaves the fresh table's every read a read of its rows.
                conn.execute("VACUUM ANALYZE" if args.vacuum else "ANALYZE")
        with ConsoleServer(home, token=TOKEN, log=open("/dev/null", "w")) as console:
            paths = ["/", "/?page=20", "/?show=overdue", "/?q=00abc", "/decisions", "/decisions?reason=job_failed"]
            results = fetch(console, paths, args.rounds)
        listed = [p for p in paths if p == "/" or p.startswith("/?")]
        reads = statement_times(home, listed, args.rounds) if args.statements else {}
    backend = ("PostgreSQL, VACUUM ANALYZE" if args.vacuum else "PostgreSQL, ANALYZE") if args.db else "SQLite"
    print(f"fleet: {args.operations} operations, {args.decisions} open decisions (built in {built:.1f} s), {backend}")
    for path, (ms, size) in results.items():
        database = f"  database {reads[path][0]:6.1f} ms in {reads[path][1]} statements" if path in reads else ""
        print(f"  {path:32} {ms:7.1f} ms  {size / 1024:7.1f} KiB{database if args.statements else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
