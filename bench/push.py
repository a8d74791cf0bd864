"""Push benchmark (issue 27): 50 callers, each waiting on one job, with polling only and with the provider posting
a signed push at each job's end (none lost, 10 % lost, 50 % lost), then hostile pushes against 50 running jobs.

Not a test: it prints a table and writes its section of docs/benchmarks.md (between the `push` markers, kept by
`bench.conformance` when it rewrites the file). Run from the repository root (`make bench-push`):

    python -m bench.push [--callers 50] [--seed 7]

Everything is real: the simulator on loopback (`Simulator(pusher=...)` posts Standard Webhooks pushes), the
receiver (`fleet.hooks` on the home's SQLite store, in this process), and one Python API `Watch` per caller
on its own thread, waking on the store's bell. The polling-only contract polls fast (250 ms doubling to 2 s) to
detect ends quickly; the push contract's schedule is only the safety net (15 s), since a push makes the check
due at once. Each job runs 3-6 s. Detection lag: from the job's end at the provider to the watch's return.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pollwarden import Succeeded, Watch, WatchCancelled
from pollwarden.core.contract.parse import load_contract
from pollwarden.engine.installed import install
from pollwarden.fleet.hooks import HooksServer, Receiver
from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator, Step, contract_text
from pollwarden.simulator.push import Pusher, forged, signed_push
from pollwarden.store.base import Store
from pollwarden.store.owner import process_owner

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
BEGIN, END = "<!-- push:begin -->", "<!-- push:end -->"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
PUSH = '\n[push]\nkind = "standard-webhooks"\nsecret_env = "BENCH_HOOK"\njob_id = "data.id"\n'


@dataclass(frozen=True)
class Row:
    name: str
    jobs: int
    detected: int
    requests: list[int]
    lags: list[float]
    answers: list[float]
    """Seconds the receiver took to answer each push sent."""

    @property
    def per_job(self) -> float:
        return statistics.fmean(self.requests)

    def p(self, q: float) -> float:
        ordered = sorted(self.lags)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _contract(directory: Path, base_url: str, *, push: bool) -> Path:
    path = directory / ("push.toml" if push else "poll.toml")
    base, top = ("15s", "15s") if push else ("250ms", "2s")
    text = contract_text(
        base_url, deadline="5m", max_requests=200, base_delay=base, max_delay=top, extra=PUSH if push else ""
    )
    path.write_text(text, encoding="utf-8")
    return path


def fleet(name: str, callers: int, *, lost: float | None, seed: int) -> Row:
    """`lost` None: polling only; else the fraction of pushes lost."""
    rng = random.Random(seed)
    with _receiving("pollwarden-bench-push-") as (home, _, hooks):
        pusher = None if lost is None else Pusher(f"{hooks.url}/hooks/exports", SECRET, lost=lost, rng=rng)
        with Simulator(pusher=pusher) as sim:
            contract = _contract(home.parent, sim.url, push=lost is not None)
            ends: dict[str, float] = {}
            done: dict[str, float] = {}
            outcomes: dict[str, object] = {}
            for n in range(callers):
                job = f"job-{n}"
                seconds = rng.uniform(3.0, 6.0)
                ends[job] = time.time() + seconds
                sim.add_job(job, [Step(body={"state": "running"}, seconds=seconds),
                                  Step(body={"state": "succeeded", "result_url": f"/r/{n}"})])  # fmt: skip
            threads = _callers(contract, home, list(ends), outcomes, done)
            for thread in threads:
                thread.join()
            if pusher is not None:
                ends.update(pusher.ended)
            requests = [sim.request_count(job) for job in ends]
            answers = [] if pusher is None else list(pusher.answered_in.values())
    detected = sum(isinstance(outcome, Succeeded) for outcome in outcomes.values())
    lags = [max(0.0, done[job] - ends[job]) for job in ends if job in done]
    return Row(name, callers, detected, requests, lags, answers)


def _callers(
    contract: Path, home: Path, jobs: list[str], outcomes: dict[str, object], done: dict[str, float]
) -> list[threading.Thread]:
    """One started thread a job, each a Python API `Watch` till its outcome (and when it came, in `done`)."""

    def caller(job: str) -> None:
        outcomes[job] = Watch(contract, job, home=home).run()
        done[job] = time.time()

    threads = [threading.Thread(target=caller, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    return threads


def after_check(name: str, callers: int) -> Row:
    """Each job's push posted the moment the provider answered its first check ("running"; the job has ended
    by the next): the case `[push] min_interval` once delayed by a second, as it counted from that answer. Lag:
    from the push's post to the watch's return."""
    with _receiving("pollwarden-bench-after-") as (home, _, hooks):
        url = f"{hooks.url}/hooks/exports"
        with Simulator() as sim:
            contract = _contract(home.parent, sim.url, push=True)
            jobs = [f"quick-{n}" for n in range(callers)]
            for n, job in enumerate(jobs):
                sim.add_job(job, [Step(body={"state": "running"}, times=1),
                                  Step(body={"state": "succeeded", "result_url": f"/r/{n}"})])  # fmt: skip
            done: dict[str, float] = {}
            outcomes: dict[str, object] = {}
            threads = _callers(contract, home, jobs, outcomes, done)
            sent: dict[str, float] = {}
            answers: list[float] = []
            while len(sent) < len(jobs):
                for job in jobs:
                    if job not in sent and sim.request_count(job) >= 1:
                        sent[job] = time.time()
                        began = time.monotonic()
                        _post(url, *_signed(job, f"msg_after_{job}", int(time.time())))
                        answers.append(time.monotonic() - began)
                time.sleep(0.002)
            for thread in threads:
                thread.join()
            requests = [sim.request_count(job) for job in jobs]
    detected = sum(isinstance(outcome, Succeeded) for outcome in outcomes.values())
    lags = [max(0.0, done[job] - sent[job]) for job in jobs if job in done]
    return Row(name, callers, detected, requests, lags, answers)


@dataclass(frozen=True)
class Hostile:
    sent: dict[str, int]
    answers: dict[str, set[int]]
    requests_caused: int
    woken: int


def _post(url: str, headers: dict[str, str], body: bytes) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _signed(job: str, delivery: str, stamp: int) -> tuple[dict[str, str], bytes]:
    return signed_push(SECRET, job, delivery, stamp=stamp)


@contextlib.contextmanager
def _receiving(prefix: str) -> Iterator[tuple[Path, Store, HooksServer]]:
    """A fresh home, its store, and a push receiver on it (in this process)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        store = open_store(home, keys="write")
        hooks = HooksServer(Receiver(store, owner=process_owner("hooks"), environ={"BENCH_HOOK": SECRET})).start()
        try:
            yield home, store, hooks
        finally:
            hooks.stop()
            store.close()


def hostile(callers: int) -> Hostile:
    """Forged, replayed, stale and oversized pushes for 50 running jobs whose next check is 15 s away."""
    with _receiving("pollwarden-bench-hostile-") as (home, store, hooks):
        url = f"{hooks.url}/hooks/exports"
        sent: dict[str, int] = {"forged": 0, "replayed": 0, "stale": 0, "oversized": 0}
        answers: dict[str, set[int]] = {kind: set() for kind in sent}
        with Simulator() as sim:
            contract = _contract(home.parent, sim.url, push=True)
            jobs = [f"run-{n}" for n in range(callers)]
            for job in jobs:
                sim.add_job(job, [Step(body={"state": "running"})])
            # Each job's delivery, seen once before any operation existed (it woke nothing): from now on a replay.
            install(store, load_contract(contract), by="bench", via="bench", source="bench", now=datetime.now(UTC))
            now = int(time.time())
            for job in jobs:
                _post(url, *_signed(job, f"msg_seen_{job}", now))
            watches = [Watch(contract, job, home=home) for job in jobs]
            threads = [threading.Thread(target=_quietly, args=(w,), daemon=True) for w in watches]
            for thread in threads:
                thread.start()
            while sum(sim.request_count(job) for job in jobs) < len(jobs):
                time.sleep(0.01)
            time.sleep(0.5)  # every first answer recorded, every watch asleep for 15 s
            before = sum(sim.request_count(job) for job in jobs)
            for job in jobs:
                now = int(time.time())
                headers, body = _signed(job, f"msg_forged_{job}", now)
                headers["webhook-signature"] = forged(headers["webhook-signature"])
                answers["forged"].add(_post(url, headers, body))
                answers["replayed"].add(_post(url, *_signed(job, f"msg_seen_{job}", now)))
                answers["stale"].add(_post(url, *_signed(job, f"msg_stale_{job}", now - 600)))
                headers, _ = _signed(job, f"msg_big_{job}", now)
                answers["oversized"].add(_post(url, headers, b" " * (300 * 1024)))
                for kind in sent:
                    sent[kind] += 1
            time.sleep(2.0)  # what a wake would have caused by now: a check within 1 s
            caused = sum(sim.request_count(job) for job in jobs) - before
            woken = sum(kind == "woken_by_push" for job in jobs for kind in _kinds(store, job))
            for watch in watches:
                watch.cancel()
            for thread in threads:
                thread.join(30)
    return Hostile(sent, answers, caused, woken)


def _quietly(watch: Watch) -> None:
    with contextlib.suppress(WatchCancelled):
        watch.run()


def _kinds(store: Store, job: str) -> list[str]:
    found = store.find_job("exports", job)
    return [event.kind for stored in found for event in store.events(stored.record.operation_id)]


def render(rows: list[Row], bad: Hostile, command: str, seconds: float) -> str:
    lines = [
        BEGIN,
        "## Woken by the provider: signed pushes (issue 27)",
        "",
        f"`{command}` ({seconds:.0f} s; `make bench-push`). {rows[0].jobs} callers, each a Python API `Watch` on its"
        " own thread over one SQLite home, each job running 3-6 s on the loopback simulator. Polling only: the"
        " contract polls at 250 ms doubling to 2 s, to detect ends quickly. With push: the simulator posts a"
        " Standard Webhooks push at each job's end to the receiver (`fleet.hooks`, in process), and the"
        " contract's schedule (15 s) is only the safety net: a lost push is detected by it, later but within the"
        " bound. Lag: from the job's end at the provider to the watch's return. The last row posts each job's"
        " push the moment the provider answered its first check (`running`; the job has ended by the next), the"
        " case `[push] min_interval` once delayed by a second when it counted from the last answer (it counts from"
        " the last woken check now); its lag is from the push's post to the watch's return.",
        "",
        "| scenario | detected | status requests per job (mean) | max | p50 lag | p95 lag | max lag |"
        " receiver's answer to a push |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        answered = "-"
        if row.answers:
            ordered = sorted(row.answers)
            p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
            answered = f"p95 {p95 * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms ({len(ordered)} pushes)"
        lines.append(
            f"| {row.name} | {row.detected}/{row.jobs} | {row.per_job:.2f} | {max(row.requests)} |"
            f" {row.p(0.5):.3f} s | {row.p(0.95):.3f} s | {max(row.lags):.3f} s | {answered} |"
        )
    kinds = ", ".join(
        f"{n} {kind} (answered {'/'.join(map(str, sorted(bad.answers[kind])))})" for kind, n in bad.sent.items()
    )
    lines += [
        "",
        f"Hostile pushes against {rows[0].jobs} running jobs whose next check was 15 s away: {kinds}."
        f" Provider requests they caused in the 2 s after: **{bad.requests_caused}**; `woken_by_push` events:"
        f" **{bad.woken}**.",
        END,
    ]
    return "\n".join(lines) + "\n"


def write_section(text: str, doc: Path = DOC) -> None:
    """Replace the push section of the document, or add it at the end."""
    current = doc.read_text(encoding="utf-8") if doc.exists() else ""
    if BEGIN in current and END in current:
        head, _, rest = current.partition(BEGIN)
        _, _, tail = rest.partition(END)
        current = head + text.rstrip("\n") + tail
    else:
        current = current.rstrip("\n") + "\n\n" + text
    doc.write_text(current, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--callers", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    started = time.time()
    rows = [
        fleet("polling only", args.callers, lost=None, seed=args.seed),
        fleet("push", args.callers, lost=0.0, seed=args.seed),
        fleet("push, 10% lost", args.callers, lost=0.1, seed=args.seed),
        fleet("push, 50% lost", args.callers, lost=0.5, seed=args.seed),
        after_check("push just after a check", args.callers),
    ]
    for row in rows:
        print(f"{row.name:16} detected {row.detected}/{row.jobs} req/job {row.per_job:.2f} max {max(row.requests)}"
              f" p95 lag {row.p(0.95):.3f} s max lag {max(row.lags):.3f} s"
              f" answered within {max(row.answers, default=0) * 1000:.0f} ms")  # fmt: skip
    bad = hostile(args.callers)
    print(f"hostile: sent {bad.sent} answers {bad.answers} requests caused {bad.requests_caused} woken {bad.woken}")
    command = " ".join(["python -m bench.push", *(argv if argv is not None else sys.argv[1:])]).strip()
    text = render(rows, bad, command, time.time() - started)
    if not args.no_write:
        write_section(text)
        print(f"wrote the push section of {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
