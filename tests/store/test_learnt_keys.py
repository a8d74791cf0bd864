"""The learnt samples per `[schedule] learn_key` value (issue 26), on both backends: one key's newest, every
key's newest, the keys and their counts; and schema 14, which adds the index the read across keys uses, brought
to a store an older pollwarden left (samples it already holds read as before)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from pollwarden.store.migrations import LATEST
from pollwarden.store.postgres import upgrade_database

from .conftest import AnyStore, Backend
from .undo import undone_after

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ROWS = [  # (operation, key, lower, upper, ended after T0 by seconds)
    ("op-1", "", 1.0, 2.0, 1),
    ("op-2", "fast", 3.0, 4.0, 2),
    ("op-3", "fast", 5.0, None, 3),
    ("op-4", "slow", 60.0, 90.0, 4),
    ("op-5", "fast", 7.0, 8.0, 5),
    ("op-0", "fast", 9.0, 10.0, -40 * 86400),  # older than any window asked below
]


def _insert(backend: Backend, stamp: Callable[[datetime], object], given: Sequence[tuple[object, ...]] = ()) -> None:
    mark = "?" if isinstance(backend.target, Path) else "%s"
    sql = (
        "INSERT INTO learnt_samples (operation_id, contract, sample_key, lower_s, upper_s, ended_at)"
        f" VALUES ({', '.join([mark] * 6)})"
    )
    rows = given or [
        (op, "exports", key, low, high, stamp(T0 + timedelta(seconds=s))) for op, key, low, high, s in ROWS
    ]
    if isinstance(backend.target, Path):
        with sqlite3.connect(backend.target, isolation_level=None) as conn:
            conn.executemany(sql, rows)
        conn.close()
    else:
        with psycopg.connect(backend.target, autocommit=True) as pg, pg.cursor() as cur:
            cur.executemany(sql.encode(), rows)


def _stamp(backend: Backend) -> Callable[[datetime], object]:
    return (lambda t: t.timestamp()) if isinstance(backend.target, Path) else (lambda t: t)


def _reads(store: AnyStore) -> None:
    since = T0 - timedelta(days=30)
    every = store.learnt_samples("exports", since, 10)
    assert [(s.lower, s.upper) for s in every] == [(7.0, 8.0), (60.0, 90.0), (5.0, None), (3.0, 4.0), (1.0, 2.0)]
    assert [s.lower for s in store.learnt_samples("exports", since, 2)] == [7.0, 60.0]  # the newest first
    assert [s.lower for s in store.learnt_samples("exports", since, 10, "fast")] == [7.0, 5.0, 3.0]
    assert store.learnt_samples("exports", since, 10, "none-such") == []
    assert store.learnt_keys("exports", since) == [("fast", 3), ("", 1), ("slow", 1)]
    assert store.learnt_keys("other", since) == []


def test_samples_are_read_per_key_and_across_keys(store: AnyStore, backend: Backend) -> None:
    _insert(backend, _stamp(backend))
    _reads(store)


def test_schema_14_brings_the_index_and_the_samples_read_as_before(store: AnyStore, backend: Backend) -> None:
    _insert(backend, _stamp(backend))
    backend.close_all()
    if isinstance(backend.target, Path):
        with sqlite3.connect(backend.target, isolation_level=None) as conn:
            for statement in undone_after(13):
                conn.execute(statement)
            conn.execute("UPDATE meta SET value = '13' WHERE key = 'schema_version'")
            assert (
                conn.execute("SELECT name FROM sqlite_master WHERE name = 'learnt_samples_contract_recent'").fetchall()
                == []
            )
        conn.close()
    else:
        with psycopg.connect(backend.target, autocommit=True) as pg:
            for statement in undone_after(13):
                pg.execute(statement.encode())
            pg.execute("DELETE FROM schema_migrations WHERE version >= 14")
        assert upgrade_database(backend.target) == list(range(14, LATEST + 1))
    _reads(backend.open())
    if isinstance(backend.target, Path):
        with sqlite3.connect(backend.target) as conn:
            found = conn.execute("SELECT name FROM sqlite_master WHERE name = 'learnt_samples_contract_recent'")
            assert found.fetchall() == [("learnt_samples_contract_recent",)]
        conn.close()
    else:
        with psycopg.connect(backend.target) as pg:
            named = pg.execute("SELECT indexname FROM pg_indexes WHERE indexname = 'learnt_samples_contract_recent'")
            assert named.fetchall() == [("learnt_samples_contract_recent",)]


def test_samples_that_ended_at_the_same_moment_are_read_in_one_order(store: AnyStore, backend: Backend) -> None:
    """Which of the samples that ended together a window keeps, and in what order, is the store's, not the
    insertion's: the estimate must read the same history from every process (ties broken by operation id)."""
    at = _stamp(backend)(T0)
    rows = [(op, "exports", "", low, low + 1.0, at) for op, low in [("op-c", 3.0), ("op-a", 1.0), ("op-b", 2.0)]]
    _insert(backend, _stamp(backend), rows)
    since = T0 - timedelta(days=1)
    assert [s.lower for s in store.learnt_samples("exports", since, 2)] == [3.0, 2.0]
    assert [s.lower for s in store.learnt_samples("exports", since, 3, "")] == [3.0, 2.0, 1.0]
