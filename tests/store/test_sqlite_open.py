"""Many processes and threads opening one brand-new SQLite file at once: none sees "database is locked"."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = """
import sys, time
from pathlib import Path
from pollwarden.store.sqlite import SQLiteStore
me, files = sys.argv[1], [Path(arg) for arg in sys.argv[2:]]
for path in files:  # each round's file once its `.go` exists: the imports are done, the opens start together
    go, guard = path.with_suffix(".go"), time.monotonic() + 60
    while not go.exists():
        assert time.monotonic() < guard, "never told to go"
        time.sleep(0.001)
    SQLiteStore(path).close()
    path.with_suffix(f".{me}.done").touch()
"""


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_concurrent_first_opens_all_succeed(tmp_path: Path) -> None:
    """Eight processes, three rounds: in each, all eight open one brand-new file at once. Each process imports
    once and waits for its round's go (a file), so the opens start together, not staggered by the imports."""
    files = [tmp_path / f"new-{round_no}.db" for round_no in range(3)]
    procs = [
        subprocess.Popen([sys.executable, "-c", SCRIPT, str(n), *map(str, files)], stderr=subprocess.PIPE, text=True)
        for n in range(8)
    ]
    try:
        for path in files:
            path.with_suffix(".go").touch()
            guard = time.monotonic() + 60
            # Until all eight have opened it, or one has ended (its exit code and stderr are the failure).
            while not all(path.with_suffix(f".{n}.done").exists() for n in range(8)):
                if any(p.poll() is not None for p in procs):
                    break
                assert time.monotonic() < guard, f"the opens of {path.name} never finished"
                time.sleep(0.005)
        errors = [p.communicate(timeout=60)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0] * 8, errors
    assert all(path.with_suffix(f".{n}.done").exists() for path in files for n in range(8))


def test_opening_waits_for_a_writer_instead_of_failing(tmp_path: Path) -> None:
    import sqlite3
    import threading

    from pollwarden.store.sqlite import SQLiteStore

    path = tmp_path / "busy.db"
    SQLiteStore(path).close()
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("BEGIN IMMEDIATE")
    timer = threading.Timer(0.5, lambda: writer.execute("COMMIT"))
    timer.start()
    # Another process is mid-write: opening a current file only reads, so it neither waits nor fails, and
    # writing through the new store waits for that writer instead of reporting a broken database.
    opened = SQLiteStore(path)
    with opened._tx() as tx:
        tx.execute("UPDATE meta SET value = value WHERE key = 'schema_version'")
    opened.close()
    timer.join()
    writer.close()
