"""The indexes SQLite's reads name (`INDEXED BY`) are there whenever a store is open.

Naming an index turns its absence from a slow read into an error on every claim ("no such index"), and a worker
then restarts forever. Only a file changed outside pollwarden lacks one (a migration makes each in the same
transaction as the schema version), so the store puts a missing one back when it opens the file.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pollwarden.store.base import StoreError
from pollwarden.store.sql_leases import NAMED_INDEXES
from pollwarden.store.sqlite import SQLiteStore

NOW = datetime(2026, 12, 7, tzinfo=UTC)


def _indexes(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}


@pytest.mark.parametrize("dropped", NAMED_INDEXES)
def test_a_named_index_dropped_outside_pollwarden_is_made_again_when_the_store_opens(
    tmp_path: Path, dropped: str
) -> None:
    path = tmp_path / "s.db"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"DROP INDEX {dropped}")
    assert dropped not in _indexes(path)
    store = SQLiteStore(path)
    try:
        assert store.claim_due("w", NOW, timedelta(seconds=30), 16) == []
        assert store.next_due() is None
    finally:
        store.close()
    assert set(NAMED_INDEXES) <= _indexes(path)


def test_a_reader_that_cannot_write_still_opens_a_file_that_lost_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`status` on a read-only file never needed the index: the open does not fail because it cannot make it."""
    path = tmp_path / "s.db"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"DROP INDEX {NAMED_INDEXES[0]}")

    def refused(self: SQLiteStore) -> None:
        raise StoreError(f"the state database {path} refused the write (attempt to write a readonly database)")

    monkeypatch.setattr(SQLiteStore, "_tx", refused)
    store = SQLiteStore(path)
    try:
        assert store.get("nonesuch") is None
    finally:
        store.close()
