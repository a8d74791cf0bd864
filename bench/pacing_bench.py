"""Pacing as a due time, measured: 62 operations due for one provider, a worker paced to `--provider-rate
NAME=0.2` (a request every 5 s), for `--seconds` of real time against the simulator on loopback.

Reports what a scrape of the fleet gauges says each second (due, overdue, the oldest due lag) while operations
wait unpolled, and at the end the polls made and the `paced` audit events written (at most one per operation per
wait). Issue 25 found, before: the due, overdue and lag gauges at 0 within 4 s with an operation due for 7 minutes
unpolled, and 945 `paced` events for 22 polls in 90 s.

    .venv/bin/python -m bench.pacing_bench --seconds 90
"""

from __future__ import annotations

import argparse
import io
import tempfile
import threading
import time
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from prometheus_client import generate_latest

from pollwarden.audit import load_or_create_keys
from pollwarden.core.admission import WatchRequest
from pollwarden.core.contract.parse import parse_contract
from pollwarden.engine import Engine
from pollwarden.engine.installed import install
from pollwarden.events import WatchInterrupted
from pollwarden.fleet.metrics import Metrics
from pollwarden.fleet.worker import JsonLog, Worker
from pollwarden.simulator import Simulator, contract_text
from pollwarden.store.base import Store
from pollwarden.store.open import open_store

OPERATIONS = 62


def _gauge(scraped: str, name: str) -> float:
    line = next(line for line in scraped.splitlines() if line.startswith(f"pollwarden_fleet_{name}{{"))
    return float(line.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--rate", type=float, default=0.2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Simulator() as sim:
        home = Path(tmp)

        def opened() -> Store:
            return open_store(home / "pollwarden.db", keys=load_or_create_keys(home), trusted_checkpoint_path=None)

        text = contract_text(sim.url, name="deploys", deadline="2h", max_requests=100, base_delay="1s", max_delay="2s")
        contract = parse_contract(text, source="deploys.toml")
        store = opened()
        engine = Engine(store, owner="enqueue")
        install(store, contract, by="bench", via="bench", source="bench", now=engine.clock())
        for n in range(OPERATIONS):
            engine.admit(WatchRequest(contract, f"never-{n}", f"op-{n:02}", by="enqueue"))
        # One of them has been due for 7 minutes, as in the issue's finding.
        stored = store.get("op-00")
        assert stored is not None
        record = stored.record
        lease = store.claim("op-00", "bench", engine.clock(), timedelta(seconds=5))
        assert lease is not None
        late = replace(record, next_poll_at=engine.clock() - timedelta(minutes=7))
        made_late = [WatchInterrupted.of(record, by="bench", why="made late")]
        store.write(lease[0], late, made_late, engine.clock(), release=True)
        metrics = Metrics()
        metrics.count_fleet(opened, fresh_for=0.0)
        worker = Worker(
            opened, owner="worker-1", concurrency=8, metrics=metrics, idle_sleep=0.2,
            provider_rates={"deploys": args.rate}, log=JsonLog(io.StringIO(), worker="worker-1"),
        )  # fmt: skip
        runner = threading.Thread(target=worker.run)
        runner.start()
        started = time.monotonic()
        samples: list[tuple[float, float, float, float]] = []
        try:
            while (elapsed := time.monotonic() - started) < args.seconds:
                scraped = generate_latest(metrics.registry).decode()
                due, overdue, lag = (_gauge(scraped, g) for g in ("due", "overdue", "oldest_due_lag_seconds"))
                samples.append((elapsed, due, overdue, lag))
                time.sleep(1.0)
        finally:
            worker.stop.set()
            runner.join()
        polls = sum(s.record.polls_completed for s in store.all())
        paced = Counter(op for s in store.all() for op in [s.record.operation_id]
                        for e in store.events(op) if e.kind == "paced")  # fmt: skip
        store.close()
    for elapsed, due, overdue, lag in samples[:: max(1, len(samples) // 10)]:
        print(f"t={elapsed:5.1f}s due={due:.0f} overdue={overdue:.0f} oldest_due_lag={lag:.0f}s")
    print(f"{args.seconds:.0f} s at {args.rate}/s: {polls} polls, {sum(paced.values())} paced events"
          f" ({len(paced)} operations, at most {max(paced.values(), default=0)} each)")  # fmt: skip
    print(f"lowest due gauge while polling: {min(s[1] for s in samples):.0f} of {OPERATIONS}")


if __name__ == "__main__":
    main()
