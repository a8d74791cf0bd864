"""Bulk enqueue benchmark: `pollwarden enqueue --jobs-file` on SQLite and PostgreSQL, next to the raw commit rate.

Not a test: it prints tables and writes the "Bulk enqueue" section of docs/performance.md (every other section
of that file is kept as it is). Run from the repository root:

    python -m bench.enqueue_bench [--jobs 10000] [--rounds 3] [--skip-postgres]

What is timed is the real command in a subprocess (`python -m pollwarden enqueue --jobs-file FILE
--operation-prefix P`, interpreter start and imports included) on a fresh home or database each round: every
operation durable with its sealed `created` audit record. The physical limit it is put against is measured in
the same run, interleaved round by round: the raw commit rate of the same database with the same settings (SQLite:
WAL and synchronous=FULL in the same directory; PostgreSQL: the same server), one one-row INSERT per commit.
The ratio operations/s : raw commits/s says how much better than one commit per operation a batch does, on a
machine whose disk and load (two cores, shared) vary from minute to minute. A batch size sweep (in process)
shows what the batch size buys and what it costs: the longest wait of another writer (a worker) behind a batch.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pollwarden.audit import load_or_create_keys
from pollwarden.core.admission import WatchRequest
from pollwarden.core.contract.parse import parse_contract
from pollwarden.engine import BATCH, Engine
from pollwarden.engine.installed import install
from pollwarden.simulator import contract_text
from pollwarden.store.base import NewOperation
from pollwarden.store.open import open_store

DOC = Path(__file__).resolve().parents[1] / "docs" / "performance.md"
HEADING = "## Bulk enqueue"
ADMIN_URL = os.environ.get("POLLWARDEN_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
RAW_SECONDS = 2.0
SWEEP = (100, 250, BATCH, 1000, 2000)


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float


@dataclass(frozen=True)
class Backend:
    name: str
    jobs: int
    first: list[Run]
    again: list[Run]
    raw: list[float]
    """Raw commits per second, one figure per round."""

    @property
    def rate(self) -> float:
        return self.jobs / statistics.median(run.wall for run in self.first)

    @property
    def ratio(self) -> float:
        return self.rate / statistics.median(self.raw)


@dataclass(frozen=True)
class Sweep:
    batch: int
    seconds: list[float]
    cpu: list[float]
    longest_tx: list[float]
    """Per round: the longest batch transaction, which is how long another writer may wait behind it."""


def jobs_file(directory: Path, count: int) -> Path:
    path = directory / "jobs.txt"
    path.write_text("".join(f"exp_{n:08x}\n" for n in range(count)), encoding="utf-8")
    return path


def contract_file(directory: Path) -> Path:
    path = directory / "bench.toml"
    path.write_text(contract_text("http://127.0.0.1:9"), encoding="utf-8")
    return path


def enqueue(home: Path, contract: Path, jobs: Path, db: str | None) -> Run:
    """The real command, timed from spawn to exit; CPU is the child's user + system time. The contract is
    installed first, untimed, as an operator does once (enqueue refuses a version that is not installed)."""
    flags = ["--jobs-file", str(jobs), "--operation-prefix", "bulk", *(["--db", db] if db else [])]
    timed_command(home, ["contracts", "install", str(contract), "--by", "bench", *(["--db", db] if db else [])])
    return timed_command(home, ["enqueue", "--contract", str(contract), *flags])


def one_job(directory: Path, rounds: int) -> list[Run]:
    """`enqueue --job`, for one job: what each operation would cost as a command of its own."""
    contract = contract_file(directory)
    home = directory / "home-one"
    timed_command(home, ["contracts", "install", str(contract), "--by", "bench"])  # once, untimed
    return [timed_command(home, ["enqueue", "--contract", str(contract), "--job", f"one_{n}"]) for n in range(rounds)]


def timed_command(home: Path, args: list[str]) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = [sys.executable, "-m", "pollwarden", *args]
    started = time.perf_counter()
    ran = subprocess.run(command, env={**os.environ, "POLLWARDEN_HOME": str(home)}, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if ran.returncode != 0:
        raise SystemExit(f"enqueue failed ({ran.returncode}): {ran.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(wall, cpu)


def raw_sqlite_commits(directory: Path, seconds: float = RAW_SECONDS) -> float:
    """One-row INSERT commits per second in a file beside the store's, with the store's pragmas."""
    path = directory / f"raw-{time.monotonic_ns()}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        return _commits(lambda: _sqlite_commit(conn), seconds)
    finally:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)


def _sqlite_commit(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO t (v) VALUES ('x')")
    conn.execute("COMMIT")


def _commits(commit: Callable[[], None], seconds: float) -> float:
    count, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        commit()
        count += 1
    return count / elapsed


def raw_postgres_commits(url: str, seconds: float = RAW_SECONDS) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_raw (id bigserial PRIMARY KEY, v text NOT NULL)")

        def commit() -> None:  # autocommit: one statement, one transaction
            conn.execute("INSERT INTO bench_raw (v) VALUES ('x')")

        return _commits(commit, seconds)


@contextmanager
def postgres_database() -> Iterator[str]:
    """A new database upgraded to this schema, dropped afterwards."""
    import psycopg
    from psycopg import sql

    from pollwarden.store.postgres import upgrade_database

    name = f"pollwarden_bench_{os.getpid()}_{time.monotonic_ns()}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    try:
        upgrade_database(url)
        yield url
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def measure(name: str, jobs: int, rounds: int, directory: Path) -> Backend:
    contract, path = contract_file(directory), jobs_file(directory, jobs)
    first: list[Run] = []
    again: list[Run] = []
    raw: list[float] = []
    for round_ in range(rounds):
        home = directory / f"home-{name}-{round_}"
        if name == "sqlite":
            raw.append(raw_sqlite_commits(directory))
            first.append(enqueue(home, contract, path, None))
            again.append(enqueue(home, contract, path, None))
            continue
        with postgres_database() as url:
            raw.append(raw_postgres_commits(url))
            first.append(enqueue(home, contract, path, url))
            again.append(enqueue(home, contract, path, url))
    return Backend(name, jobs, first, again, raw)


def sweep(jobs: int, rounds: int, directory: Path) -> list[Sweep]:
    """In process on SQLite: every batch size on a fresh file per round, the sizes' order rotated each round so
    a burst of load elsewhere on the machine does not land on one size only. CPU is this process's time."""
    contract = parse_contract(contract_text("http://127.0.0.1:9"))
    keys = load_or_create_keys(directory / "sweep-home")
    requests = [WatchRequest(contract, f"exp_{n:08x}", f"bulk-{n + 1}", by="enqueue") for n in range(jobs)]
    found = {batch: Sweep(batch, [], [], []) for batch in SWEEP}
    for round_ in range(rounds):
        for batch in SWEEP[round_ % len(SWEEP) :] + SWEEP[: round_ % len(SWEEP)]:
            path = directory / f"sweep-{batch}-{round_}.db"
            store = open_store(path, keys=keys, trusted_checkpoint_path=None)
            transactions: list[float] = []
            create_many = store.create_many

            def timed(
                operations: Sequence[NewOperation],
                create: Callable[[Sequence[NewOperation]], None] = create_many,
                transactions: list[float] = transactions,
            ) -> None:
                started = time.perf_counter()
                create(operations)
                transactions.append(time.perf_counter() - started)

            setattr(store, "create_many", timed)  # noqa: B010 - this instance only, to time its transactions
            install(store, contract, by="bench", via="bench", source="bench", now=store.db_now())
            started, cpu = time.perf_counter(), time.process_time()
            Engine(store, owner="bench", clock=store.db_now).admit_many(requests, batch=batch)
            found[batch].seconds.append(time.perf_counter() - started)
            found[batch].cpu.append(time.process_time() - cpu)
            found[batch].longest_tx.append(max(transactions))
            store.close()
            for suffix in ("", "-wal", "-shm"):
                path.with_name(path.name + suffix).unlink(missing_ok=True)
    return [found[batch] for batch in SWEEP]


def database_bytes(directory: Path, jobs: int) -> float:
    """Bytes of database per operation once the WAL is checkpointed: what a batch writes per operation."""
    path = directory / "size.db"
    store = open_store(path, keys=load_or_create_keys(directory / "size-home"), trusted_checkpoint_path=None)
    contract = parse_contract(contract_text("http://127.0.0.1:9"))
    install(store, contract, by="bench", via="bench", source="bench", now=store.db_now())
    before = path.stat().st_size
    Engine(store, owner="bench", clock=store.db_now).admit_many(
        [WatchRequest(contract, f"exp_{n:08x}", f"bulk-{n + 1}", by="enqueue") for n in range(jobs)]
    )
    store.close()  # the last connection checkpoints the WAL into the file
    return (path.stat().st_size - before) / jobs


def machine() -> str:
    return f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def load() -> str:
    return ", ".join(f"{value:.1f}" for value in os.getloadavg())


def render(
    backends: list[Backend],
    single: list[Run],
    sweeps: list[Sweep],
    per_op: float,
    command: str,
    loads: tuple[str, str],
) -> str:
    jobs = backends[0].jobs
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        HEADING,
        "",
        f"Written by `bench/enqueue_bench.py` (a benchmark, not a test) on {now}. Command: `{command}`.",
        f"Machine: {machine()}; load average {loads[0]} at the start, {loads[1]} at the end (a shared machine:"
        " other work ran at the same time).",
        "",
        "The real command in a subprocess, interpreter start and imports included, on a fresh home or database"
        " each round: `pollwarden enqueue --contract bench.toml --jobs-file jobs.txt --operation-prefix bulk`."
        " Each operation is created with its own durable record and sealed, chained `created` audit record, one"
        f" transaction per batch of {BATCH}. Medians over the rounds. The physical limit beside it, measured in"
        " the same run and interleaved with the rounds, is the raw commit rate of the same database with the same"
        " settings (SQLite: WAL, synchronous=FULL, the same directory; PostgreSQL: the same server), one one-row"
        " INSERT per commit.",
        "",
        "| backend | job ids | wall | CPU | operations/s | raw commits/s | ratio | re-run (all enqueued) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b in backends:
        wall = statistics.median(run.wall for run in b.first)
        cpu = statistics.median(run.cpu for run in b.first)
        again = statistics.median(run.wall for run in b.again)
        raw = statistics.median(b.raw)
        lines.append(
            f"| {b.name} | {b.jobs} | {wall:.2f} s | {cpu:.2f} s | {b.rate:.0f} | {raw:.0f} | {b.ratio:.2f} |"
            f" {again:.2f} s |"
        )
    sqlite = backends[0]
    cpu_us = statistics.median(run.cpu for run in sqlite.first) / jobs * 1e6
    one = statistics.median(run.wall for run in single)
    lines += [
        "",
        "Ratio: operations per second over raw commits per second. Separate commands (`enqueue --job`, one per"
        f" job; one of them took {one:.2f} s here, process start included) commit once per operation, so they"
        f" could reach at most 1.0 even without their start-up; they would need about {one * jobs / 3600:.1f} h"
        f" for {jobs} jobs. In one batch file the {-(-jobs // BATCH)} commits are a small part: what is left is"
        f" CPU, about {cpu_us:.0f} us per operation with the start-up spread over the file (admission, the"
        " record's and the event's JSON, AES-GCM sealing, the SQL), so the ratio moves with how fast this"
        " machine's disk commits against its CPU, which changes from minute to minute on a shared machine; the"
        " wall column is what the target (10,000 in at most 5 s) is read against. The re-run is the same command"
        " again on the same store: every job is found enqueued (the same-id rule), nothing is created, and the"
        " summary says so.",
    ]
    if len(backends) > 1:
        pg = backends[1]
        lines += [
            "",
            "PostgreSQL: a batch of 500 is a handful of statements, whatever its size: its new logs' advisory"
            " locks in one, their heads read in one, the operation rows 100 to a statement and the audit records"
            " 128 to a statement (each operation cost three round trips before: its lock, its head's read, its"
            " INSERT). What is left is the server's own work and CPU on two shared cores:"
            f" {statistics.median(run.wall for run in pg.first):.1f} s for {pg.jobs}, against"
            f" {statistics.median(run.wall for run in sqlite.first):.1f} s on SQLite (each batch also signs one"
            " head, as every transaction does).",
        ]
    if sweeps:
        lines += [
            "",
            f"Batch size, in process on SQLite ({jobs} job ids, a fresh file each, medians over the rounds, the"
            " order of the sizes rotated each round). The longest batch transaction is how long a worker's write"
            f" may wait behind the enqueue (SQLite has one write lock). One operation adds {per_op / 1024:.1f} KiB"
            " of database pages (the record, the contract text, the sealed audit record, their index entries);"
            " SQLite's default page cache is 2 MiB, so a batch of more than about"
            f" {2 * 1024 * 1024 / per_op:.0f} operations no longer fits in it and spills to the WAL before it"
            " commits. Read the CPU column first: it is what the batch size changes (or does not); the wall"
            " column also carries whatever else the shared machine was doing during that round.",
            "",
            "| batch | wall | CPU | operations/s | longest batch transaction |",
            "|---|---|---|---|---|",
        ]
        for sweep_ in sweeps:
            wall = statistics.median(sweep_.seconds)
            lines.append(
                f"| {sweep_.batch} | {wall:.2f} s | {statistics.median(sweep_.cpu):.2f} s | {jobs / wall:.0f} |"
                f" {statistics.median(sweep_.longest_tx) * 1000:.0f} ms |"
            )
    lines += [
        "",
        f"Why {BATCH}: a batch's commit (one fsync on SQLite, one round trip and WAL flush on PostgreSQL) is a"
        " small part of a batch of a few hundred, so larger batches buy little, while each one holds SQLite's one"
        " write lock for its whole length (a worker waits behind it), outgrows the page cache past a few hundred"
        " operations, and on PostgreSQL holds one advisory lock per new audit log until its commit (the server's"
        " shared lock table has max_locks_per_transaction x max_connections slots, 6,400 by default, shared"
        " with every worker). A kill loses at most one batch of work, which the same command run again redoes.",
        "",
    ]
    return "\n".join(lines)


def write_section(path: Path, section: str) -> None:
    """Replace this benchmark's section of `path` (from its heading to the next `## `), keeping the others."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Performance\n\n"
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == HEADING), None)
    if start is None:
        body = text if text.endswith("\n") else text + "\n"
        path.write_text(body + ("\n" if not body.endswith("\n\n") else "") + section, encoding="utf-8")
        return
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    rest = "".join(lines[end:])
    path.write_text("".join(lines[:start]) + section + ("\n" + rest if rest else ""), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.enqueue_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="job ids in the file (default 10000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per backend, medians kept (default 3)")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-sweep", action="store_true", help="leave out the batch size sweep")
    parser.add_argument("--out", type=Path, default=DOC, help=f"markdown file to update (default {DOC})")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.rounds < 1:
        parser.error("--jobs and --rounds must be at least 1")
    start_load = load()
    with tempfile.TemporaryDirectory(prefix="pw-enqueue-bench-", dir=os.environ.get("TMPDIR")) as tmp:
        directory = Path(tmp)
        backends = [measure("sqlite", args.jobs, args.rounds, directory)]
        if not args.skip_postgres:
            backends.append(measure("postgres", args.jobs, args.rounds, directory))
        single = one_job(directory, args.rounds)
        sweeps = [] if args.skip_sweep else sweep(args.jobs, args.rounds, directory)
        per_op = database_bytes(directory, args.jobs)
    command = " ".join(["python -m bench.enqueue_bench", *(argv if argv is not None else sys.argv[1:])]).strip()
    section = render(backends, single, sweeps, per_op, command, (start_load, load()))
    print(section)
    write_section(args.out, section)
    print(f"wrote the {HEADING[3:]!r} section of {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
