"""Nothing slow on the lanes: a worker's healthy polls per second with and without a hung token command and two
silent providers, as a ratio (docs/performance.md, "Nothing slow on the lanes").

Not a test: it prints a table. Run from the repository root:

    python -m bench.lanes_bench [--backend sqlite|postgres|both] [--seconds 15] [--operations 600]
                                [--delay 2] [--rounds 3] [--tree PATH]

Each run seeds `--operations` healthy operations on `bench.fast_provider`, in a process of its own, each polled
every `--delay` seconds, their first polls spread over one delay: an offered load (300 polls/s by default) well
under what a worker polls on this machine, so "the normal rate" is the schedule's and every healthy poll the
worker misses is one the adverse run cost. It runs one `pollwarden worker` with its default settings. The
adverse run adds, in the same database and due before any healthy operation (created first), so the worker's
first batches meet them:

- a contract of 20 operations on a second fast provider, polled every second, whose `token_command` answers at
  once the first time and hangs on every refresh (its `token_ttl` is 1 s, so it refreshes within the first
  seconds, and hangs from then on: the measurement starts after the warm-up, before the command's 30 s timeout);
- two providers that accept connections and never answer (4 operations each, a 60 s timeout: every one of their
  requests is in flight through the whole measurement).

Healthy polls are what the healthy provider counted over the measurement window, after a warm-up (imports, the
first claims, the first refresh). `--tree PATH` runs the worker of another checkout (its `src` first on
PYTHONPATH), to measure the code before a change against the same harness.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from pollwarden import events as ev
from pollwarden.audit import load_or_create_keys
from pollwarden.core import new_record, parse_contract
from pollwarden.simulator import contract_text

from .throughput import Provider, _seeding_store, database, seed

HANGING = """
import pathlib, sys, time
runs = pathlib.Path(sys.argv[1])
n = int(runs.read_text()) if runs.exists() else 0
runs.write_text(str(n + 1))
if n:
    time.sleep(45)  # every refresh hangs past the window (the worker gives up on it after its 30 s timeout)
print("tok-BENCH-HANGING")
"""


class Silent:
    """A provider that accepts every connection and never answers; `close` ends them all."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._held.append(conn)

    def close(self) -> None:
        self._listener.close()
        for conn in self._held:
            conn.close()


@dataclass
class Rate:
    backend: str
    adverse: bool
    seconds: float
    polls: int

    @property
    def per_second(self) -> float:
        return self.polls / self.seconds


def _add(target: str, home: Path, text: str, prefix: str, count: int) -> None:
    contract = parse_contract(text)
    store = _seeding_store(target, home)
    try:
        now = store.db_now()
        for n in range(count):
            record = new_record(contract, operation_id=f"{prefix}{n:03d}", job_id=f"{prefix}{n}", now=now)
            store.create(record, contract.source_text, ev.Created.prepared({"bench": True}))
    finally:
        store.close()


def run(
    backend: str, *, adverse: bool, operations: int, delay: float, seconds: float, warmup: float, tree: Path | None
) -> Rate:
    with tempfile.TemporaryDirectory(prefix="pw-lanes-") as tmp:
        home = Path(tmp)
        load_or_create_keys(home)
        healthy = Provider()
        others: list[Provider] = []
        silent: list[Silent] = []
        try:
            with database(backend, home) as target:
                if adverse:  # created first, so due first: the worker's first batches meet them
                    script = home / "token.py"
                    script.write_text(HANGING, encoding="utf-8")
                    argv = json.dumps([sys.executable, str(script), str(home / "runs")])
                    auth = f'\n[auth]\ntoken_command = {argv}\ntoken_ttl = "1s"\n'
                    others.append(Provider())
                    hung = contract_text(others[0].url, name="hung", timeout="5s", base_delay="1s", max_delay="1s",
                                         deadline="2h", max_requests=100_000, extra=auth)  # fmt: skip
                    _add(target, home, hung, "hung", 20)
                    for name in ("silent-a", "silent-b"):
                        silent.append(Silent())
                        text = contract_text(silent[-1].url, name=name, timeout="60s", deadline="2h",
                                             max_requests=100_000)  # fmt: skip
                        _add(target, home, text, name, 4)
                seed(target, home, healthy.url, operations, delay=f"{delay:g}s", spread=delay)
                env = {**os.environ, "POLLWARDEN_HOME": str(home)}
                if tree is not None:
                    env["PYTHONPATH"] = os.pathsep.join([str(tree / "src"), env.get("PYTHONPATH", "")])
                log = (home / "worker.log").open("w")
                worker = subprocess.Popen(
                    [sys.executable, "-m", "pollwarden", "worker", "--processes", "1", "--db", target],
                    env=env, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL,
                )  # fmt: skip
                try:
                    time.sleep(warmup)
                    # The window opens once the worker polls, however long it took to start: a fixed warm-up
                    # alone left a loaded machine's window before the worker's first poll (polls=0, seen at load
                    # 20). Two minutes at most, then whatever it counts.
                    waiting = time.monotonic()
                    while not healthy.stats()["requests"] and time.monotonic() - waiting < 120:
                        time.sleep(0.05)
                    before = healthy.stats()["requests"]
                    started = time.monotonic()
                    time.sleep(seconds)
                    polls = int(healthy.stats()["requests"] - before)
                    elapsed = time.monotonic() - started
                finally:
                    for one in silent:
                        one.close()  # their requests end, so the worker can stop
                    worker.send_signal(signal.SIGTERM)
                    try:
                        worker.wait(timeout=90)
                    except subprocess.TimeoutExpired:
                        worker.kill()
                        worker.wait()
                    log.close()
                return Rate(backend, adverse, elapsed, polls)
        finally:
            healthy.close()
            for provider in others:
                provider.close()
            for one in silent:
                one.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--operations", type=int, default=600)
    parser.add_argument("--delay", type=float, default=2.0, help="seconds between a healthy operation's polls")
    parser.add_argument("--rounds", type=int, default=3, help="alone and adverse runs, alternated; medians shown")
    parser.add_argument("--tree", type=Path, help="another checkout whose worker to measure")
    args = parser.parse_args()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    print("| backend | healthy polls/s, alone | with a hung token command and two silent providers | ratio | rounds |")
    print("|---|---:|---:|---:|---|")
    for backend in backends:
        rates: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.rounds):  # alternated, so a machine whose load changes meanwhile weighs on both
            for flag in (False, True):
                measured = run(backend, adverse=flag, operations=args.operations, delay=args.delay,
                               seconds=args.seconds, warmup=args.warmup, tree=args.tree)  # fmt: skip
                rates[flag].append(measured.per_second)
        alone, adverse = statistics.median(rates[False]), statistics.median(rates[True])
        each = ", ".join(f"{a:,.0f}/{b:,.0f}" for a, b in zip(rates[False], rates[True], strict=True))
        print(f"| {backend} | {alone:,.0f} | {adverse:,.0f} | {adverse / alone:.2f} | {each} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
