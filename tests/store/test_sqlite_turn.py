"""The write turn of a SQLite file (`store/sqlite_turn.py`) between real processes.

A holder is a real pollwarden store in a subprocess, stopped inside its write transaction (after BEGIN
IMMEDIATE) until the test lets it go; the other writer is a store of this process.
"""

from __future__ import annotations

import fcntl
import os
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pollwarden.store import sqlite_writer
from pollwarden.store.base import StoreError
from pollwarden.store.sqlite import SQLiteStore

HOLDER = """
import os, sys
from pathlib import Path
from pollwarden.store.sqlite import SQLiteStore
store = SQLiteStore(Path(sys.argv[1]))
with store._tx() as tx:
    tx.execute("INSERT INTO meta VALUES ('holder', ?)", (str(os.getpid()),))
    print("holding", flush=True)
    sys.stdin.readline()
store.close()
print("done", flush=True)
"""


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "pollwarden.db"
    SQLiteStore(path).close()
    return path


@pytest.fixture
def holder(db: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == "holding\n"
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait()


def _turn_is_held(db: Path) -> bool:
    fd = os.open(db.with_name(db.name + "-writer.lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _meta(db: Path, key: str) -> str | None:
    store = SQLiteStore(db)
    try:
        rows = store._fetchall("SELECT value FROM meta WHERE key = ?", (key,))
    finally:
        store.close()
    return None if not rows else str(rows[0][0])


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_a_writer_of_another_process_waits_for_the_turn_then_writes(db: Path, holder: subprocess.Popen[str]) -> None:
    assert _turn_is_held(db)  # from just before BEGIN IMMEDIATE ...
    store = SQLiteStore(db)
    seen: list[str | None] = []

    def write() -> None:
        with store._tx() as tx:
            row = tx.one("SELECT value FROM meta WHERE key = 'holder'")
            seen.append(None if row is None else str(row[0]))
            tx.execute("INSERT INTO meta VALUES ('second', 'x')")

    writer = threading.Thread(target=write)
    writer.start()
    writer.join(0.2)
    assert writer.is_alive()  # it cannot have written: the holder's transaction is open
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.stdout.readline() == "done\n"
    writer.join()
    store.close()
    assert seen == [str(holder.pid)]  # it began after the holder's COMMIT, and saw it
    assert not _turn_is_held(db)  # ... to just after COMMIT
    assert _meta(db, "second") == "x"


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_a_killed_holder_leaves_the_turn_to_the_next_writer(
    db: Path, holder: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(db)
    holder.kill()
    holder.wait()
    # No wait at all for the turn: a lock that outlived its holder would be refused at once.
    monkeypatch.setattr(sqlite_writer, "BUSY_TIMEOUT_S", 0.0)
    with store._tx() as tx:
        tx.execute("INSERT INTO meta VALUES ('after', 'x')")
    store.close()
    assert _meta(db, "holder") is None  # the killed transaction is gone, as SQLite always made it
    assert _meta(db, "after") == "x"
    assert db.with_name(db.name + "-writer.lock").exists()  # the file stays; its lock died with the process


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_a_stopped_holder_is_a_refusal_after_the_bound(
    db: Path, holder: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(db)
    holder.send_signal(signal.SIGSTOP)
    monkeypatch.setattr(sqlite_writer, "BUSY_TIMEOUT_S", 0.3)
    with pytest.raises(StoreError) as refused, store._tx() as tx:
        tx.execute("INSERT INTO meta VALUES ('refused', 'x')")
    message = str(refused.value)
    assert "locked by another process (pollwarden.db-writer.lock is held" in message
    assert "nothing was written" in message
    holder.send_signal(signal.SIGCONT)
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.stdout.readline() == "done\n"
    with store._tx() as tx:  # the same writer takes the turn again once it is free
        tx.execute("INSERT INTO meta VALUES ('later', 'x')")
    store.close()
    assert _meta(db, "refused") is None
    assert _meta(db, "later") == "x"


OPEN = """
import sys
from pathlib import Path
from pollwarden.store.sqlite import SQLiteStore
SQLiteStore(Path(sys.argv[1])).close()
"""


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_the_turn_file_is_private_whatever_the_umask(tmp_path: Path) -> None:
    new = tmp_path / "new.db"
    subprocess.run([sys.executable, "-c", OPEN, str(new)], check=True, umask=0, timeout=60)
    assert stat.S_IMODE(new.with_name("new.db-writer.lock").stat().st_mode) == 0o600
    loose = tmp_path / "old.db-writer.lock"  # one a looser pollwarden (or a person) left behind
    loose.touch()
    loose.chmod(0o666)
    subprocess.run([sys.executable, "-c", OPEN, str(tmp_path / "old.db")], check=True, umask=0, timeout=60)
    assert stat.S_IMODE(loose.stat().st_mode) == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user's takes root")
def test_a_turn_file_of_another_user_is_not_used(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    planted = tmp_path / "shared.db-writer.lock"
    planted.touch()
    os.chown(planted, 65534, 65534)  # nobody's: whoever planted it could hold it to stall this user's writes
    fd = os.open(planted, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held for good by "them"
        store = SQLiteStore(db)
        with store._tx() as tx:  # writes anyway, ordered by SQLite's own lock
            tx.execute("INSERT INTO meta VALUES ('mine', 'x')")
        store.close()
    finally:
        os.close(fd)
    assert _meta(db, "mine") == "x"


def test_a_forked_child_lets_go_of_the_turn_it_inherited_without_giving_it(db: Path) -> None:
    store = SQLiteStore(db)
    lock = str(db.with_name(db.name + "-writer.lock"))
    with store._tx() as tx:
        tx.execute("INSERT INTO meta VALUES ('parent', 'x')")
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: only os calls, then out
            held = [n for n in os.listdir("/proc/self/fd") if os.path.realpath(f"/proc/self/fd/{n}") == lock]
            os.write(write, b"kept" if held else b"closed")
            os._exit(0)
        os.close(write)
        answer = os.read(read, 16)
        os.close(read)
        os.waitpid(pid, 0)
        # Closed in the child (a parent killed later frees its turn), and not unlocked: the parent still holds it.
        assert answer == b"closed"
        assert _turn_is_held(db)
    store.close()
    assert not _turn_is_held(db)
