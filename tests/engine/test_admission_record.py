"""Admission and the record: what is durable before anything is sent."""

from __future__ import annotations

from pathlib import Path

from pollwarden.audit import load_or_create_keys
from pollwarden.core.admission import WatchRequest
from pollwarden.core.contract.parse import parse_contract
from pollwarden.engine import Engine
from pollwarden.simulator import contract_text
from pollwarden.store.base import Store
from pollwarden.store.open import open_store
from tests.conftest import install


def _store(home: Path) -> Store:
    home.mkdir(exist_ok=True)
    return open_store(home / "pollwarden.db", keys=load_or_create_keys(home), trusted_checkpoint_path=None)


def test_the_whole_record_is_durable_before_the_first_poll(tmp_path: Path) -> None:
    """R15: admission commits the record (operation and job ids, start, deadline, both budgets and their use,
    the next check) before any request: a second store opened on the file, as a restarted process opens it,
    reads it back while nothing has been polled."""
    contract = parse_contract(
        contract_text("http://127.0.0.1:9", deadline="30m", max_requests=5, max_transport_failures=2), source="t.toml"
    )
    store = _store(tmp_path / "home")
    try:
        install(store, contract)
        admitted = Engine(store, owner="watch", clock=store.db_now).admit(WatchRequest(contract, "job-15", by="t"))
        again = _store(tmp_path / "home")
        try:
            stored = again.get(admitted.record.operation_id)
        finally:
            again.close()
    finally:
        store.close()
    assert stored is not None
    record = stored.record
    assert (record.operation_id, record.job_id) == (admitted.record.operation_id, "job-15")
    assert (record.created_at, record.deadline_at) == (admitted.record.created_at, admitted.record.deadline_at)
    assert (record.plan.max_status_requests, record.plan.max_transport_failures) == (5, 2)
    assert (record.status_requests_used, record.transport_failures_used, record.polls_completed) == (0, 0, 0)
    assert record.next_poll_at == admitted.record.next_poll_at is not None
    assert not record.is_final and stored.lease_owner is None
