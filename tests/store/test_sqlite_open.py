"""Many processes and threads opening one brand-new SQLite file at once: none sees "database is locked"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import sys
from pathlib import Path
from pollwarden.store.sqlite import SQLiteStore
SQLiteStore(Path(sys.argv[1])).close()
"""


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_concurrent_first_opens_all_succeed(tmp_path: Path) -> None:
    for round_no in range(3):
        path = tmp_path / f"new-{round_no}.db"
        procs = [
            subprocess.Popen([sys.executable, "-c", SCRIPT, str(path)], stderr=subprocess.PIPE, text=True)
            for _ in range(8)
        ]
        errors = [p.communicate(timeout=60)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 8, errors


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
