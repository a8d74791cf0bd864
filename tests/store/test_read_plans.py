"""One operation's reads use an index on both backends, without statistics on SQLite (no store runs ANALYZE).

A scan is invisible in a correctness test: the answer is the same, only every status, story or console page of
one operation reads the whole table. Each test also shows the plan scanning without the index, so it fails if
the index stops serving the query.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pollwarden.store.postgres import POSTGRES
from pollwarden.store.sql_reads import decisions_query
from pollwarden.store.sqlite import SQLITE, SQLiteStore

ROWS = 5000
SHAPES = ((True, False), (True, True))
"""`SQLStore.decisions` of one operation: every decision (status, story, the console's page, MCP) or open ones."""


def _sqlite_plan(conn: sqlite3.Connection, query: str) -> str:
    rows = conn.execute("EXPLAIN QUERY PLAN " + SQLITE.sql(query), ("op7",)).fetchall()
    return "\n".join(str(row[-1]) for row in rows)


def test_sqlite_reads_one_operations_decisions_by_index_without_statistics(tmp_path: Path) -> None:
    """Without statistics SQLite scanned every decision and sorted: `decisions_open` holds only open ones, so
    every decision of one operation (what status, story and the console show) had no index at all."""
    SQLiteStore(tmp_path / "s.db").close()
    # No statement cache: a cached EXPLAIN keeps its plan after the DROP INDEX below.
    with sqlite3.connect(tmp_path / "s.db", cached_statements=0) as conn:
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            " INSERT INTO decisions (decision_id, operation_id, status, created_at, request, reason)"
            " SELECT 'd' || i, 'op' || (i % 1000), CASE WHEN i % 10 = 0 THEN 'open' ELSE 'decided' END, i, '{}',"
            " 'stop' FROM n",
            (ROWS,),
        )
        for of_operation, open_only in SHAPES:
            plan = _sqlite_plan(conn, decisions_query(of_operation=of_operation, open_only=open_only))
            assert "SEARCH decisions" in plan and "(operation_id=?" in plan, (open_only, plan)
            assert "TEMP B-TREE" not in plan, (open_only, plan)
        conn.execute("DROP INDEX decisions_operation")  # schema 14: every decision of one operation is a scan
        assert "SCAN decisions" in _sqlite_plan(conn, decisions_query(of_operation=True, open_only=False))


@pytest.fixture
def filled_pg(pg_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("TRUNCATE decisions")
        conn.execute(
            "INSERT INTO decisions (decision_id, operation_id, status, created_at, request, reason)"
            " SELECT 'd' || i, 'op' || (i %% 1000), CASE WHEN i %% 10 = 0 THEN 'open' ELSE 'decided' END,"
            " to_timestamp(i), '{}', 'stop' FROM generate_series(1, %s) AS i",
            (ROWS,),
        )
        conn.execute("ANALYZE decisions")
        try:
            yield conn
        finally:
            conn.execute("TRUNCATE decisions")


def _pg_plan(conn: psycopg.Connection[tuple[object, ...]], query: str) -> str:
    cursor = psycopg.ClientCursor(conn)  # EXPLAIN takes no server-side parameters: bound here
    rows = cursor.execute("EXPLAIN " + POSTGRES.sql(query), ("op7",)).fetchall()
    return "\n".join(str(row[0]) for row in rows)


def test_postgres_reads_one_operations_decisions_by_index(filled_pg: psycopg.Connection[tuple[object, ...]]) -> None:
    conn = filled_pg
    every = decisions_query(of_operation=True, open_only=False)
    plan = _pg_plan(conn, every)
    assert "decisions_operation" in plan and "Seq Scan" not in plan, plan
    with conn.transaction():  # schema 14, rolled back: every decision of one operation is a scan
        conn.execute("DROP INDEX decisions_operation")
        assert "Seq Scan" in _pg_plan(conn, every)
        raise psycopg.Rollback()


def test_sqlite_reads_the_newest_answered_decisions_by_index_without_statistics(tmp_path: Path) -> None:
    """The console's recent decisions sorted every answered decision for a page of them (a CASE in its ORDER BY):
    18 ms a view at 27,000 answered. Now the timed ones come from `decisions_answered` in order."""
    from pollwarden.store.sql_pages import RECENT_DECISIONS

    SQLiteStore(tmp_path / "s.db").close()
    with sqlite3.connect(tmp_path / "s.db", cached_statements=0) as conn:
        plan = "\n".join(str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + RECENT_DECISIONS, (20,)))
        assert "decisions_answered" in plan and "TEMP B-TREE" not in plan, plan


def test_postgres_reads_the_newest_answered_decisions_by_index(
    filled_pg: psycopg.Connection[tuple[object, ...]],
) -> None:
    from pollwarden.store.sql_pages import RECENT_DECISIONS

    conn = filled_pg
    conn.execute("UPDATE decisions SET decided_at = created_at WHERE status <> 'open'")
    conn.execute("ANALYZE decisions")
    plan = "\n".join(
        str(r[0]) for r in psycopg.ClientCursor(conn).execute("EXPLAIN " + POSTGRES.sql(RECENT_DECISIONS), (20,))
    )
    assert "decisions_answered" in plan and "Sort" not in plan, plan
