"""Where the suite's CPU goes, per test file: `PYTHONPATH=. pytest -n 4 -p tests.cpu_per_file` writes one JSON file per
process into $CPU_MEASURE_DIR (default /tmp/cpumeasure); `python -m tests.cpu_per_file DIR` ranks the files.

A test file's CPU is its worker's own (RUSAGE_SELF), the processes the worker reaped (RUSAGE_CHILDREN: fresh
commands, workers, servers) and what the worker's zygotes and the commands they forked spent meanwhile (their
/proc totals: tests/prefork.py forks commands from the zygote, so their CPU reaches the worker only when the zygote
exits). Collection is counted per module. A measuring aid, not a test: no assertion reads it."""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path

import pytest

OUT = Path(os.environ.get("CPU_MEASURE_DIR", "/tmp/cpumeasure"))
_TICK = os.sysconf("SC_CLK_TCK")
_files: defaultdict[str, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))
_collect: defaultdict[str, float] = defaultdict(float)


def _zygotes_cpu() -> float:
    from tests import prefork

    total = 0.0
    for zygote in [*prefork._zygotes.values(), *prefork._own_zygotes]:
        try:
            stat = Path(f"/proc/{zygote._proc.pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += sum(int(x) for x in fields[11:15]) / _TICK  # utime stime cutime cstime
    return total


def _now() -> tuple[float, float, float, float]:
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, reaped.ru_utime + reaped.ru_stime, _zygotes_cpu(), time.monotonic()


_START = _now()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    before = _now()
    try:
        return (yield)
    finally:
        after = _now()
        spent = _files[item.location[0]]
        for name, a, b in zip(("self", "children", "zygote", "wall"), before, after, strict=True):
            spent[name] += b - a
        spent["n"] += 1


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    started = time.process_time()
    try:
        return (yield)
    finally:
        if isinstance(collector, pytest.Module):
            _collect[str(collector.path)] += time.process_time() - started


def pytest_sessionfinish(session: pytest.Session) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    end = _now()
    total = {"self": end[0] - _START[0], "children": end[1] - _START[1], "wall": end[3] - _START[3]}
    name = f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}.json"
    (OUT / name).write_text(json.dumps({"files": _files, "collect": _collect, "total": total}))


def main(where: str, top: int = 40) -> None:
    files: defaultdict[str, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))
    collect = 0.0
    for path in Path(where).glob("gw*.json"):
        found = json.loads(path.read_text())
        for name, spent in found["files"].items():
            for what, value in spent.items():
                files[name][what] += value
        collect += sum(found["collect"].values())
    ranked = sorted(files.items(), key=lambda kv: -(kv[1]["self"] + kv[1]["children"] + kv[1]["zygote"]))
    print(f"collection: {collect:.1f} s CPU")
    for name, s in ranked[:top]:
        cpu = s["self"] + s["children"] + s["zygote"]
        print(f"{cpu:7.1f} own {s['self']:6.1f} reaped {s['children']:6.1f} zygote {s['zygote']:6.1f} "
              f"wall {s['wall']:6.1f} tests {int(s['n']):4d} {name}")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
