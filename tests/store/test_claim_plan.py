"""The fleet claim reads its first rows in index order on both backends, never sorting the due backlog.

A sort is invisible in a correctness test and costs a full read of every due row on every claim (16-19 ms
at 10,000 due rows on SQLite before schema 4). Each test also shows the plan sorting without the index, so
it fails if the index stops serving the query's ORDER BY.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from pollwarden.store.common import Dialect
from pollwarden.store.postgres import POSTGRES
from pollwarden.store.sql_leases import claim_due_query
from pollwarden.store.sqlite import SQLITE, SQLiteStore

ROWS = 5000
_OLD_INDEX = "CREATE INDEX operations_due ON operations (next_poll_at) WHERE phase = 'active'"


def _fill_sqlite(conn: sqlite3.Connection, *, analyze: bool = True) -> None:
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
        " INSERT INTO operations (operation_id, job_id, contract_name, phase, next_poll_at, deadline_at,"
        " status_requests_used, max_status_requests, record, contract, created_at, updated_at)"
        " SELECT 'op' || i, 'j' || i, 'c', CASE WHEN i % 10 = 0 THEN 'stopped' ELSE 'active' END, i % 100,"
        " 1e9, 0, 10, '{}', '', 0, 0 FROM n",
        (ROWS,),
    )
    if analyze:
        conn.execute("ANALYZE")


SKIPPED = ("hung-a", "hung-b")
"""Contracts a claim passes over (a worker reading their credentials): the plan must not sort for them either."""


def _sqlite_plan(conn: sqlite3.Connection, skip: tuple[str, ...] = (), dialect: Dialect = SQLITE) -> str:
    query = SQLITE.sql(claim_due_query(dialect, len(skip)))
    rows = conn.execute("EXPLAIN QUERY PLAN " + query, (50.0, 50.0, 50.0, *skip, 16)).fetchall()
    return "\n".join(str(row[-1]) for row in rows)


def test_sqlite_claims_in_index_order(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "s.db").close()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        _fill_sqlite(conn)
        for skip in ((), SKIPPED):
            plan = _sqlite_plan(conn, skip)
            assert "operations_due_order" in plan and "TEMP B-TREE" not in plan, plan
        conn.execute("DROP INDEX operations_due_order")  # schema 3's index: the same query sorts
        conn.execute(_OLD_INDEX)
        assert "TEMP B-TREE" in _sqlite_plan(conn, dialect=replace(SQLITE, names_indexes=False))  # naming no index


def test_sqlite_claims_in_index_order_without_statistics(tmp_path: Path) -> None:
    """No store runs ANALYZE, and without statistics SQLite's planner took schema 9's `operations_console` for the
    claim (its `phase =` equality) and sorted every active row on every claim: 4-6 ms a claim at 10,000 waiting
    operations, nothing due (`bench.probe_bench`). The look for dead holders reads the holders of due rows only,
    in the same index: it runs on nearly every claim of a lightly loaded worker, and read every active row."""
    SQLiteStore(tmp_path / "s.db").close()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        _fill_sqlite(conn, analyze=False)
        for skip in ((), SKIPPED):
            plan = _sqlite_plan(conn, skip)
            assert "operations_due_order" in plan and "TEMP B-TREE" not in plan, plan
        from pollwarden.store.sql_leases import dead_holders_query

        held = conn.execute("EXPLAIN QUERY PLAN " + SQLITE.sql(dead_holders_query(SQLITE)), (50.0, 50.0, "me", 50.0))
        plan = "\n".join(str(row[-1]) for row in held.fetchall())
        assert "operations_due_order (next_poll_at<?)" in plan, plan


def test_sqlite_finds_the_next_due_time_in_index_order_without_statistics(tmp_path: Path) -> None:
    """A lane that found nothing to claim asks when the next operation is due (`next_due`): without statistics
    SQLite read it from `operations_console`, every active row (130 ms at 10,000 waiting on this machine)."""
    from pollwarden.store.sql_reads import next_due_query

    SQLiteStore(tmp_path / "s.db").close()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        _fill_sqlite(conn, analyze=False)
        for column, index in (("next_poll_at", "operations_due_order"), ("paced_until", "operations_paced")):
            for free, skip in ((False, ()), (True, SKIPPED)):
                query = SQLITE.sql(next_due_query(SQLITE, column, free=free, skipping=len(skip)))
                params = ((50.0,) if free else ()) + skip
                rows = conn.execute("EXPLAIN QUERY PLAN " + query, params).fetchall()
                plan = "\n".join(str(row[-1]) for row in rows)
                assert index in plan and "operations_console" not in plan, (column, free, plan)


@pytest.fixture
def filled_pg(pg_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("TRUNCATE operations")
        conn.execute(
            "INSERT INTO operations (operation_id, job_id, contract_name, phase, next_poll_at, deadline_at,"
            " status_requests_used, max_status_requests, record, contract, created_at, updated_at)"
            " SELECT 'op' || i, 'j' || i, 'c', CASE WHEN i %% 10 = 0 THEN 'stopped' ELSE 'active' END,"
            " to_timestamp(i %% 100), to_timestamp(1e9), 0, 10, '{}', '', now(), now()"
            " FROM generate_series(1, %s) AS i",
            (ROWS,),
        )
        conn.execute("ANALYZE operations")
        try:
            yield conn
        finally:
            conn.execute("TRUNCATE operations")


def _pg_plan(conn: psycopg.Connection[tuple[object, ...]], skip: tuple[str, ...] = ()) -> str:
    cursor = psycopg.ClientCursor(conn)  # EXPLAIN takes no server-side parameters: bound here
    at = "1970-01-01T00:00:50Z"
    query = POSTGRES.sql(claim_due_query(POSTGRES, len(skip)))
    rows = cursor.execute("EXPLAIN " + query, (at, at, at, *skip, 16)).fetchall()
    return "\n".join(str(row[0]) for row in rows)


def test_postgres_claims_in_index_order(filled_pg: psycopg.Connection[tuple[object, ...]]) -> None:
    conn = filled_pg
    for skip in ((), SKIPPED):
        plan = _pg_plan(conn, skip)
        assert "operations_due_order" in plan and "Sort" not in plan, plan
    with conn.transaction():  # schema 3's index, rolled back: the same query sorts
        conn.execute("DROP INDEX operations_due_order")
        conn.execute(_OLD_INDEX)
        conn.execute("ANALYZE operations")
        assert "Sort" in _pg_plan(conn)
        raise psycopg.Rollback()
