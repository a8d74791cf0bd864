"""`pollwarden enqueue --jobs-file` end to end: the real command on SQLite and PostgreSQL, standard input, the
prefix, a re-run that creates nothing twice, a conflict that enqueues nothing, and a kill -9 between batches.

(Bad files are refused before a store is opened: tests/cli/test_jobs_file.py has them, in process.)
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from pollwarden.cli.app import main
from pollwarden.core.admission import WatchRequest
from pollwarden.core.contract.parse import load_contract
from pollwarden.engine import BATCH, Engine
from pollwarden.store.base import Store
from tests.conftest import Ran, install, run_cli, write_contract
from tests.e2e.conftest import store_of as _store

pytestmark = pytest.mark.slow


# `db` (tests/e2e/conftest.py): each test that takes it runs on SQLite and on PostgreSQL.


def _enqueue(db: str, home: Path, *args: str, stdin: bytes | None = None) -> Ran:
    proc = subprocess.run(
        [sys.executable, "-m", "pollwarden", "enqueue", "--db", db, *args],
        input=stdin,
        capture_output=True,
        env={**os.environ, "POLLWARDEN_HOME": str(home)},
        timeout=120,
    )
    return Ran(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def _installed(db: str, home: Path, contract: Path) -> Path:
    """What an operator does first: workers run installed contract versions only, and enqueue never installs."""
    store = _store(db, home)
    try:
        install(store, load_contract(contract))
    finally:
        store.close()
    return contract


def _one_enqueued(db: str, home: Path, contract: Path, job: str, operation: str) -> None:
    """What one `enqueue --job JOB --operation OP` does, without a process to start."""
    store = _store(db, home)
    try:
        request = WatchRequest(load_contract(contract), job, operation, by="enqueue")
        assert Engine(store, owner="test", clock=store.db_now).admit(request).created
    finally:
        store.close()


def _created(store: Store) -> Counter[str]:
    """`created` audit records per log: exactly one per operation, whatever ran how often."""
    return Counter(record.log_id for record in store.audit_records() if record.kind == "created")


def test_a_jobs_file_enqueues_each_job_once_with_the_flags_limits_and_a_rerun_creates_nothing(
    db: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    contract = _installed(db, home, write_contract(tmp_path / "c.toml", "http://127.0.0.1:9"))
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("# nightly exports\n" + "".join(f"exp_{n}\r\n" for n in range(40)) + "\n", encoding="utf-8")
    flags = ("--contract", str(contract), "--jobs-file", str(jobs), "--operation-prefix", "nightly")
    ran = _enqueue(db, home, *flags, "--deadline", "10m", "--max-requests", "3")
    assert ran.code == 0, ran.stderr
    assert (
        ran.stdout.strip() == f"enqueued 40 operations from {jobs}: first nightly-1 (line 2), last nightly-40 (line 41)"
    )
    store = _store(db, home)
    try:
        stored = {s.record.operation_id: s.record for s in store.all()}
        assert {op: r.job_id for op, r in stored.items()} == {f"nightly-{n + 1}": f"exp_{n}" for n in range(40)}
        assert {r.deadline_at - r.created_at for r in stored.values()} == {timedelta(minutes=10)}
        assert {r.plan.max_status_requests for r in stored.values()} == {3}
        assert _created(store) == Counter({op: 1 for op in stored})
        assert store.events("nightly-7")[0].data["created_by"] == "enqueue"
        monkeypatch.setenv("POLLWARDEN_DB", db)  # main() sets it from --db; this puts it back afterwards
        assert main(["enqueue", "--db", db, "--home", str(home), *flags]) == 0  # in process: one start less
        assert capsys.readouterr().out.strip() == (
            f"nothing new was created: all 40 jobs of {jobs} were already enqueued (first nightly-1, last nightly-40)"
        )
        with jobs.open("a", encoding="utf-8") as more:
            more.write("exp_40\nexp_41\n")
        grown = _enqueue(db, home, *flags)
        assert grown.code == 0, grown.stderr
        assert grown.stdout.strip() == (
            f"enqueued 2 operations from {jobs}: first nightly-41 (line 43), last nightly-42 (line 44);"
            " 40 already enqueued (the first: nightly-1, line 2), nothing new was created for them"
        )
        assert _created(store) == Counter({f"nightly-{n}": 1 for n in range(1, 43)})
    finally:
        store.close()


def test_standard_input_without_a_prefix_gets_generated_ids_and_an_existing_job_its_operation(
    db: str, home: Path, tmp_path: Path
) -> None:
    contract = _installed(db, home, write_contract(tmp_path / "c.toml", "http://127.0.0.1:9"))
    _one_enqueued(db, home, contract, "b", "mine")
    ran = _enqueue(db, home, "--contract", str(contract), "--jobs-file", "-", stdin=b"a\nb\nc\n")
    assert ran.code == 0, ran.stderr
    store = _store(db, home)
    try:
        by_job = {s.record.job_id: s.record.operation_id for s in store.all()}
        assert by_job["b"] == "mine" and len(by_job) == 3
        assert by_job["a"].startswith("exports-") and by_job["c"].startswith("exports-")
        assert ran.stdout.strip() == (
            f"enqueued 2 operations from standard input: first {by_job['a']} (line 1), last {by_job['c']} (line 3);"
            " 1 already enqueued (the first: mine, line 2), nothing new was created for them"
        )
        assert _created(store) == Counter({op: 1 for op in by_job.values()})
    finally:
        store.close()


def test_a_job_watched_by_another_operation_refuses_the_file_and_is_audited_on_that_operation(
    db: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    contract = _installed(db, home, write_contract(tmp_path / "c.toml", "http://127.0.0.1:9"))
    _one_enqueued(db, home, contract, "b", "mine")
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("a\n\nb\nc\n", encoding="utf-8")
    monkeypatch.setenv("POLLWARDEN_DB", db)  # main() sets it from --db; this puts it back afterwards
    args = ["enqueue", "--db", db, "--home", str(home), "--contract", str(contract), "--jobs-file", str(jobs)]
    assert main([*args, "--operation-prefix", "bulk"]) == 2  # in process: the refusal is the same code path
    assert capsys.readouterr().err.splitlines() == [
        f"pollwarden: {jobs}:3: job b is already watched by operation mine; resume that one (a second operation would"
        " be a fresh budget for the same job, which only a person's decision may grant)",
        f"pollwarden: error: --jobs-file {jobs}: 1 bad line (listed above); nothing was enqueued",
    ]
    store = _store(db, home)
    try:
        assert [s.record.operation_id for s in store.all()] == ["mine"]
        assert [e.kind for e in store.events("mine")] == ["created", "resume_refused"]  # as one enqueue leaves
    finally:
        store.close()


def test_a_kill_between_batches_leaves_whole_batches_and_the_same_command_continues(home: Path, tmp_path: Path) -> None:
    # Twenty batches: the kill must land before the last one is written, and it follows the first commit by as
    # long as this process is kept from running; with six (0.4 s of writing left) a loaded machine's stall of this
    # test alone let the enqueue finish first. Now some 1.5 s of writing are left, and load slows those too.
    count = BATCH * 20
    db = home / "pollwarden.db"
    contract = _installed(str(db), home, write_contract(tmp_path / "c.toml", "http://127.0.0.1:9"))
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("".join(f"exp_{n}\n" for n in range(count)), encoding="utf-8")
    command = [sys.executable, "-m", "pollwarden", "enqueue", "--contract", str(contract), "--jobs-file", str(jobs)]
    env = {**os.environ, "POLLWARDEN_HOME": str(home)}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # Waiting for a fact, not a time: the first batch committed, then kill -9 while later ones are written.
        deadline = time.monotonic() + 60
        while _operations(db) == 0 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()
    written = _operations(db)
    assert 0 < written < count, "the kill came after the last batch: nothing was tested"
    assert written % BATCH == 0, f"{written} operations: a batch was cut in half"
    store = _store(str(db), home)
    try:
        assert sum(_created(store).values()) == written  # each with its audit record, none without
        ran = run_cli("enqueue", "--contract", str(contract), "--jobs-file", str(jobs), home=home, timeout=120)
        assert ran.code == 0, ran.stderr
        assert f"enqueued {count - written} operations" in ran.stdout
        assert f"; {written} already enqueued" in ran.stdout
        created = _created(store)
        assert sum(created.values()) == count and set(created.values()) == {1}
        assert sorted(s.record.job_id for s in store.all()) == sorted(f"exp_{n}" for n in range(count))
    finally:
        store.close()


def _operations(db: Path) -> int:
    """The committed operations, read as any other process would (WAL: a reader never waits for the writer)."""
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute("SELECT count(*) FROM operations").fetchone()[0])
    except sqlite3.OperationalError:  # the file exists before its schema does
        return 0
