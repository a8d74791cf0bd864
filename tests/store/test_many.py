"""The many forms a bulk enqueue uses: `create_many` (one transaction, all or nothing), `get_many`, `find_jobs`
and `append_many`, on both backends. Sizes cross the store's statement chunks (100 rows per INSERT, 500 ids per
IN list), so a chunk boundary cannot hide a lost or doubled row."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from pollwarden import events as ev
from pollwarden.audit import verify
from pollwarden.core.contract.parse import parse_contract
from pollwarden.core.record import OperationRecord, new_record
from pollwarden.store.base import NewOperation, OperationExists
from pollwarden.store.common import Tx

from .conftest import AnyStore
from .test_store import CONTRACT, T0


def _record(n: int, *, job: str | None = None, minutes: int = 0) -> OperationRecord:
    contract = parse_contract(CONTRACT)
    return new_record(contract, operation_id=f"op-{n}", job_id=job or f"j{n}", now=T0 + timedelta(minutes=minutes))


def _new(records: list[OperationRecord]) -> list[NewOperation]:
    return [(record, CONTRACT, ev.Created.prepared({"operation": record.operation_id})) for record in records]


def test_create_many_writes_every_record_and_its_created_event_or_nothing(store: AnyStore) -> None:
    records = [_record(n) for n in range(250)]  # three INSERT statements in one transaction
    store.create(records[170], CONTRACT, ev.Created.prepared({"first": True}))
    with pytest.raises(OperationExists, match="job j170 of exports already has operation op-170"):
        store.create_many(_new(records))
    assert [s.record.operation_id for s in store.all()] == ["op-170"]
    assert {r.log_id for r in store.audit_records()} == {"op-170"}  # the rolled back batch left no audit record
    heads = len(store.audit_heads())
    store.create_many(_new(records[:170] + records[171:]))
    newest = store.audit_heads()[-1]  # one transaction, one signed head over its 249 new logs
    assert len(store.audit_heads()) == heads + 1 and (newest.logs, newest.records) == (250, 250)
    stored = store.get_many([r.operation_id for r in records])
    assert {op: s.record for op, s in stored.items()} == {r.operation_id: r for r in records}
    assert [e.kind for e in store.events("op-3")] == ["created"]
    assert store.events("op-3")[0].data == {"operation": "op-3"}
    assert sum(1 for _ in store.audit_records()) == 250
    assert store.keys is not None
    report = verify(store.audit_records(), store.audit_checkpoints(), store.keys.public_key, heads=store.audit_heads())
    assert report.ok, report.problems
    store.create_many([])  # nothing asked, nothing written, no transaction


def test_get_many_and_find_jobs_answer_for_every_id_across_in_list_chunks(store: AnyStore) -> None:
    records = [_record(n) for n in range(600)]
    store.create_many(_new(records))
    with store._tx() as tx:  # type: ignore[attr-defined]  # rows of one job, as an older database may hold
        store._insert_operations(tx, [(_record(n, job="j7", minutes=m), CONTRACT) for n, m in ((1000, 5), (1001, 2))])  # type: ignore[attr-defined]
    wanted = [f"op-{n}" for n in range(1, 1200, 2)]  # odd: op-1001 is one, op-1000 is not
    assert sorted(store.get_many(wanted)) == sorted([*(f"op-{n}" for n in range(1, 600, 2)), "op-1001"])
    jobs = store.find_jobs("exports", [f"j{n}" for n in range(599, -1, -1)] + ["j-none"])
    assert len(jobs) == 600 and "j-none" not in jobs
    assert [s.record.operation_id for s in jobs["j7"]] == ["op-1000", "op-1001", "op-7"]  # newest first
    assert jobs["j7"] == store.find_job("exports", "j7")
    assert store.find_jobs("imports", ["j7"]) == {} and store.get_many([]) == {}


def test_append_many_chains_each_event_onto_its_own_log_in_one_transaction(store: AnyStore) -> None:
    store.create_many(_new([_record(n) for n in range(3)]))
    store.append_many([("op-0", ev.ResumeRefused.prepared({"n": 1})), ("op-2", ev.ResumeRefused.prepared({"n": 2})),
                       ("op-0", ev.ResumeRefused.prepared({"n": 3}))], T0)  # fmt: skip
    assert [(e.kind, dict(e.data)) for e in store.events("op-0")][1:] == [
        ("resume_refused", {"n": 1}),
        ("resume_refused", {"n": 3}),
    ]
    assert [e.seq for e in store.events("op-2")] == [1, 2]
    assert [e.kind for e in store.events("op-1")] == ["created"]


def test_append_many_across_insert_chunks_keeps_every_record_in_order(
    store: AnyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pollwarden.store.common import Tx
    from pollwarden.store.trail import INSERT_ROWS

    store.create_many(_new([_record(n) for n in range(2)]))
    inserts: list[int] = []
    real = Tx.execute

    def counted(tx: Tx, query: str, params: Sequence[Any] = ()) -> Any:
        if query.startswith("INSERT INTO audit_records"):
            inserts.append(len(params) // 7)
        return real(tx, query, params)

    monkeypatch.setattr(Tx, "execute", counted)
    count = 2 * INSERT_ROWS + 3
    store.append_many([(f"op-{n % 2}", ev.ResumeRefused.prepared({"n": n})) for n in range(count)], T0)
    assert inserts == [INSERT_ROWS, INSERT_ROWS, 3]
    for log in (0, 1):
        events = store.events(f"op-{log}")
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert [e.data["n"] for e in events[1:]] == list(range(log, count, 2))
    assert store.keys is not None
    report = verify(store.audit_records(), store.audit_checkpoints(), store.keys.public_key, heads=store.audit_heads())
    assert report.ok, report.problems


def test_create_many_reads_every_new_logs_head_in_one_statement(
    store: AnyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bulk enqueue on PostgreSQL paid one round trip per operation to find that its new log was empty."""
    store.append("op-7", ev.SubmissionIntent.prepared({"n": 1}), T0)  # a log that exists before its operation does
    statements: list[str] = []
    real = Tx.execute

    def counted(tx: Tx, query: str, params: Sequence[Any] = ()) -> Any:
        statements.append(query.split(" (")[0].split(" WHERE")[0])
        return real(tx, query, params)

    monkeypatch.setattr(Tx, "execute", counted)
    store.create_many(_new([_record(n) for n in range(40)]))
    monkeypatch.undo()
    per_log_reads = [q for q in statements if q.startswith("SELECT seq, this_hash FROM audit_records")]
    assert per_log_reads == [] and len(statements) < 15, statements
    assert [e.kind for e in store.events("op-7")] == ["submission_intent", "created"]  # chained onto what was there
    assert store.keys is not None
    report = verify(store.audit_records(), store.audit_checkpoints(), store.keys.public_key, heads=store.audit_heads())
    assert report.ok, report.problems
