"""One malformed row is never fatal (issue 23), through the real commands, on SQLite and PostgreSQL.

The issue's finding: a row whose record could not be decoded made `status` and every worker exit with a
traceback, and the worker polled none of the healthy operations.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import psycopg
import pytest

from pollwarden.core.codec import record_to_json
from pollwarden.core.reasons import Phase
from pollwarden.simulator import Simulator
from tests.conftest import run_cli, write_contract
from tests.e2e.conftest import store_of
from tests.e2e.test_worker import _drain_and_scrape, _enqueue, _log_of

pytestmark = pytest.mark.slow


def _break(db: str, operation: str, record: str) -> None:
    """A row as a hand edit or a bad restore leaves it: the record is no longer one pollwarden can read."""
    if db.startswith("postgresql://"):
        with psycopg.connect(db, autocommit=True) as pg:
            pg.execute("UPDATE operations SET record = %s WHERE operation_id = %s", (record, operation))
        return
    with sqlite3.connect(db, isolation_level=None) as conn:
        conn.execute("UPDATE operations SET record = ? WHERE operation_id = ?", (record, operation))
    conn.close()


def _unknown_phase(db: str, home: Path, operation: str) -> str:
    """The operation's record as stored, its phase one this version does not know."""
    store = store_of(db, home)
    try:
        stored = store.get(operation)
        assert stored is not None
        return json.dumps({**record_to_json(stored.record), "phase": "dormant"})
    finally:
        store.close()


def test_status_lists_an_unreadable_row_apart_and_exits_as_before(
    db: str, sim: Simulator, home: Path, tmp_path: Path
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    _enqueue(db, home, contract, ["happy-1", "happy-2", "happy-3"])
    _break(db, "op-happy-2", "{not json")
    ran = run_cli("status", "--db", db, home=home)
    assert ran.code == 0 and "Traceback" not in ran.stderr, ran.stderr
    assert "op-happy-1" in ran.stdout and "op-happy-3" in ran.stdout
    assert "1 operation could not be read" in ran.stdout and "op-happy-2: the record is not JSON" in ran.stdout
    assert "SELECT record, unreadable FROM operations" in ran.stdout  # how to look at it
    listed = json.loads(run_cli("status", "--json", "--db", db, home=home).stdout)
    assert [(e["operation"], e["phase"]) for e in listed][-1] == ("op-happy-2", "unreadable")
    one = run_cli("status", "op-happy-2", "--db", db, home=home)
    assert one.code == 2 and "cannot be read" in one.stderr and "Traceback" not in one.stderr, one.stderr
    story = run_cli("story", "op-happy-2", "--db", db, home=home)
    assert story.code == 0 and "watching job happy-2" in story.stdout, story.stderr  # its log still tells its story


def test_the_worker_polls_the_healthy_operations_and_sets_unreadable_rows_aside_once(
    db: str, sim: Simulator, home: Path, tmp_path: Path
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url, timeout="30s", base_delay="50ms", max_delay="200ms")
    healthy = [f"happy-{n}" for n in range(6)]
    _enqueue(db, home, contract, [*healthy, "bad-json", "bad-phase"])
    dormant = _unknown_phase(db, home, "op-bad-phase")
    _break(db, "op-bad-json", "{not json")
    _break(db, "op-bad-phase", dormant)
    worker, records, metrics = _drain_and_scrape(db, home, len(healthy))
    log = _log_of(worker)
    assert worker.returncode == 0 and "Traceback" not in log, log
    assert {r.phase for r in records} == {Phase.SUCCEEDED}  # type: ignore[attr-defined]
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    aside = sorted(line["operation"] for line in lines if line["event"] == "record_unreadable")
    assert aside == ["op-bad-json", "op-bad-phase"]  # one line per row, not one per poll
    assert 'pollwarden_fleet_unreadable_rows{contract="exports"} 2.0' in metrics
    status = run_cli("status", "--db", db, home=home)
    assert status.code == 0 and "2 operations could not be read" in status.stdout, status.stdout
    assert "set aside: the record is not JSON" in status.stdout
    verified = run_cli("audit", "verify", "--db", db, home=home)
    assert verified.code == 5 and "log op-bad-json" in verified.stdout, verified.stdout  # the edit, named


def test_a_new_watch_of_a_job_whose_operation_is_unreadable_names_it(
    db: str, sim: Simulator, home: Path, tmp_path: Path
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    _enqueue(db, home, contract, ["happy-1"])
    _break(db, "op-happy-1", "[]")
    for command in ("enqueue", "watch"):
        ran = run_cli(command, "--contract", str(contract), "--job", "happy-1", "--db", db, home=home)
        assert ran.code == 2 and "Traceback" not in ran.stderr, ran.stderr
        assert "the record of operation op-happy-1" in ran.stderr and "cannot be read" in ran.stderr, ran.stderr
        assert "WHERE operation_id = 'op-happy-1'" in ran.stderr
    assert len(json.loads(run_cli("status", "--json", "--db", db, home=home).stdout)) == 1  # nothing created
