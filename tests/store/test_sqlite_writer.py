"""Group commit on SQLite: the stores of one file in one process share a writer, and concurrent transactions
commit together, each body isolated in a savepoint, each caller returning only once its batch is durable."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pollwarden.audit import load_or_create_keys, verify
from pollwarden.store.base import StoreError
from pollwarden.store.sqlite import SQLiteStore
from pollwarden.store.sqlite_writer import GroupWriter

T0 = datetime(2025, 4, 18, 10, 20, tzinfo=UTC)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[list[SQLiteStore]]:
    keys = load_or_create_keys(tmp_path / "home")
    opened = [SQLiteStore(tmp_path / "state.db", keys=keys) for _ in range(4)]
    yield opened
    for store in opened:
        store.close()


def _writer(store: SQLiteStore) -> GroupWriter:
    writer = store._writer
    assert writer is not None
    return writer


def _queued(writer: GroupWriter, count: int) -> None:
    deadline = time.monotonic() + 10
    while writer._queued < count:  # the other threads are blocked on the writer, waiting to join the batch
        assert time.monotonic() < deadline, "the other writers never queued"
        time.sleep(0.001)


def test_every_store_of_a_file_shares_one_writer(stores: list[SQLiteStore], tmp_path: Path) -> None:
    assert len({id(_writer(s)) for s in stores}) == 1 and _writer(stores[0]).refs == 4
    other = SQLiteStore(tmp_path / "other.db", keys=stores[0].keys)
    try:
        assert _writer(other) is not _writer(stores[0])
    finally:
        other.close()


def test_transactions_that_wait_while_one_runs_commit_with_it_under_one_head(stores: list[SQLiteStore]) -> None:
    first, *others = stores
    inside, go = threading.Event(), threading.Event()

    def holds_the_writer() -> None:
        with first._tx() as tx:
            first._append(tx, "log-0", "note", {"i": 0}, T0)
            inside.set()
            go.wait(10)

    threads = [threading.Thread(target=holds_the_writer)]
    threads[0].start()
    inside.wait(10)
    for n, store in enumerate(others, start=1):
        threads.append(threading.Thread(target=store.append, args=(f"log-{n}", "note", {"i": n}, T0)))
        threads[-1].start()
    _queued(_writer(first), len(others))
    go.set()
    for thread in threads:
        thread.join(10)
    (head,) = first.audit_heads()  # four transactions, one commit, one head over the four logs
    assert head.records == 4 and head.logs == 4
    assert first.keys is not None
    assert verify(first.audit_records(), [], first.keys.public_key, heads=first.audit_heads()).ok


def test_a_body_that_fails_in_a_batch_is_rolled_back_alone(stores: list[SQLiteStore]) -> None:
    first, failing, third, _ = stores
    inside, go = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def holds_the_writer() -> None:
        with first._tx() as tx:
            first._append(tx, "kept-1", "note", {"i": 1}, T0)
            inside.set()
            go.wait(10)

    def fails() -> None:
        try:
            with failing._tx() as tx:
                failing._append(tx, "lost", "note", {"i": 2}, T0)
                raise ValueError("this body fails after writing")
        except ValueError as exc:
            failures.append(exc)

    threads = [threading.Thread(target=holds_the_writer)]
    threads[0].start()
    inside.wait(10)
    threads += [threading.Thread(target=fails), threading.Thread(target=third.append, args=("kept-3", "n", {}, T0))]
    for thread in threads[1:]:
        thread.start()
    _queued(_writer(first), 2)
    go.set()
    for thread in threads:
        thread.join(10)
    assert len(failures) == 1
    assert sorted({r.log_id for r in first.audit_records()}) == ["kept-1", "kept-3"]
    assert first.keys is not None
    report = verify(first.audit_records(), [], first.keys.public_key, heads=first.audit_heads())
    assert report.ok, report.problems  # the failed body's records and its changes to the shared Tx are gone


class _FailingCommit:
    """The writer's connection, except that COMMIT fails as a full disk would make it."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, query: str, params: Any = ()) -> Any:
        if query == "COMMIT":
            raise OSError("disk full")
        return self._conn.execute(query, params)

    def close(self) -> None:
        self._conn.close()


def test_a_commit_that_fails_fails_every_caller_of_its_batch_and_keeps_nothing(stores: list[SQLiteStore]) -> None:
    first = stores[0]
    writer = _writer(first)
    real = writer._conn
    writer._conn = _FailingCommit(real)  # type: ignore[assignment]
    try:
        with pytest.raises(StoreError, match="could not commit: disk full"):
            first.append("doomed", "note", {}, T0)
    finally:
        writer._conn = real
    assert list(first.audit_records()) == [] and first.audit_heads() == []
    first.append("after", "note", {}, T0)  # the writer is usable again
    assert [r.log_id for r in first.audit_records()] == ["after"]


def test_the_last_store_to_close_closes_the_writer(tmp_path: Path) -> None:
    keys = load_or_create_keys(tmp_path / "home")
    a, b = SQLiteStore(tmp_path / "s.db", keys=keys), SQLiteStore(tmp_path / "s.db", keys=keys)
    writer = _writer(a)
    a.close()
    b.append("still", "note", {}, T0)  # b's writer is the same and still open
    b.close()
    assert writer.refs == 0
    with pytest.raises(StoreError, match="closed"):
        b.append("late", "note", {}, T0)
