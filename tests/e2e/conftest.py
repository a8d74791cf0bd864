"""What the end-to-end fleet tests share: a database of each backend, and a store opened on it as a command would."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pollwarden.audit import load_or_create_keys
from pollwarden.store.base import Store
from pollwarden.store.open import open_store
from tests.e2e.places import Place, fresh_place
from tests.store.conftest import create_database, drop_database


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, home: Path) -> Iterator[str]:
    """`--db` for a test run once per backend: the home's SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield str(home / "pollwarden.db")
        return
    url = create_database(upgraded=True)
    try:
        yield url
    finally:
        drop_database(url)


@pytest.fixture(params=["sqlite", "postgres"])
def db_args(request: pytest.FixtureRequest) -> Iterator[tuple[str, ...]]:
    """The flags naming a command's store, once per backend: none (the home's SQLite file), or `--db` and a new
    PostgreSQL database of the test's own."""
    if request.param == "sqlite":
        yield ()
        return
    url = create_database(upgraded=True)
    try:
        yield ("--db", url)
    finally:
        drop_database(url)


def store_of(db: str, home: Path) -> Store:
    """The store behind `--db`, with the home's audit keys and trusted checkpoint file."""
    return open_store(db, keys=load_or_create_keys(home), trusted_checkpoint_path=home / "audit-head.checkpoint")


@pytest.fixture(params=["sqlite", "postgres"])
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    """A new home per test, on each backend, for tampering with as an operator with file access would."""
    yield from fresh_place(request, tmp_path)
