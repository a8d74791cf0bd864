"""One owner per operation: a `watch` never takes a live worker's lease mid-request, whatever PID namespace it runs
in and whatever its host's clock says.

A worker (a real process) holds an operation's lease while its request waits at the provider, which answers only
when the test lets it. Then a `watch --operation` of the same operation starts:

- in a second PID namespace of the same host (`unshare --pid --fork --mount-proc`, as containers sharing the
  host's network are): it looked the worker's pid up in its own namespace, found nothing, and took the lease;
- on a host whose clock is a minute ahead, against PostgreSQL: the worker's lease times came from the database's
  clock, the watch's from its own, so the lease looked expired to it.

Either way the watch sent a second request while the first was in flight. Now it finds the lease held (the
claims file, `tests/instrumented_cli.py`, says so: no sleep decides it) and waits; the worker's answer ends the
operation, and the watch reports it. The provider sees exactly one request.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import write_contract
from tests.e2e.test_worker import _enqueue, _log_of, _spawn_worker
from tests.namespaces import in_another_pid_namespace
from tests.transport.test_http_keepalive import holding

pytestmark = pytest.mark.slow

GUARD = 90.0
"""How long the test waits for what must happen before failing it as stalled: a guard, never the assertion."""

INSTRUMENTED = str(Path(__file__).resolve().parents[1] / "instrumented_cli.py")

SUCCEEDED = b'{"state": "succeeded", "result_url": "https://results.example/r/1"}'
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(SUCCEEDED),
    SUCCEEDED,
)


def _until(condition: Callable[[], object], what: str, *, watching: list[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + GUARD
    while not condition():
        assert time.monotonic() < deadline, what
        for proc in watching:
            assert proc.poll() is None, f"a process exited early with {proc.returncode}: {proc.args!r}"
        time.sleep(0.01)


def _watch_while_the_worker_holds_the_lease(
    db: str, home: Path, tmp_path: Path, prefix: list[str], env: dict[str, str], timeout: str
) -> None:
    claims = tmp_path / "claims"
    release = threading.Event()
    with holding(release, ANSWER, guard=GUARD) as server:
        contract = write_contract(tmp_path / "c.toml", server.url, timeout=timeout)
        _enqueue(db, home, contract, ["j1"])
        worker = _spawn_worker(db, home)
        watch: subprocess.Popen[str] | None = None
        try:
            _until(lambda: server.requests, "the worker never sent its request", watching=[worker])
            watch = subprocess.Popen(
                [*prefix, sys.executable, INSTRUMENTED, "watch", "--operation", "op-j1", "--db", db],
                env={**os.environ, "POLLWARDEN_HOME": str(home), "POLLWARDEN_TEST_CLAIMS": str(claims), **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
            )
            # The instrumented CLI creates the file before it writes its first line: wait for the line.
            _until(
                lambda: claims.exists() and claims.read_text().strip() != "",
                "the watch never tried to claim the operation",
                watching=[worker, watch],
            )
            first = claims.read_text().splitlines()[0]
            assert first == "held", "the watch took the lease of the live worker while its request was in flight"
            assert len(server.requests) == 1
            release.set()
            out, err = watch.communicate(timeout=GUARD)
            assert watch.returncode == 0, out + err
            assert "succeeded" in out, out
        finally:
            release.set()
            if watch is not None and watch.poll() is None:
                watch.kill()
                watch.wait()
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=GUARD)
        assert worker.returncode == 0, _log_of(worker)[-2000:]
        assert len(server.requests) == 1, [head.split(b"\r\n", 1)[0] for head in server.requests]
    assert "taken" not in claims.read_text()


def test_a_watch_in_another_pid_namespace_waits_out_a_live_workers_lease(db: str, home: Path, tmp_path: Path) -> None:
    prefix = in_another_pid_namespace()
    _watch_while_the_worker_holds_the_lease(db, home, tmp_path, prefix, {}, timeout="30s")


@pytest.mark.parametrize("db", ["postgres"], indirect=True)
def test_a_watch_whose_clock_is_a_minute_ahead_waits_out_a_live_workers_lease(
    db: str, home: Path, tmp_path: Path
) -> None:
    """The lease is 2 x 10 s + 5 s long by the database's clock; the watch's host thinks it is 60 s later."""
    _watch_while_the_worker_holds_the_lease(db, home, tmp_path, [], {"POLLWARDEN_TEST_CLOCK_SKEW": "60"}, timeout="10s")
