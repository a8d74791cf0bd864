"""Learnt schedules per `[schedule] learn_key` (issue 26): jobs of several kinds in one contract, planned from one
distribution of them all or from each kind's own, against the plain backoff, side by side in one run.

Through the engine on a real SQLite store (the samples, the keyed reads and the model cache are the product's),
on a simulated clock: each job's answer names its kind in `model`, and runs for its kind's median times a
lognormal factor. Every schedule sees the same jobs (one seed); the first `--warm` jobs of each run teach it and
are not counted. A watch learns its key from its first answer, so its first check is still placed by the whole
contract's history (a submission's key is read from its body, before the first check).

    python -m bench.learn_keys [--jobs 300] [--warm 100] [--out docs/schedules.md]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pollwarden.audit import load_or_create_keys
from pollwarden.core.admission import WatchRequest
from pollwarden.core.contract.parse import Contract, parse_contract
from pollwarden.core.observe import Exchange, Response
from pollwarden.engine import Engine, Watching, learning
from pollwarden.engine.installed import install
from pollwarden.store.sqlite import SQLiteStore

from .contracts import Value, contract_text

LAG_TARGET = 30.0
WORKLOADS: dict[str, tuple[tuple[tuple[str, float], ...], float]] = {
    "three kinds 30s / 3m / 10m, sigma 0.1": ((("s", 30.0), ("m", 180.0), ("l", 600.0)), 0.1),
    "two kinds 20s / 10m, sigma 0.3": ((("fast", 20.0), ("slow", 600.0)), 0.3),
}
"""Kinds (name, median seconds) and the lognormal sigma of each kind's durations."""
SCHEDULES = {
    "plain backoff (learn = false)": (False, False),
    "learnt, one distribution": (True, False),
    "learnt per learn_key": (True, True),
}


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Provider:
    """Answers `running` until a job's end, then `succeeded`; every answer names the job's kind."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.ends: dict[str, datetime] = {}
        self.kinds: dict[str, str] = {}
        self.requests = 0

    def prepare(self) -> None:
        pass

    def renew(self) -> None:
        pass

    def fetch(
        self, job_id: str, extra_headers: Mapping[str, str] | None = None, *, location: str | None = None
    ) -> Exchange:
        self.requests += 1
        now = self.clock()
        state = "succeeded" if now >= self.ends[job_id] else "running"
        body = {"state": state, "result_url": f"https://results.example/{job_id}", "model": self.kinds[job_id]}
        return Response(status=200, headers={}, body=json.dumps(body).encode(), sent_at=now, received_at=now)


def contract(learn: bool, keyed: bool) -> Contract:
    schedule: dict[str, Value] = {"base_delay": "5s", "max_delay": "120s", "lag_target": f"{int(LAG_TARGET)}s"}
    schedule |= {"learn": learn} | ({"learn_key": "model"} if keyed else {})
    text = contract_text(schedule=schedule, limits={"deadline": "2h", "max_requests": 200})
    return parse_contract(text, source="bench-learn-keys.toml")


@dataclass(frozen=True)
class Outcome:
    requests: float
    by_kind: dict[str, float]
    p50: float
    p95: float
    worst: float


def run(workload: str, schedule: str, jobs: int, warm: int, seed: int) -> Outcome:
    # The engine reads a model again at most once a second of wall time; here a simulated hour passes in a
    # second, so that would hold a model for hundreds of jobs (and make each run differ): read at once, as a
    # second is to jobs that take minutes (and whatever the read cost: `SHARE`). Put back after, for whoever else
    # runs in this process.
    kept = learning.SETTLE, learning.SHARE
    learning.SETTLE, learning.SHARE = 0.0, math.inf
    try:
        return _run(workload, schedule, jobs, warm, seed)
    finally:
        learning.SETTLE, learning.SHARE = kept


def _run(workload: str, schedule: str, jobs: int, warm: int, seed: int) -> Outcome:
    kinds, sigma = WORKLOADS[workload]
    learn, keyed = SCHEDULES[schedule]
    c = contract(learn, keyed)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        store = SQLiteStore(home / "bench.db", keys=load_or_create_keys(home))
        try:
            clock = Clock()
            install(store, c, by="bench", via="bench", source="bench", now=clock())
            engine = Engine(store, owner="bench", clock=clock, rng=random.Random(seed))
            provider = Provider(clock)
            rng = random.Random(seed)
            counted: list[tuple[int, float, str]] = []
            for n in range(warm + jobs):
                kind, median = kinds[rng.randrange(len(kinds))]
                job = f"job-{n}"
                provider.ends[job] = clock() + timedelta(seconds=median * math.exp(rng.gauss(0, sigma)))
                provider.kinds[job] = kind
                before = provider.requests
                # Named, not drawn: an id sets its fleet phase (`core.learnt.phase`), so each run is the same.
                request = WatchRequest(c, job, operation_id=f"bench-{seed}-{n}", by="bench")
                record = engine.admit(request).record
                engine.run(c, provider, record.operation_id, Watching(sleep=clock.sleep), record=record)
                if n >= warm:
                    lag = (clock() - provider.ends[job]).total_seconds()
                    counted.append((provider.requests - before, lag, kind))
        finally:
            store.close()
    lags = sorted(lag for _, lag, _ in counted)
    by_kind = {}
    for kind, _ in kinds:
        mine = [sent for sent, _, k in counted if k == kind]
        by_kind[kind] = sum(mine) / max(1, len(mine))
    return Outcome(
        requests=sum(sent for sent, _, _ in counted) / len(counted),
        by_kind=by_kind,
        p50=_quantile(lags, 0.50),
        p95=_quantile(lags, 0.95),
        worst=lags[-1],
    )


def _quantile(ordered: Sequence[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def table(jobs: int, warm: int, seed: int) -> str:
    rows = [
        "| workload | schedule | requests per job | by kind | p50 lag (s) | p95 lag (s) | max lag (s) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for workload in WORKLOADS:
        for schedule in SCHEDULES:
            got = run(workload, schedule, jobs, warm, seed)
            kinds = ", ".join(f"{k} {v:.2f}" for k, v in got.by_kind.items())
            rows.append(
                f"| {workload} | {schedule} | {got.requests:.2f} | {kinds} | {got.p50:.1f} | {got.p95:.1f}"
                f" | {got.worst:.1f} |"
            )
    return "\n".join(rows) + "\n"


BEGIN = "<!-- bench-learn-keys: begin -->"
END = "<!-- bench-learn-keys: end -->"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300, help="jobs counted per run, after the warm-up")
    parser.add_argument("--warm", type=int, default=100, help="jobs that teach each run first, not counted")
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--out", type=Path, help="a Markdown file whose bench-learn-keys section is replaced")
    args = parser.parse_args()
    text = table(args.jobs, args.warm, args.seed)
    print(text, end="")
    if args.out is not None:
        page = args.out.read_text()
        start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
        args.out.write_text(page[:start] + "\n" + text + page[end:])


if __name__ == "__main__":
    main()
