"""Rows the audit vouches for (issue 23): each signed head commits to the operation rows its commit changed, so
`audit verify` reports a row that no longer matches what its log last committed, on SQLite and PostgreSQL.

The attack of the issue: a stopped operation (3 of 3 status requests used) edited in place to `active` with 0 of
50 used, which a worker then polled 50 more times while `audit verify` said "intact" before and after.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pollwarden.simulator import Simulator
from pollwarden.store.migrations import LATEST
from tests.conftest import write_contract
from tests.e2e.places import EXIT_TAMPERED, Place
from tests.store.undo import undone_after

pytestmark = pytest.mark.slow


def _rows(place: Place, query: str, *params: object) -> list[tuple[Any, ...]]:
    """Read as whoever holds the files would: straight from the database, no key."""
    if place.url is None:
        with sqlite3.connect(place.home / "pollwarden.db") as conn:
            found = conn.execute(query, params).fetchall()
        conn.close()
        return found
    with psycopg.connect(place.url, autocommit=True) as pg:
        return pg.execute(query.replace("?", "%s").encode(), params).fetchall()


def _stopped(place: Place, sim: Simulator, tmp_path: Path, operation: str = "op-a") -> None:
    """An operation stopped by its budget: 3 of 3 status requests of a job that runs forever."""
    contract = write_contract(tmp_path / "c.toml", sim.url, max_requests=3)
    code, _, err = place.run("watch", "--contract", str(contract), "--job", "never-1", "--operation", operation)
    assert code == 4, err  # stopped, a decision asked
    ((phase, used),) = _rows(
        place, "SELECT phase, status_requests_used FROM operations WHERE operation_id = ?", operation
    )
    assert (phase, used) == ("stopped", 3)


def _refill(place: Place, operation: str) -> None:
    """The issue's edit: back to active, 0 of 50 used, in the record and in the columns copied from it."""
    ((text,),) = _rows(place, "SELECT record FROM operations WHERE operation_id = ?", operation)
    record = json.loads(text)
    record.update(phase="active", reason=None, status_requests_used=0, finished_at=None)
    record["plan"]["max_status_requests"] = 50
    place.execute(
        "UPDATE operations SET phase = 'active', status_requests_used = 0, max_status_requests = 50, record = ?"
        " WHERE operation_id = ?",
        json.dumps(record),
        operation,
    )


def _problems(report: dict[str, object]) -> list[dict[str, Any]]:
    problems = report["problems"]
    assert isinstance(problems, list)
    return problems


def test_a_stopped_operation_given_a_new_budget_in_its_row_is_tampering(
    fresh: Place, sim: Simulator, tmp_path: Path
) -> None:
    _stopped(fresh, sim, tmp_path)
    assert fresh.verify()[0] == 0
    _refill(fresh, "op-a")
    code, report = fresh.verify()
    assert code == EXIT_TAMPERED, report
    (problem,) = _problems(report)
    assert problem["log_id"] == "op-a" and "row" in problem["what"], problem
    code, text, _ = fresh.run("audit", "verify")
    assert code == EXIT_TAMPERED and "log op-a" in text and "TAMPERED" in text


@pytest.mark.parametrize(
    ("column", "value"),
    [("contract", "name = 'exports'\n"), ("job_id", "other-job"), ("contract_name", "other"), ("phase", "active")],
)
def test_any_durable_column_edited_is_tampering(
    fresh: Place, sim: Simulator, tmp_path: Path, column: str, value: str
) -> None:
    _stopped(fresh, sim, tmp_path)
    fresh.execute(f"UPDATE operations SET {column} = ? WHERE operation_id = 'op-a'", value)
    code, report = fresh.verify()
    assert code == EXIT_TAMPERED, report
    assert {p["log_id"] for p in _problems(report)} == {"op-a"}


def test_the_lease_columns_change_without_an_event_and_are_not_vouched_for(
    fresh: Place, sim: Simulator, tmp_path: Path
) -> None:
    _stopped(fresh, sim, tmp_path)
    fresh.execute(
        "UPDATE operations SET lease_owner = 'someone', lease_token = lease_token + 7, watcher = 'w'"
        " WHERE operation_id = 'op-a'"
    )
    assert fresh.verify()[0] == 0


def test_a_row_inserted_without_its_log_is_tampering(fresh: Place, sim: Simulator, tmp_path: Path) -> None:
    _stopped(fresh, sim, tmp_path)
    columns = (
        "job_id, contract_name, phase, next_poll_at, deadline_at, status_requests_used, max_status_requests, record,"
        " contract, created_at, updated_at"
    )
    fresh.execute(
        f"INSERT INTO operations (operation_id, {columns}) SELECT 'op-forged', {columns} FROM operations"
        " WHERE operation_id = 'op-a'"
    )
    code, report = fresh.verify()
    assert code == EXIT_TAMPERED, report
    assert "op-forged" in {p["log_id"] for p in _problems(report)}


def test_a_decided_operation_verifies_and_its_decision_is_vouched_for(
    fresh: Place, sim: Simulator, tmp_path: Path
) -> None:
    """Every write that changes a row (created, reserved, polled, stopped, decided) signs what it left."""
    _stopped(fresh, sim, tmp_path)
    ((decision,),) = _rows(fresh, "SELECT decision_id FROM decisions WHERE status = 'open'")
    code, _, err = fresh.run("decide", str(decision), "--option", "2", "--by", "alice")
    assert code == 0, err
    assert fresh.verify()[0] == 0
    _refill(fresh, "op-a")
    assert fresh.verify()[0] == EXIT_TAMPERED


# -- a store upgraded to schema 8: its heads predate the commitments ------------------------------------------


def _as_schema_7(place: Place) -> None:
    """The store as a pollwarden before schema 8 leaves it: its heads vouch for nothing (chained and signed again
    with the home's key, as that pollwarden signed them), none of schema 8's tables, at version 7."""
    from pollwarden.audit import GENESIS_HASH, load_or_create_keys, sign_head, write_head_file
    from pollwarden.audit.heads import parse_changes

    key = load_or_create_keys(place.home).signing_key
    assert key is not None
    prev = GENESIS_HASH
    columns = "counter, prev_hash, changes, logs, records, at"
    for counter, _, changes, logs, records, at in _rows(place, f"SELECT {columns} FROM audit_heads ORDER BY counter"):
        head = sign_head(
            key, counter=counter, prev_hash=prev, changes=parse_changes(changes), logs=logs, records=records, at=at
        )
        place.execute(
            "UPDATE audit_heads SET prev_hash = ?, head_hash = ?, signature = ?, vouches = '' WHERE counter = ?",
            head.prev_hash,
            head.head_hash,
            head.signature,
            counter,
        )
        prev = head.head_hash
    write_head_file(place.home / "audit-head.checkpoint", head)
    for statement in undone_after(7):  # a store as schema 7 left it
        place.execute(statement)
    if place.url is None:
        place.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")  # upgraded when next opened
        return
    place.execute("DELETE FROM schema_migrations WHERE version >= 8")
    code, out, err = place.run("db", "upgrade")
    assert code == 0 and f"applied migrations {list(range(8, LATEST + 1))}" in out, out + err


def test_an_upgraded_stores_rows_are_not_yet_vouched_for_until_its_next_write(
    fresh: Place, sim: Simulator, tmp_path: Path
) -> None:
    _stopped(fresh, sim, tmp_path)
    _as_schema_7(fresh)
    code, report = fresh.verify()
    assert code == 0, report  # never a false "tampered"
    # The operation's row, and its contract's in the registry (the watch installed it).
    assert report["rows"] == 2 and report["rows_not_yet_vouched_for"] == 2
    code, text, _ = fresh.run("audit", "verify")
    assert code == 0 and "2 rows not yet vouched for" in text, text
    # The next write (here `audit checkpoint`, which signs a head) vouches for every row as it stands.
    code, _, err = fresh.run("audit", "checkpoint", "--out", str(tmp_path / "head.json"))
    assert code == 0, err
    code, report = fresh.verify()
    assert code == 0 and report["rows_not_yet_vouched_for"] == 0, report
    _refill(fresh, "op-a")
    code, report = fresh.verify()
    assert code == EXIT_TAMPERED and {p["log_id"] for p in _problems(report)} == {"op-a"}, report


def test_an_upgraded_store_is_vouched_for_by_its_next_poll_too(fresh: Place, sim: Simulator, tmp_path: Path) -> None:
    _stopped(fresh, sim, tmp_path, "op-a")
    _as_schema_7(fresh)
    contract = write_contract(tmp_path / "c2.toml", sim.url)
    code, _, err = fresh.run("watch", "--contract", str(contract), "--job", "happy-2", "--operation", "op-b")
    assert code == 0, err
    code, report = fresh.verify()
    # Two operations' rows and the two contract versions their watches installed.
    assert code == 0 and report["rows"] == 4 and report["rows_not_yet_vouched_for"] == 0, report
    fresh.execute("UPDATE operations SET job_id = 'other' WHERE operation_id = 'op-a'")
    assert fresh.verify()[0] == EXIT_TAMPERED
