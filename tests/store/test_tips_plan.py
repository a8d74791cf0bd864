"""Reading the heads of a batch's logs (`log_tips_query`) costs a step in the primary key per log on both
backends, however long those logs and however large the trail: a batch of polls reads 16 heads per write.

A scan is invisible in a correctness test. PostgreSQL planned the GROUP BY MAX join this replaced as a scan of
the whole trail once the prepared statement went generic: 2.7 ms of server CPU per batch at 30,000 records,
most of the server's CPU per poll, and growing with the trail.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg

from pollwarden.store.postgres import POSTGRES
from pollwarden.store.sqlite import SQLITE, SQLiteStore
from pollwarden.store.trail import log_tips_query

LOGS = 2000
PER_LOG = 20
ASKED = [f"log{n}" for n in range(100, 116)]


def test_postgres_reads_each_asked_logs_head_by_the_primary_key(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("TRUNCATE audit_records")
        try:
            conn.execute(
                "INSERT INTO audit_records (log_id, seq, at, kind, prev_hash, ciphertext, this_hash)"
                " SELECT 'log' || l, s, 'at', 'k', 'p', '\\x00', 'h' || l || '.' || s"
                " FROM generate_series(1, %s) AS l, generate_series(1, %s) AS s",
                (LOGS, PER_LOG),
            )
            conn.execute("ANALYZE audit_records")
            query = POSTGRES.sql(log_tips_query(len(ASKED)))
            assert conn.execute(query, ASKED).fetchall() == [(log, PER_LOG, f"h{log[3:]}.{PER_LOG}") for log in ASKED]
            numbered = query
            for n in range(1, len(ASKED) + 1):
                numbered = numbered.replace("%s", f"${n}", 1)
            with conn.transaction():
                # The plan a prepared statement settles on after its first executions: nothing known of the ids.
                conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                conn.execute(f"PREPARE tips ({','.join(['text'] * len(ASKED))}) AS {numbered}")
                cursor = psycopg.ClientCursor(conn)  # EXPLAIN takes no server-side parameters: bound here
                marks = ",".join(["%s"] * len(ASKED))
                plan = "\n".join(str(row[0]) for row in cursor.execute(f"EXPLAIN EXECUTE tips ({marks})", ASKED))
                conn.execute("DEALLOCATE tips")
            assert "Seq Scan" not in plan and "Bitmap Heap Scan" not in plan, plan
        finally:
            conn.execute("TRUNCATE audit_records")


def test_sqlite_reads_each_asked_logs_head_by_the_primary_key(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "s.db").close()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            " INSERT INTO audit_records (log_id, seq, at, kind, prev_hash, ciphertext, this_hash)"
            " SELECT 'log' || (i / ?), i % ? + 1, 'at', 'k', 'p', x'00', 'h' FROM n",
            (LOGS * PER_LOG - 1, PER_LOG, PER_LOG),
        )
        conn.execute("ANALYZE")
        query = SQLITE.sql(log_tips_query(len(ASKED)))
        assert [row[:2] for row in conn.execute(query, ASKED)] == [(log, PER_LOG) for log in ASKED]
        plan = "\n".join(str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + query, ASKED))
        assert "SCAN r" not in plan and "SCAN audit_records" not in plan, plan
