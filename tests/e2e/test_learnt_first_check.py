"""The learnt first check through the CLI and the worker fleet (issue 26), on SQLite and PostgreSQL: a contract
that learns, with `MIN_ENDED` ended jobs in the store, gets each new operation's first check placed by that history
at admission (`enqueue`, `enqueue --jobs-file`, `watch`); the creating event records it, `pollwarden why` replays it
as made and `pollwarden story` tells it, and whoever polls (the watch, a worker) sends the first request no sooner
than the recorded placement."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from pollwarden.core.durations import parse_rfc3339
from pollwarden.core.learnt import MIN_ENDED
from pollwarden.simulator import Simulator
from tests.conftest import run_cli
from tests.e2e.conftest import store_of
from tests.e2e.test_worker import _log_of, _spawn_worker, _wait_all_final
from tests.learnt_history import ENDS_AT_ONCE, SUBMIT, first_sent, learn_history, learnt_contract, told

pytestmark = pytest.mark.slow


def _learnt_store(db: str, home: Path, contract_path: Path, base_url: str, extra: str = "") -> None:
    store = store_of(db, home)
    try:
        learn_history(store, learnt_contract(contract_path, base_url, extra=extra))
    finally:
        store.close()


def _learnt_job(db: str, home: Path, tmp_path: Path, sim: Simulator, job: str) -> Path:
    """The learning contract's file, its history in the store, and `job` scripted to end by its first check."""
    path = tmp_path / "exports.toml"
    _learnt_store(db, home, path, sim.url)
    sim.add_job(job, ENDS_AT_ONCE)
    return path


def _until_started(worker: subprocess.Popen[str], within: float = 60) -> None:
    """Until the worker's log says it started (a hang guard, not a timing window)."""
    deadline = time.monotonic() + within
    while '"worker_started"' not in _log_of(worker):
        assert worker.poll() is None and time.monotonic() < deadline, _log_of(worker)[-2000:]
        time.sleep(0.05)


def test_enqueue_places_each_first_check_by_the_history_and_why_replays_it(db: str, home: Path, tmp_path: Path) -> None:
    path = tmp_path / "exports.toml"
    _learnt_store(db, home, path, "http://127.0.0.1:9")
    one = run_cli("enqueue", "--contract", str(path), "--job", "j-1", "--operation", "op-1", "--db", db, home=home)
    assert one.code == 0, one.stderr
    placed, events = told("op-1", home, "--db", db)
    created = next(e for e in events if e["kind"] == "created")
    assert parse_rfc3339(placed["next_poll_at"]) > parse_rfc3339(created["at"])  # later than the plain 0 s
    status = run_cli("status", "op-1", "--json", "--db", db, home=home)
    assert status.code == 0, status.stderr
    assert '"delay_source": "learnt"' in status.stdout and placed["next_poll_at"] in status.stdout
    # Many at once (`Engine.admit_many`): each one's first check is placed and recorded the same way.
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("j-2\nj-3\n", encoding="utf-8")
    many = run_cli("enqueue", "--contract", str(path), "--jobs-file", str(jobs), "--operation-prefix", "batch",
                   "--db", db, home=home)  # fmt: skip
    assert many.code == 0, many.stderr
    told("batch-2", home, "--db", db)


def test_a_worker_first_polls_an_enqueued_job_no_sooner_than_its_recorded_first_check(
    db: str, home: Path, tmp_path: Path, sim: Simulator
) -> None:
    path = _learnt_job(db, home, tmp_path, sim, "j-w")
    worker = _spawn_worker(db, home)
    try:
        # Enqueued once the worker is idle and looking: a worker that polled what is due at once would poll this
        # operation before its learnt first check (a worker still starting up could hide that).
        _until_started(worker)
        ran = run_cli("enqueue", "--contract", str(path), "--job", "j-w", "--operation", "op-w", "--db", db, home=home)
        assert ran.code == 0, ran.stderr
        _wait_all_final(db, home, MIN_ENDED + 1, within=60, workers=[worker])  # the history's and op-w
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    placed, events = told("op-w", home, "--db", db)
    assert first_sent(events) >= parse_rfc3339(placed["next_poll_at"])
    assert sim.request_count("j-w") == 1
    assert any(e["kind"] == "succeeded" for e in events)


def test_watch_sends_its_first_request_no_sooner_than_its_recorded_first_check(
    db: str, home: Path, tmp_path: Path, sim: Simulator
) -> None:
    path = _learnt_job(db, home, tmp_path, sim, "j-c")
    ran = run_cli("watch", "--contract", str(path), "--job", "j-c", "--operation", "op-c", "--db", db, home=home)
    assert ran.code == 0, ran.stderr
    placed, events = told("op-c", home, "--db", db)
    assert first_sent(events) >= parse_rfc3339(placed["next_poll_at"])
    assert sim.request_count("j-c") == 1


def test_submit_records_the_submitted_jobs_learnt_first_check(
    db: str, home: Path, tmp_path: Path, sim: Simulator
) -> None:
    path = tmp_path / "exports.toml"
    _learnt_store(db, home, path, sim.url, extra=SUBMIT.format(base=sim.url))
    body = tmp_path / "body.json"
    body.write_text('{"scenario": "happy"}', encoding="utf-8")
    ran = run_cli("submit", "--contract", str(path), "--body", str(body), "--operation", "op-s", "--db", db, home=home)
    assert ran.code == 0, ran.stderr
    _, events = told("op-s", home, "--db", db)
    assert [e["kind"] for e in events if e["kind"] in ("created", "submitted")] == ["submitted"]
    assert sim.request_count("happy-sub1") == 0  # without --watch, submitted and not polled
