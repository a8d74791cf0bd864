"""Stores under test as an operator with file access sees them (a home, and a PostgreSQL database for that backend),
and what such an operator does to them: plain SQL and file operations, no key. Shared by the tamper tests."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pollwarden.simulator import Simulator
from tests.conftest import run_cli, write_contract
from tests.store.conftest import _admin, create_database, drop_database

EXIT_TAMPERED = 5


@dataclass
class Place:
    """One store under test: its home (keys, head file) and, for PostgreSQL, its database URL."""

    home: Path
    url: str | None = None
    env: dict[str, str] | None = None
    """Variables every command of this place runs with (a witness given by the environment)."""

    @property
    def db_args(self) -> tuple[str, ...]:
        return ("--db", self.url) if self.url else ()

    def execute(self, statement: str, *params: object) -> None:
        """Run one statement as whoever holds the files would: straight at the database, no key."""
        if self.url is None:
            with sqlite3.connect(self.home / "pollwarden.db", isolation_level=None) as conn:
                conn.execute(statement, params)
            conn.close()
        else:
            with psycopg.connect(self.url, autocommit=True) as pg:
                pg.execute(statement.replace("?", "%s").encode(), params)

    def run(self, *args: str) -> tuple[int, str, str]:
        ran = run_cli(*args, *self.db_args, home=self.home, env=self.env)
        assert "Traceback" not in ran.stderr, ran.stderr
        return ran.code, ran.stdout, ran.stderr

    def verify(self, *extra: str) -> tuple[int, dict[str, object]]:
        code, out, err = self.run("audit", "verify", "--json", *extra)
        assert code in (0, EXIT_TAMPERED), err
        report: dict[str, object] = json.loads(out)
        return code, report


def _watch(place: Place, contract: Path, job: str, operation: str) -> None:
    code, _, err = place.run("watch", "--contract", str(contract), "--job", job, "--operation", operation)
    assert code == 0, err


def _clone_database(source: str) -> str:
    return create_database(upgraded=True, copy_of=source)


@dataclass
class Snapshot:
    sqlite: Path | None = None
    pg_name: str | None = None


def _take(place: Place, where: Path) -> Snapshot:
    shutil.copy(place.home / "audit-head.checkpoint", where / "audit-head.checkpoint")
    if place.url is None:
        # The file as a backup tool would copy it: consistent (SQLite's own backup), WAL folded in.
        with sqlite3.connect(place.home / "pollwarden.db") as src, sqlite3.connect(where / "db") as dst:
            src.backup(dst)
        src.close()
        dst.close()
        return Snapshot(sqlite=where / "db")
    clone = _clone_database(place.url)
    return Snapshot(pg_name=clone.rsplit("/", 1)[1])


def _restore(place: Place, snap: Snapshot, where: Path) -> None:
    shutil.copy(where / "audit-head.checkpoint", place.home / "audit-head.checkpoint")
    if snap.sqlite is not None:
        for suffix in ("-wal", "-shm"):
            (place.home / f"pollwarden.db{suffix}").unlink(missing_ok=True)
        shutil.copy(snap.sqlite, place.home / "pollwarden.db")
        return
    assert place.url is not None and snap.pg_name is not None
    name = place.url.rsplit("/", 1)[1]
    with _admin() as admin:
        admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(snap.pg_name))
        )
        admin.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(snap.pg_name)))


def fresh_place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    """A new home (and, for PostgreSQL, a new database) per test: `fresh` in tests/e2e/conftest.py."""
    home = tmp_path / "home"
    home.mkdir()
    made = Place(home, create_database(upgraded=True) if request.param == "postgres" else None)
    try:
        yield made
    finally:
        if made.url:
            drop_database(made.url)


def _roll_back(place: Place, sim: Simulator, tmp_path: Path) -> None:
    """Work, a copy of the database and the home's head file, more work, then both put back."""
    contract = write_contract(tmp_path / "c.toml", sim.url)
    _watch(place, contract, "happy-1", "op-a")
    aside = tmp_path / "aside"
    aside.mkdir()
    snap = _take(place, aside)
    _watch(place, contract, "happy-2", "op-b")
    _restore(place, snap, aside)
