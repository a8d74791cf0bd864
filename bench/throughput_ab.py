"""Worker throughput of several code trees in interleaved rounds, so a shared machine's load hits them alike.

    git archive 7ea9e99 src | tar -x -C /tmp/base      # the tree to compare against
    python -m bench.throughput_ab sqlite base=/tmp/base/src:10000 head=src:10000 head50k=src:50000
    python -m bench.throughput_ab postgres base1=/tmp/base/src:10000:1 head4=src:10000:4

Each variant is NAME=SRC:OPERATIONS[:WORKERS]; its worker processes run with PYTHONPATH=SRC (the provider, the
seeding and the measurement are this checkout's `bench.throughput`). WORKERS is N, N separate `pollwarden worker`
commands of one process each (`--processes 1` where SRC has the option), or pN, one `pollwarden worker
--processes N`. Each round runs every variant once, in order; ROUNDS (default 3) rounds; the summary gives the
median and the range of each figure. TLS=1 serves the provider over https (a certificate of its own, which the
workers trust through SSL_CERT_FILE).

    python -m bench.throughput_ab sqlite two=src:10000:2 one2=src:10000:p2   # two commands against one of two
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.throughput import Run, measure


@dataclass(frozen=True)
class Variant:
    name: str
    src: str
    operations: int
    workers: int
    processes: int | None
    """`--processes` of each worker command; None for a tree without the option."""

    @classmethod
    def parse(cls, text: str) -> Variant:
        name, _, rest = text.partition("=")
        parts = rest.split(":")
        if not name or len(parts) not in (2, 3):
            raise SystemExit(f"{text!r}: expected NAME=SRC:OPERATIONS[:WORKERS], WORKERS N or pN")
        src = os.path.abspath(parts[0])
        count = parts[2] if len(parts) == 3 else "1"
        has_option = "--processes" in Path(src, "pollwarden", "cli", "parser.py").read_text()
        if count.startswith("p"):
            if not has_option:
                raise SystemExit(f"{text!r}: {src} has no `worker --processes`")
            return cls(name, src, int(parts[1]), 1, int(count[1:]))
        return cls(name, src, int(parts[1]), int(count), 1 if has_option else None)


def _line(run: Run) -> str:
    return (
        f"{run.rate:.0f} polls/s, raw {run.raw_commits:.0f}/s, ratio {run.ratio:.3f}, worker {run.worker_cpu_us:.0f}"
        f" us, provider {run.provider_cpu_us:.0f} us, server {run.db_cpu_us:.0f} us, double polls {run.duplicates}"
    )


def _median(runs: list[Run], figure: Callable[[Run], float]) -> str:
    values = [figure(run) for run in runs]
    return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("sqlite", "postgres"):
        print(__doc__)
        return 2
    backend, variants = argv[0], [Variant.parse(text) for text in argv[1:]]
    runs: dict[str, list[Run]] = {v.name: [] for v in variants}
    for round_no in range(int(os.environ.get("ROUNDS", "3"))):
        for v in variants:
            os.environ["PYTHONPATH"] = v.src  # the worker subprocesses inherit it
            tls = os.environ.get("TLS") == "1"
            run = measure(backend, operations=v.operations, workers=v.workers, seconds=10, tls=tls,
                          processes=v.processes)  # fmt: skip
            runs[v.name].append(run)
            print(f"round {round_no} {v.name}: {_line(run)}; load {os.getloadavg()[0]:.1f}", flush=True)
    for name, done in runs.items():
        print(
            f"{name}: polls/s {_median(done, lambda r: r.rate)}; raw {_median(done, lambda r: r.raw_commits)};"
            f" ratio {_median(done, lambda r: r.ratio)}; worker CPU {_median(done, lambda r: r.worker_cpu_us)} us;"
            f" provider {_median(done, lambda r: r.provider_cpu_us)} us;"
            f" server {_median(done, lambda r: r.db_cpu_us)} us"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
