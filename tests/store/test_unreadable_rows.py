"""One malformed row is never fatal (issue 23): a record that cannot be decoded (bad JSON, a wrong type, an unknown
phase) is skipped and reported by every reader, on both backends, and the fleet claim sets it aside once instead
of meeting it on every claim."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from pollwarden import events as ev
from pollwarden.core.contract.parse import parse_contract
from pollwarden.core.record import OperationRecord, new_record
from pollwarden.store.base import StoreError, UnreadableRecord

from .conftest import AnyStore, Backend
from .test_store import CONTRACT, T0

TTL = timedelta(seconds=30)


def _create(store: AnyStore, op: str) -> OperationRecord:
    record = new_record(parse_contract(CONTRACT), operation_id=op, job_id=f"job-{op}", now=T0)
    store.create(record, CONTRACT, ev.Created.prepared({}))
    return record


def _edit(backend: Backend, statement: str, *params: object) -> None:
    """What a broken disk, a bad restore or a hand edit leaves: a row written without pollwarden."""
    if backend.kind == "sqlite":
        assert isinstance(backend.target, Path)
        with sqlite3.connect(backend.target, isolation_level=None) as conn:
            conn.execute(statement, params)
        conn.close()
        return
    with psycopg.connect(str(backend.target), autocommit=True) as pg:
        pg.execute(statement.replace("?", "%s").encode(), params)


def _good_record(store: AnyStore, op: str) -> dict[str, object]:
    stored = store.get(op)
    assert stored is not None
    from pollwarden.core.codec import record_to_json

    return record_to_json(stored.record)


def _bad_texts(good: dict[str, object]) -> dict[str, str]:
    wrong_type = {**good, "status_requests_used": "none"}
    unknown_phase = {**good, "phase": "dormant"}
    naive = {**good, "next_poll_at": "2025-04-18T10:20:00"}
    # Optional times too: a push compares `woken_at` (and the learnt schedule `pending_seen_at`) with aware ones.
    naive_woken = {**good, "woken_at": "2025-04-18T10:20:00"}
    naive_pending = {**good, "pending_seen_at": "2025-04-18T10:20:00"}
    other_row = {**good, "operation_id": "someone-else"}
    return {
        "not-json": "{not json",
        "not-an-object": "[1, 2]",
        "wrong-type": json.dumps(wrong_type),
        "unknown-phase": json.dumps(unknown_phase),
        "naive-time": json.dumps(naive),
        "naive-woken-at": json.dumps(naive_woken),
        "naive-pending-seen-at": json.dumps(naive_pending),
        "another-rows-record": json.dumps(other_row),
    }


@pytest.mark.parametrize(
    "damage",
    [
        "not-json",
        "not-an-object",
        "wrong-type",
        "unknown-phase",
        "naive-time",
        "naive-woken-at",
        "naive-pending-seen-at",
        "another-rows-record",
    ],
)
def test_every_reader_skips_and_reports_a_row_it_cannot_decode(store: AnyStore, backend: Backend, damage: str) -> None:
    for op in ("a-good", "b-bad", "c-good"):
        _create(store, op)
    text = _bad_texts(_good_record(store, "b-bad"))[damage]
    _edit(backend, "UPDATE operations SET record = ? WHERE operation_id = 'b-bad'", text)

    listing = store.listing()
    assert [s.record.operation_id for s in listing.operations] == ["a-good", "c-good"]
    ((op, why),) = [(u.operation_id, u.why) for u in listing.unreadable]
    assert op == "b-bad" and why
    assert [s.record.operation_id for s in store.all()] == ["a-good", "c-good"]
    assert set(store.get_many(["a-good", "b-bad", "c-good"])) == {"a-good", "c-good"}
    assert store.find_job("exports", "job-b-bad") == []
    assert [s.record.operation_id for s in store.find_job("exports", "job-a-good")] == ["a-good"]
    assert store.find_jobs("exports", ["job-a-good", "job-b-bad"]).keys() == {"job-a-good"}
    with pytest.raises(UnreadableRecord) as raised:
        store.get("b-bad")
    assert isinstance(raised.value, StoreError) and "b-bad" in str(raised.value)


def test_the_fleet_claim_sets_an_unreadable_row_aside_once_and_claims_the_rest(
    store: AnyStore, backend: Backend
) -> None:
    for op in ("a-good", "b-bad", "c-good"):
        _create(store, op)
    later = new_record(parse_contract(CONTRACT), operation_id="d-later", job_id="job-d", now=T0).deferred(T0 + TTL)
    store.create(later, CONTRACT, ev.Created.prepared({}))
    _edit(backend, "UPDATE operations SET record = '{not json' WHERE operation_id = 'b-bad'")
    claimed = store.claim_due("w1:1:a", T0, TTL, limit=10)
    assert sorted(c.lease.operation_id for c in claimed) == ["a-good", "c-good"]
    (aside,) = store.take_set_aside()
    assert aside.operation_id == "b-bad" and aside.why == "the record is not JSON"
    assert store.take_set_aside() == []
    assert [(u.operation_id, u.why) for u in store.unreadable_rows()] == [
        ("b-bad", "set aside: the record is not JSON")
    ]
    assert store.events("b-bad")[-1].kind == "record_unreadable"
    # Set aside: no claim meets it again, and the gauges count it apart.
    for c in claimed:
        store.release(c.lease)
    again = store.claim_due("w2:2:b", T0 + TTL, TTL, limit=10)
    assert sorted(c.lease.operation_id for c in again) == ["a-good", "c-good", "d-later"]
    assert store.take_set_aside() == []
    ((counts),) = store.fleet_counts(T0 + TTL, lambda text: TTL)
    assert (counts.active, counts.unreadable) == (3, 1)
    assert [u.operation_id for u in store.listing().unreadable] == ["b-bad"]


def test_a_named_claim_of_an_unreadable_row_answers_none_and_sets_it_aside(store: AnyStore, backend: Backend) -> None:
    _create(store, "a-good")
    _create(store, "b-bad")
    _edit(backend, "UPDATE operations SET record = '[]' WHERE operation_id = 'b-bad'")
    answers = store.claim_many([("a-good", "w1:1:a", TTL), ("b-bad", "w1:1:a", TTL)], T0)
    assert answers[0] is not None and answers[1] is None
    assert [u.operation_id for u in store.unreadable_rows()] == ["b-bad"]


def test_a_worker_does_not_wake_for_a_row_set_aside(store: AnyStore, backend: Backend) -> None:
    _create(store, "b-bad")
    later = new_record(parse_contract(CONTRACT), operation_id="d-later", job_id="job-d", now=T0).deferred(T0 + TTL)
    store.create(later, CONTRACT, ev.Created.prepared({}))
    _edit(backend, "UPDATE operations SET record = '{not json' WHERE operation_id = 'b-bad'")
    assert store.next_due() == T0  # not yet met by a claim
    assert store.claim_due("w1:1:a", T0, TTL, limit=10) == []
    assert store.next_due() == T0 + TTL
    assert store.next_due(free_at=T0) == T0 + TTL
