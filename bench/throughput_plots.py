"""Worker throughput against the size of the due backlog and against the number of worker processes, as plots.

    python -m bench.throughput_plots [--rounds 2] [--seconds 10] [--skip-postgres]

Each point is `bench.throughput.measure` (the fast loopback provider, every operation always due, the raw
commit rate of the same database measured in the same run); the points of one round run in a rotated order, so
a shared machine's load is spread over them rather than falling on one. The plots show the median polls/s and
its ratio to the raw commit rate, with the rounds' range; the table printed last is what docs/performance.md
quotes. Writes docs/throughput-backlog.png and docs/throughput-workers.png.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.throughput import Run, measure

DOCS = Path(__file__).resolve().parent.parent / "docs"
BACKLOGS = (1_000, 10_000, 25_000, 50_000)
WORKERS = (1, 2, 3, 4)


@dataclass(frozen=True)
class Point:
    backend: str
    operations: int
    workers: int

    @property
    def label(self) -> str:
        return f"{self.backend} {self.operations} due, {self.workers} process{'es' if self.workers > 1 else ''}"


def points(backends: Sequence[str]) -> list[Point]:
    wanted = [Point(b, n, 1) for b in backends for n in BACKLOGS]
    wanted += [Point(b, 10_000, w) for b in backends for w in WORKERS if w > 1]
    return wanted


def run_all(wanted: list[Point], rounds: int, seconds: float) -> dict[Point, list[Run]]:
    runs: dict[Point, list[Run]] = {p: [] for p in wanted}
    for round_no in range(rounds):
        shift = round_no * len(wanted) // max(rounds, 1)
        for point in wanted[shift:] + wanted[:shift]:
            run = measure(point.backend, operations=point.operations, workers=point.workers, seconds=seconds)
            runs[point].append(run)
            print(
                f"round {round_no} {point.label}: {run.rate:.0f} polls/s, ratio {run.ratio:.3f},"
                f" worker {run.worker_cpu_us:.0f} us/poll, double polls {run.duplicates}",
                flush=True,
            )
    return runs


def _spread(values: list[float]) -> tuple[float, float, float]:
    middle = statistics.median(values)
    return middle, middle - min(values), max(values) - middle


def _on(point: Point, axis: str) -> int | None:
    """The point's place on the axis, None when it belongs to the other plot."""
    if axis == "backlog":
        return point.operations if point.workers == 1 else None
    return point.workers if point.operations == 10_000 else None


def _x(point: Point, axis: str) -> int:
    place = _on(point, axis)
    assert place is not None
    return place


def _rate(run: Run) -> float:
    return run.rate


def _ratio(run: Run) -> float:
    return run.ratio


def plot(runs: dict[Point, list[Run]], backends: Sequence[str], axis: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rate_ax, ratio_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for backend in backends:
        chosen = sorted(
            (p for p in runs if p.backend == backend and _on(p, axis) is not None), key=lambda p: _x(p, axis)
        )
        xs = [_x(p, axis) for p in chosen]
        figures: tuple[tuple[Any, Callable[[Run], float]], ...] = ((rate_ax, _rate), (ratio_ax, _ratio))
        for ax, figure in figures:
            spread = [_spread([figure(r) for r in runs[p]]) for p in chosen]
            ax.errorbar(
                xs,
                [s[0] for s in spread],
                yerr=[[s[1] for s in spread], [s[2] for s in spread]],
                marker="o",
                capsize=3,
                label=backend,
            )
    rate_ax.axhline(2000, color="#999999", linestyle="--", linewidth=1)
    rate_ax.set_ylabel("polls per second (median, range)")
    ratio_ax.set_ylabel("polls/s over raw commits/s of the same run")
    for ax in (rate_ax, ratio_ax):
        ax.set_xlabel("due operations" if axis == "backlog" else "worker processes on one database (10,000 due)")
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        if axis == "workers":
            ax.set_xticks(list(WORKERS))
    if axis == "backlog":
        rate_ax.set_xscale("log")
        ratio_ax.set_xscale("log")
    fig.suptitle(
        "Worker throughput against the due backlog (one process)"
        if axis == "backlog"
        else "Worker throughput against worker processes"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def table(runs: dict[Point, list[Run]]) -> list[str]:
    lines = ["| backend | due | processes | polls/s | ratio to raw commits | worker CPU per poll | double polls |"]
    lines.append("|---|---|---|---|---|---|---|")
    for point, done in runs.items():
        rate = _spread([r.rate for r in done])
        ratio = _spread([r.ratio for r in done])
        cpu = statistics.median(r.worker_cpu_us for r in done)
        lines.append(
            f"| {point.backend} | {point.operations:,} | {point.workers} | {rate[0]:,.0f} ({rate[0] - rate[1]:,.0f}-"
            f"{rate[0] + rate[2]:,.0f}) | {ratio[0]:.2f} ({ratio[0] - ratio[1]:.2f}-{ratio[0] + ratio[2]:.2f}) |"
            f" {cpu:.0f} us | {sum(r.duplicates for r in done)} |"
        )
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--skip-postgres", action="store_true")
    args = parser.parse_args(argv)
    backends = ["sqlite"] if args.skip_postgres else ["sqlite", "postgres"]
    runs = run_all(points(backends), args.rounds, args.seconds)
    plot(runs, backends, "backlog", DOCS / "throughput-backlog.png")
    plot(runs, backends, "workers", DOCS / "throughput-workers.png")
    print("\n".join(table(runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
