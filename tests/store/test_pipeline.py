"""PostgreSQL write transactions run in pipeline mode (`PostgresStore._tx`): a statement's answer is collected
only when the body reads it, or at COMMIT. So a statement the server refuses, whose answer nothing read, must
still fail the whole transaction, and leave the pooled connection as clean as a refusal read at once would."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from pollwarden import events as ev
from pollwarden.audit import load_or_create_keys
from pollwarden.core.contract.parse import parse_contract
from pollwarden.core.record import new_record
from pollwarden.store.common import Tx
from pollwarden.store.postgres import PostgresStore

from .conftest import _empty
from .test_store import CONTRACT, T0


def _store(pg_url: str, tmp_path: Path) -> PostgresStore:
    _empty(pg_url)
    # One connection: the transaction after the failed one runs on the very connection it left behind.
    return PostgresStore(pg_url, keys=load_or_create_keys(tmp_path / "home"), max_size=1)


def _create(store: PostgresStore, op: str) -> None:
    store.create(
        new_record(parse_contract(CONTRACT), operation_id=op, job_id=f"job-{op}", now=T0),
        CONTRACT,
        ev.Created.prepared({}),
    )


def _job_ids(store: PostgresStore) -> list[str]:
    return [str(row[0]) for row in store._rows("SELECT job_id FROM operations ORDER BY job_id")]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]


def _refused(tx: Tx) -> None:
    # The created event's (log, seq) again: refused, and its answer is never read by this body.
    tx.execute(
        "INSERT INTO audit_records (log_id, seq, at, kind, prev_hash, ciphertext, this_hash)"
        " VALUES ('a', 1, 'x', 'x', 'x', '\\x00', 'x')"
    )
    tx.execute("UPDATE operations SET job_id = 'changed again' WHERE operation_id = 'a'")


def _raise(tx: Tx) -> None:
    raise RuntimeError("the body's own failure")


@pytest.mark.parametrize(
    ("fail", "raised"), [(_refused, psycopg.errors.UniqueViolation), (_raise, RuntimeError)], ids=["refused", "raise"]
)
def test_a_failed_transaction_rolls_back_what_it_sent_unread_and_leaves_its_connection_idle(
    pg_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    fail: Callable[[Tx], None],
    raised: type[BaseException],
) -> None:
    store = _store(pg_url, tmp_path)
    try:
        _create(store, "a")
        with pytest.raises(raised), store._tx() as tx:
            tx.execute("UPDATE operations SET job_id = 'changed' WHERE operation_id = 'a'")
            fail(tx)
        assert _job_ids(store) == ["job-a"]
        _create(store, "b")  # the same connection, back in the pool: the next transaction commits
        assert _job_ids(store) == ["job-a", "job-b"]
        assert [e.kind for e in store.events("b")] == ["created"]
        assert _warnings(caplog) == []  # rolled back by the store, not by the pool (or psycopg) with a warning
    finally:
        store.close()


def test_a_rowcount_read_in_the_body_is_the_statements_own(pg_url: str, tmp_path: Path) -> None:
    store = _store(pg_url, tmp_path)
    try:
        _create(store, "a")
        _create(store, "b")
        with store._tx() as tx:
            changed = tx.execute("UPDATE operations SET job_id = job_id || '!'")
            none = tx.execute("UPDATE operations SET job_id = 'x' WHERE operation_id = 'nobody'")
            assert (none.rowcount, changed.rowcount) == (0, 2)  # read in the other order than sent
        assert _job_ids(store) == ["job-a!", "job-b!"]
    finally:
        store.close()
