"""The store contract: durable records, fenced leases, events written with the change they describe."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pollwarden.audit import load_or_create_keys
from pollwarden.core.contract import parse_contract
from pollwarden.core.decide import reserve
from pollwarden.core.record import OperationRecord, new_record
from pollwarden.store.base import OperationExists, StoreError
from pollwarden.store.sqlite import SQLiteStore, this_host

CONTRACT = """
name = "exports"
status_url = "http://127.0.0.1:9/jobs/{job_id}"
[states]
pending = ["running"]
success = ["succeeded"]
failure = ["failed"]
[fields]
state = "state"
"""
T0 = datetime(2026, 4, 18, 10, 20, tzinfo=UTC)
TTL = timedelta(seconds=10)


def _open(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(tmp_path / "state.db", keys=load_or_create_keys(tmp_path / "home"))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = _open(tmp_path)
    yield s
    s.close()


def _record(op: str = "op") -> OperationRecord:
    return new_record(parse_contract(CONTRACT), operation_id=op, job_id="exp_71c", now=T0)


def test_create_persists_before_any_poll(store: SQLiteStore, tmp_path: Path) -> None:
    record = _record()
    store.create(record, CONTRACT, {"hello": 1})
    reopened = _open(tmp_path)
    try:
        stored = reopened.get("op")
        assert stored is not None
        assert stored.record == record
        assert stored.contract_text == CONTRACT
        assert [e.kind for e in reopened.events("op")] == ["created"]
    finally:
        reopened.close()
    with pytest.raises(OperationExists):
        store.create(record, CONTRACT, {})


def test_claim_is_exclusive_until_expiry_and_tokens_only_grow(store: SQLiteStore) -> None:
    store.create(_record(), CONTRACT, {})
    first = store.claim("op", "hostA:1:a", T0, TTL)
    assert first is not None and first[0].token == 1
    assert store.claim("op", "hostB:2:b", T0 + timedelta(seconds=5), TTL) is None
    second = store.claim("op", "hostB:2:b", T0 + timedelta(seconds=11), TTL)
    assert second is not None and second[0].token == 2
    assert [e.kind for e in store.events("op")][-1] == "lease_taken_over"


def test_stale_token_write_changes_nothing(store: SQLiteStore) -> None:
    record = _record()
    store.create(record, CONTRACT, {})
    claimed = store.claim("op", "hostA:1:a", T0, TTL)
    assert claimed is not None
    old_lease, current = claimed
    newer = store.claim("op", "hostB:2:b", T0 + timedelta(seconds=11), TTL)
    assert newer is not None
    events_before = store.events("op")
    reserved = reserve(current, T0)
    assert not store.write(old_lease, reserved, [("reserved", {"n": 1})], T0, release=True)
    stored = store.get("op")
    assert stored is not None
    assert stored.record.status_requests_used == 0
    assert stored.lease_owner == "hostB:2:b"
    assert store.events("op") == events_before
    assert store.write(newer[0], reserve(newer[1], T0), [("reserved", {"n": 1})], T0, release=True)
    stored = store.get("op")
    assert stored is not None and stored.record.status_requests_used == 1 and stored.lease_owner is None


def test_a_dead_holder_on_this_host_is_not_waited_out(store: SQLiteStore) -> None:
    store.create(_record(), CONTRACT, {})
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(proc.stdout)
    assert store.claim("op", f"{this_host()}:{dead_pid}:x", T0, TTL) is not None
    # Still inside the ttl, but the holder's process is gone: take over now.
    taken = store.claim("op", f"{this_host()}:999999999:y", T0 + timedelta(seconds=1), TTL)
    assert taken is not None and taken[0].token == 2


def test_a_live_holder_elsewhere_is_respected(store: SQLiteStore) -> None:
    store.create(_record(), CONTRACT, {})
    assert store.claim("op", "some-other-host:1:x", T0, TTL) is not None
    assert store.claim("op", f"{this_host()}:1:y", T0 + timedelta(seconds=1), TTL) is None


def test_event_sequence_is_per_operation_and_gapless(store: SQLiteStore) -> None:
    store.create(_record("a"), CONTRACT, {})
    store.create(_record("b"), CONTRACT, {})
    for i in range(3):
        store.append("a", "note", {"i": i}, T0)
    store.append("b", "note", {"i": 9}, T0)
    assert [e.seq for e in store.events("a")] == [1, 2, 3, 4]
    assert [e.seq for e in store.events("b")] == [1, 2]
    assert [e.data.get("i") for e in store.events("a")][1:] == [0, 1, 2]


def test_claim_of_a_missing_operation_is_an_error(store: SQLiteStore) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        store.claim("ghost", "h:1:x", T0, TTL)


def test_agent_session_logs_are_chained_and_verifiable(store: SQLiteStore, tmp_path: Path) -> None:
    from pollwarden.audit import verify
    from pollwarden.store import agent_log_id

    log = agent_log_id("sess-1")
    store.append(log, "session_started", {"client": "test-agent"}, T0)
    store.append(log, "call", {"tool": "check_operation", "operation": "op"}, T0 + timedelta(seconds=1))
    assert [e.kind for e in store.events(log)] == ["session_started", "call"]
    assert store.events(log)[1].data == {"tool": "check_operation", "operation": "op"}
    assert store.keys is not None
    store.checkpoint_heads(T0 + timedelta(seconds=2))
    report = verify(store.audit_records(), store.audit_checkpoints(), store.keys.public_key)
    assert report.ok and report.logs == 1
    with pytest.raises(ValueError):
        agent_log_id("")
