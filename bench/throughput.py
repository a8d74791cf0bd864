"""Worker throughput against physical limits measured in the same run (used by `bench.fleet_bench`).

A throughput figure alone says little on a shared 2-core machine: the same code runs at different speeds on
different days. So each run also measures what the machine can do at best, right before the worker runs:

- the raw commit rate of the database with the store's own settings (SQLite: WAL, synchronous=FULL, one row
  per `BEGIN IMMEDIATE ... COMMIT`; PostgreSQL: one row per autocommit INSERT), which bounds any durable step;
- the CPU the worker and the provider spend per poll (from /proc), which says where the rest of the time went.

The provider is `bench.fast_provider` in a process of its own, so the worker is what is measured. A poll is the
whole durable step: batch claim with a fenced lease, the reservation committed before the request is sent, the
request, the fenced record with its sealed, chained audit events.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

from pollwarden import events as ev
from pollwarden.audit import load_or_create_keys
from pollwarden.core import new_record, parse_contract
from pollwarden.core.durations import parse_rfc3339
from pollwarden.engine.installed import install
from pollwarden.fleet.defaults import DEFAULT_CONCURRENCY, LANES, POSTGRES_CONCURRENCY
from pollwarden.simulator import contract_text
from pollwarden.store.base import Store
from pollwarden.store.open import open_store
from pollwarden.store.sqlite import SQLiteStore

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    """One measured worker run; rates are per second of the measurement window."""

    backend: str
    workers: int
    operations: int
    seconds: float
    polls: int
    raw_commits: float
    worker_cpu_us: float
    """CPU (user + system, all worker processes) per poll, in microseconds."""
    provider_cpu_us: float
    db_cpu_us: float
    """PostgreSQL server CPU per poll (the run database's backends), 0 for SQLite."""
    duplicates: int
    p50_ms: float
    p99_ms: float
    rss_mb: float
    offered: float | None = None
    """Polls per second the schedule asks for (a lateness run); None: the queue is always due."""

    @property
    def rate(self) -> float:
        return self.polls / self.seconds

    @property
    def ratio(self) -> float:
        return self.rate / self.raw_commits


# -- the machine's limits -------------------------------------------------------------------------------------


def sqlite_commit_rate(path: Path, seconds: float = 2.0) -> float:
    """Small durable commits per second on this disk, with the store's pragmas (`path` is a new file)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, at REAL, v TEXT)")
        n, started = 0, time.perf_counter()
        end = started + seconds
        while time.perf_counter() < end:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (at, v) VALUES (?, ?)", (time.time(), "x" * 64))
            conn.execute("COMMIT")
            n += 1
        return n / (time.perf_counter() - started)
    finally:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)


def postgres_commit_rate(url: str, seconds: float = 2.0) -> float:
    """One-row autocommit INSERTs per second (synchronous_commit on, the server's default)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS raw_commit (id BIGSERIAL PRIMARY KEY, at DOUBLE PRECISION, v TEXT)")
        n, started = 0, time.perf_counter()
        end = started + seconds
        while time.perf_counter() < end:
            conn.execute("INSERT INTO raw_commit (at, v) VALUES (%s, %s)", (time.time(), "x" * 64))
            n += 1
        rate = n / (time.perf_counter() - started)
        conn.execute("DROP TABLE raw_commit")
    return rate


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def with_descendants(pids: list[int]) -> list[int]:
    """These processes and every process below them: a `worker --processes N` is a supervisor whose children do the
    polling, and a live child's CPU is counted nowhere in its parent's /proc figures."""
    parent_of: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent_of[int(entry.name)] = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = list(pids), set(pids)
    while frontier:
        frontier = {pid for pid, parent in parent_of.items() if parent in frontier and pid not in found}
        found += sorted(frontier)
    return found


def postgres_backends(url: str) -> list[int]:
    """The server processes serving this run's database: other sessions on the same server are not counted."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (name,)).fetchall()
    return [int(row[0]) for row in rows]


def postgres_cpu(pids: list[int]) -> float:
    """CPU of these server backends (the worker's pooled connections live through the whole window)."""
    return sum(cpu_seconds(pid) for pid in pids)


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# -- the provider and the databases ---------------------------------------------------------------------------


class Provider:
    """`bench.fast_provider` in its own process; with `tls`, over https with a certificate it writes there
    (`cert`, which a worker trusts through SSL_CERT_FILE: its verifying context is the system's default)."""

    def __init__(self, tls: Path | None = None) -> None:
        command = [sys.executable, "-m", "bench.fast_provider"] + ([] if tls is None else ["--tls", str(tls)])
        self.cert = None if tls is None else tls / "cert.pem"
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening "):
            self.proc.kill()
            raise RuntimeError(f"the fast provider did not start: {line!r}")
        self.url = line.split(" ", 1)[1]

    def stats(self) -> dict[str, float]:
        context = None if self.cert is None else ssl.create_default_context(cafile=str(self.cert))
        with urllib.request.urlopen(self.url + "/_stats", timeout=10, context=context) as answer:
            found: dict[str, float] = json.loads(answer.read())
        return found

    def close(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def database(backend: str, home: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield str(home / "pollwarden.db")
        return
    import psycopg

    from pollwarden.store.postgres import upgrade_database

    name = f"pollwarden_bench_{os.getpid()}_{time.monotonic_ns()}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    url = ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    try:
        upgrade_database(url)
        yield url
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


def _seeding_store(target: str, home: Path) -> Store:
    """The operations are created fast (no fsync): seeding is not what is measured."""
    keys = load_or_create_keys(home)
    if target.startswith("postgresql://"):
        return open_store(target + "?options=-csynchronous_commit%3Doff", keys=keys)
    return SQLiteStore(Path(target), keys=keys, synchronous="OFF")


def seed(target: str, home: Path, url: str, operations: int, *, delay: str, spread: float) -> None:
    """`operations` active operations; their first polls spread evenly over `spread` seconds from now."""
    # The contract asks for each request's reservation number ([headers]): the provider counts a slot polled twice.
    text = contract_text(url, name="bench", timeout="5s", base_delay=delay, max_delay=delay, deadline="2h",
                         max_requests=100_000, max_transport_failures=100, reservation_header=True)  # fmt: skip
    contract = parse_contract(text)
    store = _seeding_store(target, home)
    try:
        now = store.db_now()
        install(store, contract, by="bench", via="bench", source="bench.throughput", now=now)  # workers run installed
        for n in range(operations):
            record = new_record(contract, operation_id=f"op{n:06d}", job_id=f"j{n}", now=now)
            if spread:
                record = replace(record, next_poll_at=now + timedelta(seconds=spread * n / operations))
            store.create(record, contract.source_text, ev.Created.prepared({"bench": True}))
    finally:
        store.close()


# -- one run --------------------------------------------------------------------------------------------------


def measure(
    backend: str,
    *,
    workers: int = 1,
    operations: int = 10_000,
    seconds: float = 15.0,
    warmup: float = 3.0,
    delay: str = "1s",
    spread: float = 0.0,
    offered: float | None = None,
    worker_args: tuple[str, ...] = (),
    tls: bool = False,
    processes: int | None = 1,
) -> Run:
    """Seed, measure the raw commit rate, then run `workers` worker commands and count what the provider saw
    (over https with `tls`).

    Each command runs with `--processes PROCESSES` (None: no such flag, for a tree that has none, whose worker is
    one process)."""
    if processes is not None:
        worker_args = ("--processes", str(processes), *worker_args)
    with tempfile.TemporaryDirectory(prefix="pw-bench-") as tmp:
        home = Path(tmp)
        if tls:
            (home / "tls").mkdir()
        provider = Provider(home / "tls" if tls else None)
        try:
            with database(backend, home) as target:
                raw = sqlite_commit_rate(home / "raw.db") if backend == "sqlite" else postgres_commit_rate(target)
                seed(target, home, provider.url, operations, delay=delay, spread=warmup + spread)
                return _run(backend, target, home, provider, workers, operations, seconds, warmup, raw, offered,
                            worker_args)  # fmt: skip
        finally:
            provider.close()


def _run(
    backend: str,
    target: str,
    home: Path,
    provider: Provider,
    workers: int,
    operations: int,
    seconds: float,
    warmup: float,
    raw: float,
    offered: float | None,
    worker_args: tuple[str, ...],
) -> Run:
    logs = [home / f"w{i}.log" for i in range(workers)]
    procs = start_workers(target, home, logs, worker_args, provider.cert)
    try:
        time.sleep(warmup)  # start-up (imports, the first claim) is not throughput
        before = provider.stats()
        polling = with_descendants([p.pid for p in procs])
        cpu_before = sum(cpu_seconds(pid) for pid in polling)
        backends = postgres_backends(target) if backend == "postgres" else []
        db_before = postgres_cpu(backends)
        started = time.monotonic()
        wall_start = time.time()
        time.sleep(seconds)
        after = provider.stats()
        elapsed = time.monotonic() - started
        wall_end = time.time()
        cpu = sum(cpu_seconds(pid) for pid in polling) - cpu_before
        db_cpu = postgres_cpu(backends) - db_before
        rss = sum(_rss_mb(pid) for pid in polling)
    finally:
        stop_workers(procs)
    polls = int(after["requests"] - before["requests"])
    lateness = [
        entry["lateness"]
        for log in logs
        for line in log.read_text().splitlines()
        if '"event": "polled"' in line
        for entry in [json.loads(line)]
        if wall_start <= parse_rfc3339(entry["ts"]).timestamp() <= wall_end
    ]
    quantiles = statistics.quantiles(lateness, n=100) if len(lateness) > 100 else [0.0] * 99
    per_poll = 1e6 / max(polls, 1)
    return Run(
        backend=backend,
        workers=workers,
        operations=operations,
        seconds=elapsed,
        polls=polls,
        raw_commits=raw,
        worker_cpu_us=cpu * per_poll,
        provider_cpu_us=(after["cpu_seconds"] - before["cpu_seconds"]) * per_poll,
        db_cpu_us=db_cpu * per_poll,
        duplicates=int(after["duplicates"]),
        p50_ms=quantiles[49] * 1000,
        p99_ms=quantiles[98] * 1000,
        rss_mb=rss,
        offered=offered,
    )


def start_workers(
    target: str, home: Path, logs: list[Path], worker_args: tuple[str, ...] = (), cert: Path | None = None
) -> list[subprocess.Popen[bytes]]:
    """One `pollwarden worker` command per log file (its stderr, the JSON lines), on `target`, with `home` as its
    POLLWARDEN_HOME (the audit keys); `cert`: a provider certificate the workers trust."""
    return [
        subprocess.Popen(
            [sys.executable, "-m", "pollwarden", "worker", "--db", target, *worker_args],
            env={**os.environ, "POLLWARDEN_HOME": str(home)} | ({} if cert is None else {"SSL_CERT_FILE": str(cert)}),
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
            stdin=subprocess.DEVNULL,
        )
        for log in logs
    ]


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM (a worker finishes its batch and gives its leases back), then a kill for one that hangs."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def lateness_run(backend: str, capacity: float, *, seconds: float = 15.0, worker_args: tuple[str, ...] = ()) -> Run:
    """Half of `capacity`: base = max delay 2 s with bounded jitter is a mean interval of 1.5 s per operation."""
    offered = capacity / 2
    operations = max(1, round(offered * 1.5))
    return measure(
        backend,
        operations=operations,
        seconds=seconds,
        warmup=4.0,
        delay="2s",
        spread=1.5,
        offered=offered,
        worker_args=worker_args,
    )


if __name__ == "__main__":  # a quick look: python -m bench.throughput [sqlite|postgres] [operations] [worker args...]
    which = sys.argv[1] if len(sys.argv) > 1 else "sqlite"
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    print(measure(which, operations=count, seconds=10, worker_args=tuple(sys.argv[3:])))


# -- the report -----------------------------------------------------------------------------------------------


def throughput_section(runs: list[Run], late: list[Run]) -> list[str]:
    """Markdown for docs/fleet-benchmark.md: the saturated runs, then lateness at half of capacity."""
    lines = [
        "## Worker throughput",
        "",
        "Each operation's job answers `running` (base = max delay 1 s, so the queue is always due); every worker"
        " process runs with the default settings (`pollwarden worker --processes 1 --db ...`: two lanes of"
        f" {DEFAULT_CONCURRENCY // LANES} on SQLite and {POSTGRES_CONCURRENCY // LANES} on PostgreSQL, group"
        " commit; *workers* is how many such processes). The"
        " provider is `bench/fast_provider.py` in a process of its own. A poll is the whole durable step: batch"
        " claim with fenced leases, reservations committed before any request is sent, the requests, the fenced"
        " records with their sealed, chained audit events. *Raw commits* is the database's rate of one-row"
        " durable commits with the store's settings (SQLite: WAL, synchronous=FULL; PostgreSQL: autocommit"
        " INSERT), measured right before the run on the same machine; *ratio* is polls/s over it. CPU columns"
        " are per poll (user + system, from /proc): *worker* all worker processes, *provider* the loopback"
        " provider, *server* the PostgreSQL backends of the run's database (other sessions share the server;"
        " its WAL writer and checkpointer are not counted). The machine has 2 cores, shared by the workers, the"
        " provider, PostgreSQL and whatever else runs. Lateness when saturated is the backlog, not a"
        " scheduling error (see the next table).",
        "",
        "| backend | workers | due operations | polls/s | raw commits/s | ratio | worker CPU | provider CPU"
        " | server CPU | double polls | peak RSS |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.backend} | {r.workers} | {r.operations} | {r.rate:.0f} | {r.raw_commits:.0f} | {r.ratio:.2f}"
        f" | {r.worker_cpu_us:.0f} us | {r.provider_cpu_us:.0f} us | {r.db_cpu_us:.0f} us | {r.duplicates}"
        f" | {r.rss_mb:.0f} MB |"
        for r in runs
    ]
    provider = min(r.provider_cpu_us for r in runs)
    lines += [
        "",
        f"The provider's own ceiling: {provider:.0f} us of CPU per request at best, so about"
        f" {1e6 / provider:.0f} requests/s on one core; it is not what limits these rows.",
        "",
        "### Lateness at half of capacity",
        "",
        "The same worker with a schedule that asks for half of the rate measured above (base = max delay 2 s,"
        " bounded jitter: an operation is due every 1.5 s on average, and there are 0.75 x capacity of them)."
        " Lateness is how long after `next_poll_at` its poll started.",
        "",
        "| backend | offered polls/s | polled/s | lateness p50 | lateness p99 | worker CPU |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.backend} | {r.offered or 0:.0f} | {r.rate:.0f} | {r.p50_ms:.0f} ms | {r.p99_ms:.0f} ms"
        f" | {r.worker_cpu_us:.0f} us |"
        for r in late
    ]
    return [*lines, ""]
