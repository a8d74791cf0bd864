"""`find_job`: every operation of one job under one contract, newest first, from an index on both backends.

The admission rule "never a fresh budget for an existing operation of the same job" asks this before it
creates an operation, so it must be exact (contract and job both match) and cheap (an index, not a scan).
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from pollwarden import events as ev
from pollwarden.core.contract.parse import parse_contract
from pollwarden.core.record import new_record
from pollwarden.store.base import OperationExists, StoreError
from pollwarden.store.migrations import migrations
from pollwarden.store.postgres import PostgresStore
from pollwarden.store.sqlite import SQLiteStore
from tests.conftest import run_cli

from .conftest import AnyStore
from .test_schema import SHIPPED_SCHEMA_1

T0 = datetime(2026, 4, 18, 10, 20, tzinfo=UTC)


def _contract(name: str) -> str:
    return (
        f'name = "{name}"\nstatus_url = "http://127.0.0.1:9/jobs/{{job_id}}"\n'
        '[states]\npending = ["running"]\nsuccess = ["succeeded"]\nfailure = ["failed"]\n[fields]\nstate = "state"\n'
    )


def _create(store: AnyStore, contract: str, op: str, job: str, minutes: int) -> None:
    text = _contract(contract)
    record = new_record(parse_contract(text), operation_id=op, job_id=job, now=T0 + timedelta(minutes=minutes))
    store.create(record, text, ev.Created.prepared({"job": job}))


def _create_unchecked(store: AnyStore, contract: str, op: str, job: str, minutes: int) -> None:
    """A row as a database written before a job's second operation was refused may hold one."""
    text = _contract(contract)
    record = new_record(parse_contract(text), operation_id=op, job_id=job, now=T0 + timedelta(minutes=minutes))
    with store._tx() as tx:  # type: ignore[attr-defined]
        store._insert_operations(tx, [(record, text)])  # type: ignore[attr-defined]


def test_the_operations_of_a_job_come_newest_first_and_nothing_else(store: AnyStore) -> None:
    _create(store, "exports", "op-new", "exp_71c", 5)
    _create_unchecked(store, "exports", "op-old", "exp_71c", 0)
    _create_unchecked(store, "exports", "op-mid", "exp_71c", 2)
    _create(store, "exports", "op-other-job", "exp_72d", 1)
    _create(store, "imports", "op-other-contract", "exp_71c", 3)
    found = store.find_job("exports", "exp_71c")
    assert [s.record.operation_id for s in found] == ["op-new", "op-mid", "op-old"]
    assert all(s.record.contract_name == "exports" and s.record.job_id == "exp_71c" for s in found)
    assert store.find_job("exports", "exp_99z") == []
    assert store.find_job("Exports", "exp_71c") == []  # names are exact, not folded


def test_a_second_operation_of_one_job_is_refused_by_the_transaction_that_writes_it(store: AnyStore) -> None:
    # The look-up before a create is a read: two creators may both find nothing. The write decides.
    _create(store, "exports", "op-first", "exp_71c", 0)
    with pytest.raises(OperationExists, match="job exp_71c of exports already has operation op-first"):
        _create(store, "exports", "op-second", "exp_71c", 1)
    text = _contract("exports")
    twice = [
        (
            new_record(parse_contract(text), operation_id=op, job_id="exp_72d", now=T0),
            text,
            ev.Created.prepared({"job": "exp_72d"}),
        )
        for op in ("op-a", "op-b")
    ]
    with pytest.raises(OperationExists, match="job exp_72d of exports is given twice"):
        store.create_many(twice)
    _create(store, "imports", "op-other-contract", "exp_71c", 2)  # the same job id under another contract
    assert sorted(s.record.operation_id for s in store.all()) == ["op-first", "op-other-contract"]
    assert {r.log_id for r in store.audit_records()} == {"op-first", "op-other-contract"}


def test_sqlite_answers_from_the_job_index(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "x.db").close()
    with sqlite3.connect(tmp_path / "x.db") as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT record FROM operations WHERE contract_name = ? AND job_id = ?", ("c", "j")
        ).fetchall()
    assert any("operations_job" in str(row[-1]) for row in plan), plan


def test_a_file_of_schema_1_gets_the_index_when_it_is_opened(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(SHIPPED_SCHEMA_1)
    store = SQLiteStore(path)
    try:
        assert store.find_job("exports", "exp_71c") == []
    finally:
        store.close()
    with sqlite3.connect(path) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "operations_job" in names


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_a_database_of_schema_1_is_upgraded_by_db_upgrade(empty_pg_url: str, tmp_path: Path) -> None:
    # A database as `pollwarden db upgrade` of schema 1 left it, with an operation in it.
    with psycopg.connect(empty_pg_url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute(migrations()[0].sql("postgresql").encode())
        conn.execute("INSERT INTO schema_migrations (version) VALUES (1)")
    with pytest.raises(StoreError, match="pollwarden db upgrade"):
        PostgresStore(empty_pg_url)
    ran = run_cli("db", "upgrade", "--db", empty_pg_url, home=tmp_path / "home")
    assert ran.code == 0, ran.stderr
    with psycopg.connect(empty_pg_url) as conn:
        row = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'operations_job'").fetchone()
    assert row is not None and "(contract_name, job_id)" in row[0]
    store = PostgresStore(empty_pg_url)
    try:
        assert store.find_job("exports", "exp_71c") == []
    finally:
        store.close()


def test_every_spelling_of_one_job_is_admitted_as_its_one_operation(store: AnyStore) -> None:
    """Issue 23 on both backends: admission looks the job up by its canonical spelling, so the store is asked
    for, and finds, the one operation however the job was spelt (an Azure monitor URL, a GitHub run id)."""
    from pollwarden.catalogue import shipped_contract
    from pollwarden.core.admission import WatchRequest
    from pollwarden.engine import Engine
    from tests.conftest import install

    engine = Engine(store, owner="test", clock=lambda: T0)
    azure = shipped_contract("azure-operation", {"base_url": "https://res.example.com"})
    install(store, azure)
    base = "https://res.example.com/formrecognizer/documentModels/m/analyzeResults/AB12"
    spellings = [f"{base}?api-version=1", f"{base}/?x=1&api-version=1", f"{base.upper()[:8]}{base[8:]}?%61pi-version=1"]
    admitted = [engine.admit(WatchRequest(azure, None, status_location=url, agent=True)) for url in spellings]
    assert [one.created for one in admitted] == [True, False, False]
    assert {one.record.operation_id for one in admitted} == {admitted[0].record.operation_id}
    github = shipped_contract("github-actions-run", {"repo": "acme/app"})
    install(store, github)
    runs = [engine.admit(WatchRequest(github, job)) for job in ("042", "+42", "42.0")]
    assert [one.created for one in runs] == [True, False, False] and runs[0].record.job_id == "42"
    assert [stored.record.job_id for stored in store.find_job("github-actions-run", "42")] == ["42"]
