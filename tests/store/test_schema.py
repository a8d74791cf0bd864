"""One schema source: both backends build their tables from `store/migrations`, and a file written by an
older pollwarden (the inline schema it carried, frozen below as it shipped) ends up exactly like a new one."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from pollwarden.store.base import StoreError
from pollwarden.store.migrations import DIALECTS, LATEST, Migration, migrations
from pollwarden.store.sqlite import SQLiteStore

# The schema SQLiteStore created inline up to schema 1: the files in the field look like this.
SHIPPED_SCHEMA_1 = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT;
CREATE TABLE IF NOT EXISTS operations (
    operation_id TEXT PRIMARY KEY, job_id TEXT NOT NULL, contract_name TEXT NOT NULL, phase TEXT NOT NULL,
    next_poll_at REAL NOT NULL, deadline_at REAL NOT NULL, status_requests_used INTEGER NOT NULL,
    max_status_requests INTEGER NOT NULL, record TEXT NOT NULL, contract TEXT NOT NULL, lease_owner TEXT,
    lease_token INTEGER NOT NULL DEFAULT 0, lease_expires_at REAL, created_at REAL NOT NULL,
    updated_at REAL NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS operations_due ON operations (next_poll_at) WHERE phase = 'active';
CREATE TABLE IF NOT EXISTS audit_records (
    log_id TEXT NOT NULL, seq INTEGER NOT NULL, at TEXT NOT NULL, kind TEXT NOT NULL, prev_hash TEXT NOT NULL,
    ciphertext BLOB NOT NULL, this_hash TEXT NOT NULL, PRIMARY KEY (log_id, seq)
) STRICT;
CREATE TABLE IF NOT EXISTS decisions (
    decision_id TEXT PRIMARY KEY, operation_id TEXT NOT NULL, status TEXT NOT NULL, created_at REAL NOT NULL,
    request TEXT NOT NULL, decided_by TEXT, decided_at REAL, option INTEGER, note TEXT
) STRICT;
CREATE INDEX IF NOT EXISTS decisions_open ON decisions (operation_id) WHERE status = 'open';
CREATE TABLE IF NOT EXISTS submissions (
    operation_id TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, idempotency_token TEXT, body BLOB NOT NULL,
    state TEXT NOT NULL, job_id TEXT, status_location TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS grants (
    grant_id TEXT PRIMARY KEY, kind TEXT NOT NULL, subject TEXT NOT NULL, scope TEXT NOT NULL,
    status TEXT NOT NULL, requested_at REAL NOT NULL, detail TEXT NOT NULL, decided_by TEXT, decided_at REAL
) STRICT;
CREATE TABLE IF NOT EXISTS provider_pacing (
    provider TEXT PRIMARY KEY, interval_seconds REAL NOT NULL, next_slot_at REAL NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS audit_checkpoints (
    counter INTEGER PRIMARY KEY, log_id TEXT NOT NULL, seq INTEGER NOT NULL, head_hash TEXT NOT NULL,
    at TEXT NOT NULL, key_id TEXT NOT NULL, signature TEXT NOT NULL
) STRICT;
INSERT INTO meta VALUES ('schema_version', '1');
"""


@dataclass(frozen=True)
class Shape:
    columns: dict[str, list[tuple[object, ...]]]
    """Per table: name, type, not null, default, key position of each column."""
    strict: list[str]
    indexes: list[tuple[str, str, str]]


def _sqlite_shape(path: Path) -> Shape:
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return Shape(
            columns={table: [tuple(r[1:]) for r in conn.execute(f"PRAGMA table_xinfo({table})")] for table in tables},
            strict=sorted(r[1] for r in conn.execute("PRAGMA table_list") if r[5] and r[0] == "main"),
            indexes=sorted(
                (r[0], r[1], " ".join(r[2].replace("IF NOT EXISTS ", "").split()))
                for r in conn.execute(
                    "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
                )
            ),
        )


def _shipped_file(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.executescript(SHIPPED_SCHEMA_1)


def test_a_file_from_the_shipped_schema_opens_into_exactly_the_schema_of_a_new_file(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "new.db").close()
    _shipped_file(tmp_path / "old.db")
    SQLiteStore(tmp_path / "old.db").close()  # upgrades what is pending, on open
    new, old = _sqlite_shape(tmp_path / "new.db"), _sqlite_shape(tmp_path / "old.db")
    assert new == old
    assert len(new.strict) == 16  # meta and the fifteen tables of the migrations
    with sqlite3.connect(tmp_path / "old.db") as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(LATEST),)


def test_a_file_newer_than_this_code_is_refused(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "x.db").close()
    with sqlite3.connect(tmp_path / "x.db") as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(LATEST + 1),))
    with pytest.raises(StoreError, match="newer pollwarden"):
        SQLiteStore(tmp_path / "x.db")


def test_both_backends_build_the_same_tables_and_columns(pg_url: str, tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "x.db").close()
    lite = {
        table: [(c[0], bool(c[2])) for c in columns]  # name, not null
        for table, columns in _sqlite_shape(tmp_path / "x.db").columns.items()
        if table != "meta"
    }
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name, is_nullable = 'NO' FROM information_schema.columns"
            " WHERE table_schema = 'public' AND table_name <> 'schema_migrations'"
            " ORDER BY table_name, ordinal_position"
        ).fetchall()
        pg_indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")}
    pg: dict[str, list[tuple[str, bool]]] = {}
    for table, column, not_null in rows:
        pg.setdefault(table, []).append((column, bool(not_null)))
    # SQLite lets a PRIMARY KEY column be NULL unless it says NOT NULL; PostgreSQL never does.
    assert {t: [name for name, _ in cols] for t, cols in lite.items()} == {
        t: [name for name, _ in cols] for t, cols in pg.items()
    }
    lite_indexes = {name for name, _, _ in _sqlite_shape(tmp_path / "x.db").indexes}
    assert lite_indexes <= pg_indexes


def test_a_template_token_names_a_type_of_every_dialect() -> None:
    assert {frozenset(types) for types in DIALECTS.values()} == {frozenset(next(iter(DIALECTS.values())))}
    for migration in migrations():
        for dialect in DIALECTS:
            assert "{" not in migration.sql(dialect)
    with pytest.raises(RuntimeError, match=r"unknown type token \{when\}"):
        Migration(9, "v009.sql", "CREATE TABLE t (a {when})").statements("sqlite")


def test_a_statement_marked_for_one_dialect_is_left_out_of_the_other() -> None:
    only = Migration(
        9, "v009.sql", "CREATE TABLE t (a {int});\n-- a note; with a semicolon\n-- only postgresql\nCREATE SEQUENCE s;"
    )
    assert only.statements("postgresql") == ["CREATE TABLE t (a bigint)", "CREATE SEQUENCE s"]
    assert only.statements("sqlite") == ["CREATE TABLE t (a INTEGER)"]
