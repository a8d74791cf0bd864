"""One store test suite, two backends: every test that takes `store` runs on SQLite and on PostgreSQL.

PostgreSQL is a real server (CI guarantees one on 127.0.0.1:5432, trust auth; POLLWARDEN_TEST_POSTGRES
points elsewhere). Each test session creates its own database and drops it at the end, so parallel runs
and leftovers from a crashed run never meet. An unreachable server fails the postgres tests loudly: a
skipped backend would let a fencing bug ship unnoticed.
"""

from __future__ import annotations

import atexit
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from pollwarden.audit import AuditKeys, load_or_create_keys
from pollwarden.store.base import Store
from pollwarden.store.open import open_store
from pollwarden.store.postgres import PostgresStore, redact_url, upgrade_database

AnyStore = Store
"""The tests hold a store as the interfaces do: by the protocol, whichever backend is behind it."""

ADMIN_URL = os.environ.get("POLLWARDEN_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
BACKENDS = ["sqlite", "postgres"]

_TABLES = (
    "operations, audit_records, decisions, submissions, grants, audit_checkpoints, audit_heads, audit_heads_pending,"
    " provider_pacing, contracts, outbox, push_deliveries, learnt_samples"
)


def _admin() -> psycopg.Connection[tuple[object, ...]]:
    try:
        return psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.Error as exc:
        problem = str(exc)
    pytest.fail(  # outside the except: the message says it all, the psycopg traceback adds nothing
        f"PostgreSQL is not reachable at {redact_url(ADMIN_URL)}: {problem}\nThe store suite runs against a real"
        " server: start it (`pg_ctlcluster <version> main start`, as .ci/run does) or set"
        " POLLWARDEN_TEST_POSTGRES to the URL of one",
        pytrace=False,
    )


def _database_url(name: str) -> str:
    parts = urlsplit(ADMIN_URL)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def create_database(*, upgraded: bool, copy_of: str | None = None) -> str:
    """A new, uniquely named database; its URL. The caller drops it with `drop_database`.

    An upgraded one is a copy of this process's template, upgraded once (`CREATE DATABASE ... TEMPLATE`: a
    file copy, ~10 times faster than running every migration again); the migrations write nothing that differs
    from one database to the next, so the copy is what `upgrade_database` would have made. `copy_of`: the URL of
    a database to copy the same way instead (rows and all: a history built once for many tests), on which no
    session may be open."""
    name = f"pollwarden_test_{secrets.token_hex(6)}"
    source = urlsplit(copy_of).path.lstrip("/") if copy_of is not None else _template() if upgraded else None
    template = sql.SQL(" TEMPLATE {}").format(sql.Identifier(source)) if source is not None else sql.SQL("")
    with _admin() as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}{}").format(sql.Identifier(name), template))
        # A commit is visible to every other session when it returns either way; `off` only stops it waiting
        # for the WAL flush, which matters when the server itself crashes, and no test crashes it. (A setting of
        # the database, which a copy does not inherit: set on each.)
        admin.execute(sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(sql.Identifier(name)))
    return _database_url(name)


_templates: list[str] = []
_template_lock = threading.Lock()


def _template() -> str:
    """This process's upgraded template database, made on first use and dropped when the process exits. One per
    process: a template being copied may have no other session on it, and two xdist workers copy at once."""
    with _template_lock:
        if not _templates:
            name = f"pollwarden_template_{secrets.token_hex(6)}"
            with _admin() as admin:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            _templates.append(name)
            atexit.register(drop_database, _database_url(name))
            upgrade_database(_database_url(name))  # its connection is closed when it returns: free to copy
        return _templates[0]


def drop_database(url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    with _admin() as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """This session's database, upgraded to the current schema; emptied before each test that uses it."""
    url = create_database(upgraded=True)
    yield url
    drop_database(url)


@pytest.fixture
def empty_pg_url() -> Iterator[str]:
    """A database `pollwarden db upgrade` has never touched."""
    url = create_database(upgraded=False)
    yield url
    drop_database(url)


def _empty(url: str) -> None:
    """Every row of a test's data gone, in one transaction. DELETE, not TRUNCATE: on tables of a few rows it
    is ~15 ms against ~200 ms (TRUNCATE makes new files for every table), and no table references another."""
    deletes = "; ".join(f"DELETE FROM {table.strip()}" for table in _TABLES.split(","))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"BEGIN; {deletes}; ALTER SEQUENCE audit_checkpoint_counter RESTART; COMMIT".encode())


@dataclass
class Backend:
    """Where a test's store lives, so a test can open more stores on the same data (a restart, a second
    worker, a thread of its own) with the same keys."""

    kind: str
    target: str | Path
    keys: AuditKeys
    home: Path
    opened: list[AnyStore] = field(default_factory=list)

    def open(self, *, keyless: bool = False, trusted: Path | None = None) -> AnyStore:
        keys = None if keyless else self.keys
        store = open_store(self.target, keys=keys, trusted_checkpoint_path=trusted)
        self.opened.append(store)
        return store

    def close_all(self) -> None:
        for store in self.opened:
            store.close()
        self.opened.clear()


_BACKEND = pytest.StashKey[Backend]()


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AnyStore]:
    """A store on an empty database of each backend, with audit keys that can seal and sign."""
    target: str | Path = tmp_path / "state.db"
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_url")
        _empty(url)
        target = url
    backend = Backend(request.param, target, load_or_create_keys(tmp_path / "home"), tmp_path / "home")
    request.node.stash[_BACKEND] = backend
    try:
        yield backend.open()
    finally:
        backend.close_all()


@pytest.fixture
def pg_store(pg_url: str, tmp_path: Path) -> Iterator[PostgresStore]:
    """For what only PostgreSQL promises, such as one store shared by many threads."""
    _empty(pg_url)
    store = PostgresStore(pg_url, keys=load_or_create_keys(tmp_path / "home"))
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def backend(store: AnyStore, request: pytest.FixtureRequest) -> Backend:
    """The backend behind this test's `store`."""
    found: Backend = request.node.stash[_BACKEND]
    return found


def run_threads(count: int, target: Callable[[int], None]) -> None:
    """Run `target(i)` in `count` threads at once and re-raise the first failure in the test's thread."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def body(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            target(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a thread did not finish within 60 s"
    if errors:
        raise errors[0]
