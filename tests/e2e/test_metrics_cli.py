"""`pollwarden metrics`: the fleet's gauges with no worker running, from the database, on SQLite and PostgreSQL;
and a database that cannot be read answered with `pollwarden_fleet_scrape_ok 0` and a log line, not silence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from pollwarden import events as ev
from pollwarden.core import new_record, parse_contract
from pollwarden.core.escalation import build_request
from pollwarden.core.reasons import StopReason
from pollwarden.home.operating import open_store
from pollwarden.store.base import Store
from pollwarden.store.owner import process_owner
from tests.e2e.conftest import store_of

from ..core.support import contract_text


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def fill(store: Store) -> None:
    """An active operation, an overdue one, one rate limited, one whose watch process is gone, and three stopped
    with decisions open: two failed jobs and a deadline."""
    text = contract_text()
    contract = parse_contract(text)
    now = store.db_now()

    def make(op: str, due_in: float = 600, **changes: Any) -> None:
        record = new_record(contract, operation_id=op, job_id=op, now=now)
        store.create(
            replace(record, next_poll_at=now + timedelta(seconds=due_in), **changes), text, ev.Created.prepared({})
        )

    make("active")
    make("late", due_in=-600)
    make("limited", rate_limited_consecutive=2, status_requests_used=95)
    make("lost")
    gone = process_owner("watch", pid=_dead_pid())
    claimed = store.claim("lost", gone, now - timedelta(hours=1), timedelta(seconds=1))
    assert claimed is not None
    failed, deadline = StopReason.JOB_FAILED, StopReason.DEADLINE_EXCEEDED
    for op, reason in (("f1", failed), ("f2", failed), ("d1", deadline)):
        make(op)
        got = store.claim(op, process_owner("worker"), now, timedelta(seconds=30))
        assert got is not None
        lease, record = got
        stopped = record.stopped(reason, "health check failed", now)
        request = build_request(stopped, contract, now, decision_id=f"dec-{op}")
        assert store.write(lease, stopped, [ev.Escalated.prepared({})], now, release=True, decision=request)


def filled_home(home: Path) -> Path:
    """A SQLite home (`home`) with something in every gauge: `fill`'s operations."""
    store = open_store(home)
    try:
        fill(store)
    finally:
        store.close()
    return home


@contextmanager
def metrics_command(*args: str, home: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    env = {k: v for k, v in os.environ.items() if k not in ("POLLWARDEN_DB", "POLLWARDEN_HOME")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pollwarden", "metrics", "--port", "0", "--home", str(home), *args],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        first = json.loads(proc.stderr.readline())
        assert first["event"] == "metrics_serving", first
        yield first["url"], proc
    finally:
        proc.terminate()
        try:
            stopped = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()  # never left running: then fail, since SIGTERM must stop it
            proc.wait()
            raise
    assert stopped == 0


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=30) as answer:
        text = answer.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def test_the_gauges_are_served_with_no_worker_running(db: str, home: Path) -> None:
    store = store_of(db, home)
    try:
        fill(store)
    finally:
        store.close()
    with metrics_command("--db", db, home=home) as (url, _):
        got = scrape(url)
    assert got["pollwarden_fleet_scrape_ok"] == 1.0
    assert got['pollwarden_fleet_active{contract="exports"}'] == 4.0
    assert got['pollwarden_fleet_overdue{contract="exports"}'] == 1.0
    assert got['pollwarden_fleet_rate_limited{contract="exports"}'] == 1.0
    assert got['pollwarden_fleet_orphaned{contract="exports"}'] == 1.0
    assert got['pollwarden_fleet_budget_used_max_ratio{contract="exports"}'] > 0.0
    assert got['pollwarden_fleet_open_decisions{contract="exports",reason="job_failed"}'] == 2.0
    assert got['pollwarden_fleet_open_decisions{contract="exports",reason="deadline_exceeded"}'] == 1.0
    assert got['pollwarden_fleet_oldest_open_decision_age_seconds{contract="exports",reason="job_failed"}'] >= 0.0


def test_a_database_that_cannot_be_read_answers_scrape_ok_0_and_is_logged(home: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"this is not a database, " * 100)
    with metrics_command("--db", str(broken), home=home) as (url, proc):
        got = scrape(url)
        assert proc.stderr is not None
        logged = json.loads(proc.stderr.readline())
    assert got["pollwarden_fleet_scrape_ok"] == 0.0
    assert got["pollwarden_fleet_scrape_errors_total"] >= 1.0
    assert not any(name.startswith("pollwarden_fleet_active") for name in got)
    assert logged["event"] == "metrics_database_unreadable" and logged["error"]


def test_a_postgresql_server_that_cannot_be_reached_answers_scrape_ok_0(home: Path) -> None:
    with metrics_command("--db", "postgresql://nobody:s3cret-pw@127.0.0.1:1/none", home=home) as (url, proc):
        got = scrape(url)
        assert proc.stderr is not None
        logged = json.loads(proc.stderr.readline())
    assert got["pollwarden_fleet_scrape_ok"] == 0.0
    assert logged["event"] == "metrics_database_unreadable"
    assert "s3cret-pw" not in logged["error"]


def test_the_console_serves_the_gauges_on_metrics_to_a_scraper_that_never_logged_in(home: Path) -> None:
    """A scraper cannot log in: /metrics on the console answers without a session (counts only), while every page
    still asks for one."""
    store = store_of(str(home / "pollwarden.db"), home)
    try:
        fill(store)
    finally:
        store.close()
    env = {k: v for k, v in os.environ.items() if k not in ("POLLWARDEN_DB", "POLLWARDEN_HOME")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pollwarden", "console", "--port", "0", "--home", str(home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("pollwarden console on "), first
        base = first.split()[3].rstrip("/")
        got = scrape(base + "/metrics")
        with urllib.request.urlopen(base + "/", timeout=30) as page:
            asked_to_log_in = "/login" in page.geturl() or "log in" in page.read().decode().lower()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert got["pollwarden_fleet_scrape_ok"] == 1.0
    assert got['pollwarden_fleet_open_decisions{contract="exports",reason="job_failed"}'] == 2.0
    assert asked_to_log_in
