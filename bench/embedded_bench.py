"""Embedded watches: N threads of one process calling `pollwarden.watch_sync` at once (issue 13's target).

Not a test: it prints one line per N. Run from the repository root:

    python -m bench.embedded_bench [--watches 1 10 50]

A loopback provider in this process records when each job's first status request arrives; the figure is that
time minus the moment its `watch_sync` was called (the target: every first request within 100 ms of its call).
One watch runs first on the same home, so keys and the database exist and the figures are not the first
run's key generation and schema creation. Every job answers `running` and each watch has a budget of three
checks 200 ms apart, so a watch ends on its budget.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pollwarden
from pollwarden.simulator.scenarios import contract_text

BODY = b'{"state": "running"}'


class _Provider(BaseHTTPRequestHandler):
    first: ClassVar[dict[str, float]] = {}
    lock: ClassVar[threading.Lock] = threading.Lock()

    def do_GET(self) -> None:
        job = self.path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
        with self.lock:
            self.first.setdefault(job, time.monotonic())
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, format: str, *args: object) -> None:
        return


class _Listener(ThreadingHTTPServer):
    # The default listen backlog of 5 drops the SYNs of 50 watches connecting at once; each dropped one is
    # retried a second later, which measured the kernel's SYN retry instead of pollwarden.
    request_queue_size = 1024


def measure(count: int, contract: Path, home: Path, tag: str) -> tuple[float, float, float]:
    """(p50, max) milliseconds from call to first request, and seconds until every watch ended."""
    called: dict[str, float] = {}

    def one(job: str) -> None:
        called[job] = time.monotonic()
        pollwarden.watch_sync(str(contract), job, home=home)

    threads = [threading.Thread(target=one, args=(f"{tag}-{i}",)) for i in range(count)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    waits = sorted((_Provider.first[job] - at) * 1000 for job, at in called.items())
    return waits[len(waits) // 2], waits[-1], time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watches", type=int, nargs="+", default=[1, 10, 50])
    args = parser.parse_args(argv)
    server = _Listener(("127.0.0.1", 0), _Provider)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as temp:
        home = Path(temp)
        contract = home / "bench.toml"
        url = f"http://127.0.0.1:{server.server_port}"
        contract.write_text(contract_text(url, base_delay="200ms", max_delay="200ms", max_requests=3, deadline="5m"))
        measure(1, contract, home, "warm")
        for count in args.watches:
            p50, worst, total = measure(count, contract, home, f"n{count}")
            print(
                f"{count} watches: first request p50 {p50:.0f} ms, max {worst:.0f} ms after the call;"
                f" all ended in {total:.1f} s"
            )
    server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
