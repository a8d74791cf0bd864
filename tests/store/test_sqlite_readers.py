"""One SQLite store used by many threads at once (the Python API's watches of one home share one): each read has
a connection of its own, so a snapshot on one thread is neither joined nor ended by another thread's reads."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pollwarden import events as ev
from pollwarden.audit import load_or_create_keys
from pollwarden.store.base import StoreError
from pollwarden.store.sqlite import SQLiteStore
from tests.store.test_store import CONTRACT, _record


def test_a_snapshot_on_one_thread_is_not_shared_with_another_threads_reads(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db", keys=load_or_create_keys(tmp_path / "home"))
    try:
        store.create(_record("before"), CONTRACT, ev.Created.prepared({}))
        inside, written, done = threading.Event(), threading.Event(), threading.Event()
        seen: dict[str, object] = {}

        def snapshot() -> None:
            try:
                with store.audit_snapshot() as snap:
                    seen["first"] = sum(1 for _ in snap.records())
                    inside.set()
                    written.wait(30)
                    seen["again"] = sum(1 for _ in snap.records())  # one snapshot: the later write is not in it
                done.set()
            finally:
                inside.set()

        thread = threading.Thread(target=snapshot)
        thread.start()
        assert inside.wait(30)
        store.create(_record("after"), CONTRACT, ev.Created.prepared({}))  # while the other thread's snapshot is open
        # This thread's reads see the write (they are not inside the other thread's transaction), and a second
        # snapshot can begin (a shared connection refused it: "cannot start a transaction within a transaction").
        assert store.get("after") is not None
        with store.audit_snapshot() as mine:
            mine_rows = sum(1 for _ in mine.records())
        written.set()
        thread.join(30)
        assert done.is_set()
        assert seen["first"] == seen["again"] == 1 and mine_rows == 2
    finally:
        store.close()


def test_many_threads_reading_and_writing_one_store(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db", keys=load_or_create_keys(tmp_path / "home"))
    errors: list[BaseException] = []
    start = threading.Barrier(16)

    def work(n: int) -> None:
        try:
            start.wait(30)
            for i in range(10):
                store.create(_record(f"op-{n}-{i}"), CONTRACT, ev.Created.prepared({"n": n}))
                assert store.get(f"op-{n}-{i}") is not None
                with store.audit_snapshot() as snap:
                    assert sum(1 for _ in snap.records()) >= i + 1
        except BaseException as exc:  # the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert errors == []
        assert len(store.all()) == 160
    finally:
        store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get("op-0-0")
