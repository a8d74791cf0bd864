"""The contracts registry (schema 6): versions installed by digest, each install audited in its own log, and a
store upgraded from schema 5 adopting the contracts its operations already carry. Both backends."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from pollwarden import events as ev
from pollwarden.audit import verify
from pollwarden.audit.keys import load_or_create_keys
from pollwarden.core.contract.parse import parse_contract
from pollwarden.core.contract.vars import text_digest
from pollwarden.core.record import new_record
from pollwarden.store.migrations import ADOPTED_BY, LATEST, REGISTRY
from pollwarden.store.postgres import PostgresStore, upgrade_database
from pollwarden.store.sql_contracts import contract_log_id
from pollwarden.store.sqlite import SQLiteStore

from .conftest import AnyStore, Backend
from .test_store import CONTRACT
from .undo import UNDO, undone_after

T0 = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)

AFTER_SCHEMA_5 = undone_after(5)
"""What the schemas after 5 added, undone: a store as a schema-5 pollwarden left it."""


def test_every_schema_since_6_has_its_undoing_written() -> None:
    """The tests that upgrade an older store undo the schemas after it (`undo.UNDO`): a new one is added there."""
    assert sorted(UNDO) == list(range(6, LATEST + 1))


def test_a_version_is_installed_once_by_its_digest_with_one_audited_record(store: AnyStore) -> None:
    contract = parse_contract(CONTRACT)
    assert store.installed_contract(contract.digest) is None
    first, added = store.install_contract(
        "exports", contract.source_text, by="alice", at=T0, event=ev.ContractInstalled(by="alice")
    )
    assert added and first.digest == contract.digest == text_digest(CONTRACT)
    assert (first.name, first.installed_by, first.installed_at, first.text) == ("exports", "alice", T0, CONTRACT)
    again, added_again = store.install_contract(
        "exports", CONTRACT, by="bob", at=T0, event=ev.ContractInstalled(by="bob")
    )
    assert not added_again and again.installed_by == "alice"  # the first installer stays on record
    records = list(store.audit_records(contract_log_id(contract.digest)))
    assert [r.kind for r in records] == ["contract_installed"]
    assert [ev.parse(e.kind, e.data) for e in store.events(contract_log_id(contract.digest))] == [
        ev.ContractInstalled(by="alice")
    ]
    assert store.installed_contract(contract.digest) == first


def test_versions_are_listed_by_name_oldest_first(store: AnyStore) -> None:
    other = CONTRACT.replace('"running"', '"running", "queued"')
    store.install_contract("exports", other, by="bob", at=T0.replace(hour=11), event=ev.ContractInstalled())
    store.install_contract("exports", CONTRACT, by="alice", at=T0, event=ev.ContractInstalled())
    store.install_contract(
        "deploys", CONTRACT.replace("exports", "deploys"), by="carol", at=T0, event=ev.ContractInstalled()
    )
    assert [(c.name, c.installed_by) for c in store.installed_contracts()] == [
        ("deploys", "carol"),
        ("exports", "alice"),
        ("exports", "bob"),
    ]
    assert [c.digest for c in store.installed_contracts("exports")] == [text_digest(CONTRACT), text_digest(other)]
    assert store.installed_contracts("nothing") == []


def test_an_install_is_covered_by_the_signed_heads(store: AnyStore, backend: Backend) -> None:
    store.install_contract("exports", CONTRACT, by="alice", at=T0, event=ev.ContractInstalled(by="alice"))
    with store.audit_snapshot() as snapshot:
        report = verify(snapshot.rows(), snapshot.checkpoints(), backend.keys.public_key, heads=snapshot.stored_heads())
    assert report.ok, report


def test_a_sqlite_file_at_schema_5_adopts_the_contracts_of_its_operations(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SQLiteStore(path, keys=load_or_create_keys(tmp_path / "home"))
    record = new_record(parse_contract(CONTRACT), operation_id="op-1", job_id="exp-1", now=T0)
    store.create(record, CONTRACT, ev.Created.prepared({"created_by": "test"}))
    store.close()
    with sqlite3.connect(path) as conn:  # as an older pollwarden left it: schema 5, no registry
        for statement in AFTER_SCHEMA_5:
            conn.execute(statement)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(REGISTRY - 1),))
    store = SQLiteStore(path)
    try:
        (adopted,) = store.installed_contracts()
        assert (adopted.digest, adopted.name, adopted.installed_by) == (text_digest(CONTRACT), "exports", ADOPTED_BY)
    finally:
        store.close()


def test_a_postgres_database_at_schema_5_adopts_the_contracts_of_its_operations(
    empty_pg_url: str, tmp_path: Path
) -> None:
    upgrade_database(empty_pg_url)
    with psycopg.connect(empty_pg_url, autocommit=True) as conn:
        for statement in AFTER_SCHEMA_5:
            conn.execute(statement.encode())
        conn.execute("DELETE FROM schema_migrations WHERE version >= %s", (REGISTRY,))
        # An operation written at schema 5 (the columns a schema-5 pollwarden fills; the store would need keys)
        record = new_record(parse_contract(CONTRACT), operation_id="op-1", job_id="exp-1", now=T0)
        conn.execute(
            "INSERT INTO operations (operation_id, job_id, contract_name, phase, next_poll_at, deadline_at,"
            " status_requests_used, max_status_requests, record, contract, created_at, updated_at)"
            " VALUES (%s, %s, %s, 'active', now(), now(), 0, 1, '{}', %s, now(), now())",
            (record.operation_id, record.job_id, record.contract_name, CONTRACT),
        )
    assert upgrade_database(empty_pg_url) == list(range(REGISTRY, LATEST + 1))
    store = PostgresStore(empty_pg_url)
    try:
        (adopted,) = store.installed_contracts()
        assert (adopted.digest, adopted.name, adopted.installed_by) == (text_digest(CONTRACT), "exports", ADOPTED_BY)
    finally:
        store.close()
