"""PostgreSQL backend: one database shared by a fleet of workers on many machines.

It keeps the SQLite backend's records, fenced leases, decisions, submissions and sealed audit chain, with
the same method signatures and results (one store test suite runs against both). What a fleet adds:

- Connections come from a psycopg pool in autocommit mode, so nothing is ever left open in an implicit
  transaction; every write is one explicit BEGIN ... COMMIT, in pipeline mode (`_tx`).
- Fleet claims (`claim_due`) lock due rows with `FOR UPDATE SKIP LOCKED`: claimers on many machines never
  wait on each other and never take the same row, and the token still grows by one per claim.
- Many processes append to one audit log. Each append takes a transaction-scoped advisory lock on its log
  before reading the head, so two writers cannot both chain onto one head (a fork would look exactly like
  tampering to the verifier). Checkpoint counters come from a sequence, so logs never queue on each other.
- Time: like the SQLite backend, every method takes `now` from its caller, so tests drive time explicitly
  and one suite fits both. Every driver (the worker, `watch`, the Python API, the MCP server, `decide`) passes
  database time (`db_now()`: `SELECT now()`, carried forward for a second between queries), so machines whose
  clocks disagree still agree on when a lease expires (docs/design.md: "one clock").
- The schema is versioned (`migrations`); a store refuses a database that `pollwarden db upgrade` has not
  brought to this code's version, and one that a newer pollwarden has moved past.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from ..audit import AuditKeys
from ..clock import CarriedClock
from . import migrations
from .base import StoreError
from .bell import CHANNEL, Bell, PostgresBell
from .common import Dialect, Row, Tx
from .sql import SQLStore
from .target import redact_url
from .witness import Witness

__all__ = ["POSTGRES", "PostgresStore", "redact_url", "upgrade_database"]

CONNECT_TIMEOUT = 10
"""Seconds to wait for the server when none is given in the URL: a worker should fail, not hang."""

Conn = psycopg.Connection[TupleRow]


def _connect_kwargs(url: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"autocommit": True}
    try:
        if "connect_timeout" not in conninfo_to_dict(url):
            kwargs["connect_timeout"] = CONNECT_TIMEOUT
    except psycopg.Error:
        # libpq's parse error quotes the text around the fault, which may be the password: not repeated.
        raise StoreError(
            f"{redact_url(url)} is not a usable PostgreSQL URL; write it as postgresql://user@host:port/database"
        ) from None
    return kwargs


def server_now(url: str) -> datetime:
    """The database server's clock, on a connection of its own (`operating.home_clock`: for a process that opens
    its store call by call, the MCP server)."""
    try:
        with psycopg.connect(url, **_connect_kwargs(url)) as conn:
            row = conn.execute("SELECT now()").fetchone()
    except psycopg.Error as exc:
        raise StoreError(f"the state database {redact_url(url)} is unavailable: {exc}") from None
    assert row is not None
    return _utc(row[0])


def upgrade_database(url: str) -> list[int]:
    """`pollwarden db upgrade`: bring the database to this code's schema; returns the versions applied."""
    where = redact_url(url)
    kwargs = _connect_kwargs(url)
    try:
        with psycopg.connect(url, **kwargs) as conn:
            return migrations.upgrade(conn, where)
    except psycopg.Error as exc:
        raise StoreError(f"cannot upgrade {where}: {exc}") from None


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


def _timestamptz(value: datetime) -> datetime:
    """A time as a timestamptz parameter: psycopg adapts an aware datetime as it is."""
    return value


POSTGRES = Dialect(
    placeholder="%s",
    stamp=_timestamptz,
    moment=_utc,
    lock_row=" FOR UPDATE",
    lock_due=" FOR UPDATE SKIP LOCKED",
    lock_log="SELECT pg_advisory_xact_lock(?)",
    # A volatile function in the output is evaluated after ORDER BY: the keys are locked in the order given.
    lock_logs="SELECT pg_advisory_xact_lock(k) FROM unnest(?::bigint[]) WITH ORDINALITY AS t(k, n) ORDER BY n",
    next_counter="SELECT nextval('audit_checkpoint_counter')",
    now="now()",
    json_field="(CAST({column} AS jsonb) ->> '{key}')",
    # json, not jsonb: the record may hold a \u0000 escape, which only jsonb refuses.
    record_reason="(record::json ->> 'reason')",
    casts={"text": "text", "bigint": "bigint", "time": "timestamptz", "bool": "boolean"},
)


class _Queued:
    """A statement's cursor in pipeline mode: its answer is collected when the body first reads it."""

    __slots__ = ("_cursor", "_pipe")

    def __init__(self, cursor: psycopg.Cursor[TupleRow], pipe: psycopg.Pipeline) -> None:
        self._cursor = cursor
        self._pipe = pipe

    @property
    def rowcount(self) -> int:
        if self._cursor.pgresult is None:  # not answered yet: fetching would take a row, so sync instead
            self._pipe.sync()
        return self._cursor.rowcount

    def fetchone(self) -> Row | None:
        return self._cursor.fetchone()

    def fetchall(self) -> Sequence[Row]:
        return self._cursor.fetchall()


class PostgresStore(SQLStore):
    """Records and their audit trail in a shared PostgreSQL database; safe to share between threads.

    `keys` and `trusted_checkpoint_path` mean what they mean for `SQLiteStore` (see `AuditTrail`): the
    trusted checkpoint file is kept on this machine, outside the database, as evidence against a database
    restored from an older copy.
    """

    shared_across_threads = True
    """Its pool hands each thread its own connection, so one instance serves a whole worker process."""

    dialect = POSTGRES
    path: str

    def __init__(
        self,
        url: str,
        *,
        keys: AuditKeys | None = None,
        trusted_checkpoint_path: Path | None = None,
        min_size: int = 1,
        max_size: int = 4,
        witness: Witness | None = None,
    ) -> None:
        self.path = redact_url(url)
        self._listen_to = (url, _connect_kwargs(url))  # a listener's own connection (`bell`); never shown
        super().__init__(keys=keys, trusted_checkpoint_path=trusted_checkpoint_path, witness=witness)
        kwargs = _connect_kwargs(url)
        try:
            with psycopg.connect(url, **kwargs) as conn:
                migrations.check(conn, self.path)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the state database {self.path}: {exc}") from None
        self._clock = CarriedClock(self._server_now)
        self._pool: ConnectionPool[Conn] = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            open=True,
            kwargs=kwargs,
            name="pollwarden",
            timeout=30.0,
        )

    def close(self) -> None:
        self.keeper.flush()
        self._pool.close()

    @contextmanager
    def _connection(self) -> Iterator[Conn]:
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.OperationalError as exc:
            # Includes the pool giving up: the server went away or every connection is busy.
            raise StoreError(f"the state database {self.path} is unavailable: {exc}") from None
        except psycopg.errors.InsufficientPrivilege as exc:
            # A role granted less than all (an enqueuer's may read the contracts registry, not install into it).
            raise StoreError(f"{self.path}: {exc.diag.message_primary or 'permission denied'}") from None

    def _fetchall(self, query: str, params: Sequence[Any]) -> Sequence[Row]:
        """One read outside any write transaction (autocommit: nothing stays open after it)."""
        with self._connection() as conn:
            return conn.execute(query, params).fetchall()

    def _stream(self, query: str, params: Sequence[Any]) -> Iterator[Row]:
        """Through a server-side cursor: an export of a fleet's whole history need not fit in memory."""
        with self._connection() as conn, conn.transaction(), conn.cursor(name="pollwarden_audit_records") as cursor:
            cursor.itersize = 2000
            cursor.execute(query, params)
            yield from cursor

    @contextmanager
    def _snapshot(self) -> Iterator[Callable[[str, Sequence[Any]], Iterator[Row]]]:
        with self._connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            names = iter(range(1 << 30))

            def read(query: str, params: Sequence[Any]) -> Iterator[Row]:
                with conn.cursor(name=f"pollwarden_snapshot_{next(names)}") as cursor:
                    cursor.itersize = 2000
                    cursor.execute(query, params)
                    yield from cursor

            yield read

    @contextmanager
    def _tx(self) -> Iterator[Tx]:
        """One write transaction in pipeline mode: each statement goes out as it is made and its answer is
        waited for only when the body reads it, so a batch's statements share round trips (a write batch is
        three: the fence with its logs' locks and heads, the records with the heads lock and the newest head,
        the signed head with COMMIT). BEGIN and COMMIT are statements of the pipeline: `conn.transaction()`
        would wait for BEGIN and again before COMMIT. The transaction is committed when this returns."""
        with self._connection() as conn, conn.pipeline() as pipe:
            try:
                conn.execute("BEGIN")
                tx = Tx(lambda query, params: _Queued(conn.execute(query, params), pipe), POSTGRES)
                yield tx
                self._seal_commit(tx)
                conn.execute("COMMIT")
            except BaseException:
                # Collect the answers still out, so a refusal among them is not logged by psycopg at the
                # pipeline's end as an "error ignored": what failed is what is raised. The pool's connection
                # block then rolls the transaction back, as it does on any exception.
                with suppress(psycopg.Error):
                    pipe.sync()
                raise
        self._committed(tx)

    def bell(self) -> Bell:
        """`LISTEN`/`NOTIFY` (`store.bell`): heard by every waiter of this database, on every host."""

        def notify() -> None:
            with self._connection() as conn:
                conn.execute(f"NOTIFY {CHANNEL}")

        def connect() -> psycopg.Connection[TupleRow]:
            url, kwargs = self._listen_to
            return psycopg.connect(url, **{**kwargs, "autocommit": True})

        return PostgresBell(notify, connect)

    def db_now(self) -> datetime:
        """The database clock: the one time every host of a fleet agrees on, for claims, leases, due times and the
        audit. Asked of the server at most once a second and carried forward between (`clock.CarriedClock`): every
        driver takes its time from here, several times per step."""
        return self._clock()

    def _server_now(self) -> datetime:
        row = self._row("SELECT now()")
        assert row is not None
        return _utc(row[0])
