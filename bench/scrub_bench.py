"""What the scrubber costs per provider answer, for code trees side by side (interleaved rounds, one process each).

    git archive HEAD src | tar -x -C /tmp/base
    python -m bench.scrub_bench base=/tmp/base/src head=src [--rounds 5]

Every answer a status poll reads goes through `Scrubber.text` (each header name and value) and `Scrubber.binary`
(the body) before anything else sees it, so this is on the poll path. Each case is an answer that holds no
secret (the common one), measured as the microseconds one answer costs (headers and body), the median of
`--rounds` rounds, each round the best of 5 timed loops. The trees run in turn within each round, each in a
process of its own (PYTHONPATH=SRC), so a change in the machine's load falls on all of them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import timeit

SECRET = "sk-live-7f3a9c1eDO_NOT_LEAK_0123456789"
HEADERS = {
    "content-type": "application/json; charset=utf-8",
    "date": "Sun, 06 Dec 2026 02:48:15 GMT",
    "server": "envoy",
    "x-request-id": "6f1c2a8e-3b4d-4e5f-9a0b-1c2d3e4f5a6b",
    "cache-control": "no-store",
    "retry-after": "5",
    "strict-transport-security": "max-age=31536000",
}
SMALL = json.dumps(
    {
        "id": "exp_71c",
        "state": "running",
        "progress": 0.42,
        "created_at": "2026-12-06T02:40:00Z",
        "poll_after_seconds": 5,
        "links": {"self": "https://api.example.com/v1/exports/exp_71c?expand=progress&view=full"},
    }
).encode()
ENTITIES = json.dumps({"state": "running", "message": "a &#60;b&#62; &amp; c \u200b", "id": "exp_71c"}).encode()
LARGE = json.dumps({"state": "running", "items": [{"n": i, "name": f"item-{i:06d}"} for i in range(2600)]}).encode()

CASES = {
    "status (340 B, 7 headers)": SMALL,
    "entities and a zero-width space (90 B)": ENTITIES,
    "64 KiB list": LARGE,
}


def child(loops: int) -> dict[str, float]:
    """Microseconds per answer for each case, in this process (the tree on PYTHONPATH)."""
    from pollwarden.core.scrub import Scrubber

    scrubber = Scrubber.joined([(SECRET, "Bearer"), ("dXNlcjpjb3JyZWN0LWhvcnNlLWJhdHRlcnk=", "Basic")])
    figures: dict[str, float] = {}
    for name, body in CASES.items():

        def answer(body: bytes = body) -> None:
            if hasattr(scrubber, "headers"):  # what `http.StatusClient` calls, where the tree has it
                scrubber.headers(HEADERS)
            else:
                {scrubber.text(k): scrubber.text(v) for k, v in HEADERS.items()}
            scrubber.binary(body)

        number = max(1, loops * 340 // len(body))
        figures[name] = min(timeit.repeat(answer, number=number, repeat=5)) / number * 1e6
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", metavar="NAME=SRC")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--loops", type=int, default=2000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.loops)))
        return
    trees = [tuple(text.split("=", 1)) for text in args.trees]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for _ in range(args.rounds):
        for name, src in trees:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
            out = subprocess.run(
                [sys.executable, "-m", "bench.scrub_bench", "x=y", "--child", "--loops", str(args.loops)],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            runs[name].append(json.loads(out))
    for case in CASES:
        cells = []
        for name, _ in trees:
            values = [run[case] for run in runs[name]]
            cells.append(f"{name} {statistics.median(values):.1f} us ({min(values):.1f}-{max(values):.1f})")
        print(f"{case}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
