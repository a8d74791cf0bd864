"""Group commit on SQLite: the stores of one file in one process share a writer, and concurrent transactions
commit together, each body isolated in a savepoint, each caller returning only once its batch is durable."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pollwarden import events as ev
from pollwarden.audit import AuditKeys, key_id_of, load_or_create_keys, verify
from pollwarden.store import sqlite_writer
from pollwarden.store.base import StoreError
from pollwarden.store.sqlite import SQLiteStore
from pollwarden.store.sqlite_writer import GroupWriter

T0 = datetime(2025, 4, 18, 10, 20, tzinfo=UTC)
GUARD = 60.0
"""Seconds a thread here waits for another to reach a point, or to finish: a guard against a hang, long enough that
no loaded machine reaches it while the code is right (10 s was short of "tens of seconds")."""


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
    deadline = time.monotonic() + GUARD
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


@pytest.fixture
def patient(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch waits for its queued joiners however long the machine takes to run them (GUARD, not 20 ms): a
    test that holds the writer open while the others queue measures who joins, not how fast a thread starts."""
    monkeypatch.setattr(sqlite_writer, "MAX_AGE", GUARD)


@pytest.mark.usefixtures("patient")
def test_transactions_that_wait_while_one_runs_commit_with_it_under_one_head(stores: list[SQLiteStore]) -> None:
    first, *others = stores
    inside, go = threading.Event(), threading.Event()

    def holds_the_writer() -> None:
        with first._tx() as tx:
            first._append(tx, "log-0", ev.Paced.prepared({"i": 0}), T0)
            inside.set()
            go.wait(GUARD)

    threads = [threading.Thread(target=holds_the_writer)]
    threads[0].start()
    inside.wait(GUARD)
    for n, store in enumerate(others, start=1):
        threads.append(threading.Thread(target=store.append, args=(f"log-{n}", ev.Paced.prepared({"i": n}), T0)))
        threads[-1].start()
    _queued(_writer(first), len(others))
    go.set()
    for thread in threads:
        thread.join(GUARD)
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
            first._append(tx, "kept-1", ev.Paced.prepared({"i": 1}), T0)
            inside.set()
            go.wait(GUARD)

    def fails() -> None:
        try:
            with failing._tx() as tx:
                failing._append(tx, "lost", ev.Paced.prepared({"i": 2}), T0)
                raise ValueError("this body fails after writing")
        except ValueError as exc:
            failures.append(exc)

    threads = [threading.Thread(target=holds_the_writer)]
    threads[0].start()
    inside.wait(GUARD)
    threads += [
        threading.Thread(target=fails),
        threading.Thread(target=third.append, args=("kept-3", ev.Paced.prepared({}), T0)),
    ]
    for thread in threads[1:]:
        thread.start()
    _queued(_writer(first), 2)
    go.set()
    for thread in threads:
        thread.join(GUARD)
    assert len(failures) == 1
    assert sorted({r.log_id for r in first.audit_records()}) == ["kept-1", "kept-3"]
    assert first.keys is not None
    report = verify(first.audit_records(), [], first.keys.public_key, heads=first.audit_heads())
    assert report.ok, report.problems  # the failed body's records and its changes to the shared Tx are gone


def test_a_body_that_fails_in_a_batch_is_answered_once_what_it_failed_on_is_committed(
    stores: list[SQLiteStore],
) -> None:
    # A body may fail on what an earlier member of its batch wrote (the operation id or the job another watch
    # just created); its caller then looks again, with a read outside the batch, and must find that.
    first, failing, *_ = stores
    writer = _writer(first)
    inside, go = threading.Event(), threading.Event()
    seen: list[list[str]] = []

    def holds_the_writer() -> None:
        with first._tx() as tx:
            first._append(tx, "kept", ev.Paced.prepared({}), T0)
            inside.set()
            go.wait(10)

    def fails() -> None:
        try:
            with failing._tx() as tx:
                failing._append(tx, "lost", ev.Paced.prepared({}), T0)
                raise ValueError("conflicts with what the batch holds")
        except ValueError:
            seen.append(sorted({r.log_id for r in failing.audit_records()}))

    threads = [threading.Thread(target=holds_the_writer), threading.Thread(target=fails)]
    threads[0].start()
    inside.wait(10)
    with writer._count:
        writer._queued += 1  # another joiner on its way: the batch stays open after the failing body
    threads[1].start()
    _queued(writer, 2)
    go.set()
    for thread in threads:
        thread.join(10)
    with writer._count:
        writer._queued -= 1
    assert seen == [["kept"]]
    _audit_ok(first)


class _FailingCommit:
    """The writer's connection, except that COMMIT fails as a full disk would make it."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, query: str, params: Any = ()) -> Any:
        if query == "COMMIT":
            raise OSError("disk full")
        return self._conn.execute(query, params)

    @property
    def in_transaction(self) -> bool:
        return bool(self._conn.in_transaction)

    def close(self) -> None:
        self._conn.close()


def test_a_commit_that_fails_fails_every_caller_of_its_batch_and_keeps_nothing(stores: list[SQLiteStore]) -> None:
    first = stores[0]
    writer = _writer(first)
    real = writer._conn
    writer._conn = _FailingCommit(real)  # type: ignore[assignment]
    try:
        with pytest.raises(StoreError, match="could not commit: disk full"):
            first.append("doomed", ev.Paced.prepared({}), T0)
    finally:
        writer._conn = real
    assert list(first.audit_records()) == [] and first.audit_heads() == []
    first.append("after", ev.Paced.prepared({}), T0)  # the writer is usable again
    assert [r.log_id for r in first.audit_records()] == ["after"]


def test_the_last_store_to_close_closes_the_writer(tmp_path: Path) -> None:
    keys = load_or_create_keys(tmp_path / "home")
    a, b = SQLiteStore(tmp_path / "s.db", keys=keys), SQLiteStore(tmp_path / "s.db", keys=keys)
    writer = _writer(a)
    a.close()
    b.append("still", ev.Paced.prepared({}), T0)  # b's writer is the same and still open
    b.close()
    assert writer.refs == 0
    with pytest.raises(StoreError, match="closed"):
        b.append("late", ev.Paced.prepared({}), T0)


# -- review: defects found in the group writer, each driven to its interleaving ---------------------------


def _limit_pages(store: SQLiteStore, extra: int) -> None:
    """The file may grow by `extra` pages only: SQLite then fails a write with SQLITE_FULL, as a full disk does,
    and rolls back the whole transaction (not just the statement), savepoints and all."""
    conn = _writer(store)._conn
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    conn.execute(f"PRAGMA max_page_count={pages + extra}")


def _unlimit_pages(store: SQLiteStore) -> None:
    _writer(store)._conn.execute("PRAGMA max_page_count=1073741823")


def _audit_ok(store: SQLiteStore) -> None:
    assert store.keys is not None
    report = verify(store.audit_records(), [], store.keys.public_key, heads=store.audit_heads())
    assert report.ok, report.problems


def test_a_full_disk_in_a_lone_body_leaves_no_half_open_batch(stores: list[SQLiteStore]) -> None:
    first = stores[0]
    _limit_pages(first, 2)
    try:
        with pytest.raises(StoreError, match="full"):
            first.append("huge", ev.Paced.prepared({"blob": "x" * 200_000}), T0)
    finally:
        _unlimit_pages(first)
    first.append("after", ev.Paced.prepared({}), T0)  # a new batch with its own BEGIN, not the one SQLite rolled back
    assert [r.log_id for r in first.audit_records()] == ["after"]
    assert [h.records for h in first.audit_heads()] == [1]
    _audit_ok(first)


@pytest.mark.usefixtures("patient")
def test_a_full_disk_in_one_body_fails_every_body_of_its_batch_and_writes_no_head(stores: list[SQLiteStore]) -> None:
    first, second, *_ = stores
    inside, go = threading.Event(), threading.Event()
    errors: dict[str, BaseException] = {}

    def holds_the_writer() -> None:
        try:
            with first._tx() as tx:
                first._append(tx, "small", ev.Paced.prepared({}), T0)
                inside.set()
                go.wait(GUARD)
        except BaseException as exc:
            errors["small"] = exc

    def too_big() -> None:
        try:
            second.append("huge", ev.Paced.prepared({"blob": "x" * 200_000}), T0)
        except BaseException as exc:
            errors["huge"] = exc

    _limit_pages(first, 10)
    try:
        threads = [threading.Thread(target=holds_the_writer), threading.Thread(target=too_big)]
        threads[0].start()
        inside.wait(GUARD)
        threads[1].start()
        _queued(_writer(first), 1)
        go.set()
        for thread in threads:
            thread.join(GUARD)
    finally:
        _unlimit_pages(first)
    # SQLite rolled back the whole batch: the first body is gone too, so its caller must not return as if durable
    assert isinstance(errors.get("small"), StoreError) and isinstance(errors.get("huge"), StoreError), errors
    assert "full" in str(errors["small"]) and "full" in str(errors["huge"])  # each is told why
    assert list(first.audit_records()) == [] and first.audit_heads() == []
    first.append("after", ev.Paced.prepared({}), T0)
    _audit_ok(first)


def _newest_head_in_a_batch(first: SQLiteStore, second: SQLiteStore, log_id: str) -> tuple[Any, Any]:
    """`second.newest_head()` asked while `first` holds the writer with a record of `log_id` appended, so it
    joins the batch that commits that record: what it returned."""
    inside, go = threading.Event(), threading.Event()
    got: list[tuple[Any, Any] | None] = []

    def holds_the_writer() -> None:
        with first._tx() as tx:
            first._append(tx, log_id, ev.Paced.prepared({}), T0)
            inside.set()
            go.wait(GUARD)

    threads = [
        threading.Thread(target=holds_the_writer),
        threading.Thread(target=lambda: got.append(second.newest_head())),
    ]
    threads[0].start()
    inside.wait(GUARD)
    threads[1].start()
    _queued(_writer(first), 1)
    go.set()
    for thread in threads:
        thread.join(GUARD)
    (newest,) = got
    assert newest is not None
    return newest


@pytest.mark.usefixtures("patient")
def test_newest_head_in_a_batch_returns_the_state_its_head_fixes(stores: list[SQLiteStore]) -> None:
    first, second, *_ = stores
    first.append("committed", ev.Paced.prepared({}), T0)
    head, state = _newest_head_in_a_batch(first, second, "in-batch")
    # a witness file pairs them: the head must cover exactly these logs and records, not an earlier body's too
    assert (head.logs, head.records) == (len(state), sum(seq for seq, _ in state.values())), (head, state)
    assert head.counter == first.audit_heads()[-1].counter
    _audit_ok(first)


def _blocked(mine: GroupWriter, theirs: GroupWriter) -> bool:
    """The other store's transaction waits: queued to join this batch, or (its own writer) inside BEGIN IMMEDIATE."""
    return mine._queued > 0 or (theirs is not mine and theirs._mutex.locked())


@pytest.mark.parametrize("other_signs", [True, False], ids=["another-signing-key", "no-signing-key"])
def test_stores_with_other_signing_keys_on_one_file_never_share_a_head(tmp_path: Path, other_signs: bool) -> None:
    mine = load_or_create_keys(tmp_path / "home-a")
    theirs = load_or_create_keys(tmp_path / "home-b")
    if not other_signs:
        theirs = AuditKeys(cipher_key=theirs.cipher_key, signing_key=None, public_key=mine.public_key)
    a, b = SQLiteStore(tmp_path / "s.db", keys=mine), SQLiteStore(tmp_path / "s.db", keys=theirs)
    inside, go = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def holds_the_writer() -> None:
        try:
            with a._tx() as tx:
                a._append(tx, "by-a", ev.Paced.prepared({}), T0)
                inside.set()
                go.wait(GUARD)
        except BaseException as exc:
            errors.append(exc)

    def other() -> None:
        try:
            if other_signs:
                b.append("by-b", ev.Paced.prepared({}), T0)
            else:
                b.newest_head()  # a write transaction that appends nothing (a verifier's machine)
        except BaseException as exc:
            errors.append(exc)

    try:
        threads = [threading.Thread(target=holds_the_writer), threading.Thread(target=other)]
        threads[0].start()
        inside.wait(GUARD)
        threads[1].start()
        deadline = time.monotonic() + GUARD
        while not _blocked(_writer(a), _writer(b)):
            assert time.monotonic() < deadline, "the other store never waited"
            time.sleep(0.001)
        go.set()
        for thread in threads:
            thread.join(GUARD)
        if other_signs:
            # The other key never signs a head of this file: no rotation links it to the key of the heads there
            # (`_refuse_another_key`), and its body was refused whole, alone.
            (refused,) = errors
            assert isinstance(refused, StoreError) and key_id_of(theirs.public_key) in str(refused), refused
        else:
            assert errors == []
        for head in a.audit_heads():
            logs = {log_id for log_id, _, _ in json.loads(head.changes)}
            assert logs == {"by-a"} and head.key_id == key_id_of(mine.public_key), head
    finally:
        a.close()
        b.close()


def test_closing_the_last_store_while_a_body_runs_lets_its_batch_commit(stores: list[SQLiteStore]) -> None:
    first, *others = stores
    writer = _writer(first)
    inside, go = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def holds_the_writer() -> None:
        try:
            with first._tx() as tx:
                first._append(tx, "in-flight", ev.Paced.prepared({}), T0)
                inside.set()
                go.wait(GUARD)
        except BaseException as exc:
            errors.append(exc)

    body = threading.Thread(target=holds_the_writer)
    body.start()
    inside.wait(GUARD)
    for store in others:
        store.close()
    closer = threading.Thread(target=first.close)
    closer.start()
    closer.join(0.5)  # the fixed writer waits for the open batch; a broken one has closed the connection by now
    go.set()
    body.join(GUARD)
    closer.join(GUARD)
    assert errors == [] and writer.refs == 0
    reader = SQLiteStore(first.path, keys=first.keys)
    try:
        assert [r.log_id for r in reader.audit_records()] == ["in-flight"]
        _audit_ok(reader)
    finally:
        reader.close()
    stores[:] = []  # closed here already


class _InterruptAfterCommit(_FailingCommit):
    """The writer's connection, except that Ctrl-C lands just as COMMIT returns: sqlite3 runs no Python while
    it commits, so that is where a KeyboardInterrupt in the committing thread surfaces."""

    def execute(self, query: str, params: Any = ()) -> Any:
        result = self._conn.execute(query, params)
        if query == "COMMIT":
            raise KeyboardInterrupt
        return result


@pytest.mark.usefixtures("patient")
def test_an_interrupt_as_the_commit_returns_tells_no_caller_its_durable_body_failed(stores: list[SQLiteStore]) -> None:
    first, second, *_ = stores
    writer = _writer(first)
    real = writer._conn
    inside, go = threading.Event(), threading.Event()
    outcome: dict[str, BaseException | None] = {}

    def holds_the_writer() -> None:
        try:
            with first._tx() as tx:
                first._append(tx, "first", ev.Paced.prepared({}), T0)
                inside.set()
                go.wait(GUARD)
            outcome["first"] = None
        except BaseException as exc:
            outcome["first"] = exc

    def commits_last() -> None:
        try:
            second.append("second", ev.Paced.prepared({}), T0)
            outcome["second"] = None
        except BaseException as exc:
            outcome["second"] = exc

    writer._conn = _InterruptAfterCommit(real)  # type: ignore[assignment]
    try:
        threads = [threading.Thread(target=holds_the_writer), threading.Thread(target=commits_last)]
        threads[0].start()
        inside.wait(GUARD)
        threads[1].start()
        _queued(writer, 1)
        go.set()
        for thread in threads:
            thread.join(GUARD)
    finally:
        writer._conn = real
    # both bodies are on disk: the member that did not commit returns; the interrupted thread sees its interrupt
    assert outcome["first"] is None and isinstance(outcome["second"], KeyboardInterrupt), outcome
    assert sorted(r.log_id for r in first.audit_records()) == ["first", "second"]
    _audit_ok(first)
    first.append("after", ev.Paced.prepared({}), T0)
    _audit_ok(first)


class _InterruptOnce:
    """The writer's queue counter lock, except that a KeyboardInterrupt lands on its `at`-th use: the second
    use in a transaction is the one just after the writer's mutex was taken, where Ctrl-C may surface too."""

    def __init__(self, at: int) -> None:
        self._lock = threading.Lock()
        self._uses = 0
        self._at = at

    def __enter__(self) -> None:
        self._uses += 1
        if self._uses == self._at:
            raise KeyboardInterrupt
        self._lock.acquire()

    def __exit__(self, *_: object) -> None:
        self._lock.release()


def test_an_interrupt_just_after_taking_the_writer_leaves_it_free_and_the_queue_right(
    stores: list[SQLiteStore],
) -> None:
    first = stores[0]
    writer = _writer(first)
    real = writer._count
    writer._count = _InterruptOnce(2)  # type: ignore[assignment]
    try:
        with pytest.raises(KeyboardInterrupt):
            first.append("interrupted", ev.Paced.prepared({}), T0)
    finally:
        writer._count = real
    assert writer._queued == 0  # or every later batch would wait for a joiner that never comes
    after = threading.Thread(target=first.append, args=("after", ev.Paced.prepared({}), T0), daemon=True)
    after.start()
    after.join(GUARD)
    assert not after.is_alive(), "the writer's mutex was left held: every later write hangs"
    assert [r.log_id for r in first.audit_records()] == ["after"]


def test_a_batch_whose_awaited_joiner_never_comes_is_committed_by_its_waiting_member(
    stores: list[SQLiteStore],
) -> None:
    first = stores[0]
    writer = _writer(first)
    inside, go = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def holds_the_writer() -> None:
        try:
            with first._tx() as tx:
                first._append(tx, "waits", ev.Paced.prepared({}), T0)
                inside.set()
                go.wait(GUARD)
        except BaseException as exc:
            errors.append(exc)

    body = threading.Thread(target=holds_the_writer)
    body.start()
    inside.wait(GUARD)
    with writer._count:
        writer._queued += 1  # a thread queued to join, then interrupted before it took the writer
    go.set()
    body.join(GUARD)
    with writer._count:
        writer._queued -= 1
    assert not body.is_alive() and errors == []
    assert [r.log_id for r in first.audit_records()] == ["waits"]
    _audit_ok(first)


@pytest.mark.usefixtures("patient")
def test_an_upgraded_stores_first_head_in_a_batch_covers_every_log_once(stores: list[SQLiteStore]) -> None:
    first, second, *_ = stores
    first.append_many([("old", ev.Paced.prepared({"i": 1})), ("old", ev.Paced.prepared({"i": 2}))], T0)
    with sqlite3.connect(first.path, isolation_level=None) as conn:  # as schema 2 left it: records, no heads
        conn.execute("DELETE FROM audit_heads")
        conn.execute("INSERT INTO audit_heads_pending (records) VALUES (2)")
    conn.close()
    assert first.heads_pending()
    head, state = _newest_head_in_a_batch(first, second, "new")
    assert (head.counter, head.logs, head.records) == (1, 2, 3) and state == {
        log_id: (seq, h) for log_id, seq, h in json.loads(head.changes)
    }
    assert not first.heads_pending() and len(first.audit_heads()) == 1
    _audit_ok(first)


def test_a_forked_child_opens_a_writer_of_its_own(stores: list[SQLiteStore]) -> None:
    """multiprocessing forks on Linux: a store the child opens must not get the parent's writer from the registry
    (a connection SQLite forbids across fork, and locks a parent's thread may hold), and a store the child
    inherited is refused with a clear message. (A fork while the parent is inside a write transaction also
    copies SQLite's own lock bookkeeping; SQLite forbids that, and it is no business of this module.)"""
    first = stores[0]
    first.append("parent", ev.Paced.prepared({}), T0)
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            child = SQLiteStore(first.path, keys=first.keys)
            code = 2 if child._writer is _writer(first) else 0
            child.append("child", ev.Paced.prepared({}), T0)
            child.close()
            try:
                first.append(
                    "inherited", ev.Paced.prepared({}), T0
                )  # the parent's store: refused, not run on its writer
                code = 3
            except StoreError as exc:
                code = code if "another process" in str(exc) else 4
        finally:
            os._exit(code)
    deadline = time.monotonic() + GUARD
    while (waited := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if waited[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung")
    assert os.waitstatus_to_exitcode(waited[1]) == 0
    assert sorted(r.log_id for r in first.audit_records()) == ["child", "parent"]
    first.append("parent-again", ev.Paced.prepared({}), T0)  # the parent's writer is untouched by the child
    _audit_ok(first)


def test_a_lock_held_elsewhere_past_the_busy_timeout_is_a_store_error_and_leaves_the_writer_usable(
    stores: list[SQLiteStore], tmp_path: Path
) -> None:
    store = stores[0]
    _writer(store)._conn.execute("PRAGMA busy_timeout=50")  # 30 s in use: the wait itself is not the point here
    other = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's long write (an enqueue of a big file, a backup)
    try:
        with pytest.raises(StoreError, match="locked by another") as raised:
            store.append("log-0", ev.Paced.prepared({"i": 0}), T0)
        assert "nothing was written" in str(raised.value)
    finally:
        other.execute("ROLLBACK")
        other.close()
    store.append("log-0", ev.Paced.prepared({"i": 1}), T0)
    assert [e.data["i"] for e in store.events("log-0")] == [1]


def test_a_file_that_refuses_writes_is_a_store_error_naming_it_and_nothing_is_written(
    stores: list[SQLiteStore], tmp_path: Path
) -> None:
    store = stores[0]
    writer = _writer(store)
    writer._conn.execute("PRAGMA query_only=ON")  # what a read-only file or volume answers: SQLITE_READONLY
    try:
        with pytest.raises(StoreError, match=r"refused the write .*readonly") as raised:
            store.append("log-0", ev.Paced.prepared({"i": 0}), T0)
        assert str(tmp_path / "state.db") in str(raised.value)
    finally:
        writer._conn.execute("PRAGMA query_only=OFF")
    inside: list[str] = []
    # the same refusal from a statement inside a body: rolled back to its savepoint
    with pytest.raises(StoreError, match=r"refused the write .*readonly"), store._tx() as tx:
        tx.execute("PRAGMA query_only=ON")
        try:
            store._append(tx, "log-1", ev.Paced.prepared({"i": 1}), T0)
        finally:
            tx.execute("PRAGMA query_only=OFF")
            inside.append("ran")
    assert inside == ["ran"]
    store.append("log-2", ev.Paced.prepared({"i": 2}), T0)
    assert [r.log_id for r in store.audit_records()] == ["log-2"]
