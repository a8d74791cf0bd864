"""`Engine.admit_many`: the one admission rule for many requests, one transaction per batch, on both backends.

Nothing is created unless every request can be admitted; a failure inside a batch's transaction (a crash, as far
as the database can tell) leaves whole batches; admitting the same requests again resumes what exists and creates
the rest, never a second operation for one job.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from pollwarden import events as ev
from pollwarden.audit import AuditRecord
from pollwarden.core.admission import Limits, Refusal, Refuse, WatchRequest
from pollwarden.core.contract.parse import Contract, parse_contract
from pollwarden.engine import AdmissionError, BatchAdmissionError, Engine
from pollwarden.simulator import contract_text
from pollwarden.store.base import Store
from pollwarden.store.common import Tx
from pollwarden.store.sql import SQLStore
from tests.conftest import install

# `store` is the store suite's fixture: each test that takes it runs on SQLite and on PostgreSQL.

CONTRACT = parse_contract(contract_text("http://127.0.0.1:9", max_requests=5), source="test.toml")


@pytest.fixture(autouse=True)
def _installed(store: Store) -> None:
    """The operator installed the contract these requests name: admission refuses any other."""
    install(store, CONTRACT)


def _asks(
    jobs: list[str], prefix: str | None = None, contract: Contract = CONTRACT, **limits: Any
) -> list[WatchRequest]:
    return [
        WatchRequest(contract, job, f"{prefix}-{n}" if prefix else None, Limits(**limits), by="enqueue")
        for n, job in enumerate(jobs, 1)
    ]


def _created_events(store: Store) -> dict[str, int]:
    """How many `created` events each log holds."""
    counts: dict[str, int] = {}
    for record in store.audit_records():
        if record.kind == "created":
            counts[record.log_id] = counts.get(record.log_id, 0) + 1
    return counts


def test_every_request_is_created_with_its_own_record_and_created_event(store: Store) -> None:
    engine = Engine(store, owner="cli", clock=store.db_now)
    admitted = engine.admit_many(_asks([f"j{n}" for n in range(10)], "bulk"), batch=3)
    assert [a.record.operation_id for a in admitted] == [f"bulk-{n}" for n in range(1, 11)]
    assert all(a.created for a in admitted)
    assert _created_events(store) == {f"bulk-{n}": 1 for n in range(1, 11)}
    # One transaction per batch: 3 + 3 + 3 + 1, each with one signed head (after the contract's install's own).
    assert len(store.audit_heads()) == 1 + 4
    event = store.events("bulk-4")[0]
    assert event.data["created_by"] == "enqueue" and event.data["job"] == "j3"
    again = engine.admit_many(_asks([f"j{n}" for n in range(10)], "bulk"), batch=3)
    assert [a.record for a in again] == [a.record for a in admitted] and not any(a.created for a in again)


def test_one_refused_request_anywhere_creates_nothing_and_names_every_refused_one(store: Store) -> None:
    engine = Engine(store, owner="cli", clock=store.db_now)
    engine.admit(WatchRequest(CONTRACT, "taken", "elsewhere"))
    asks = _asks(["a", "b", "taken", "c", "d", "e", "f"], "bulk")
    with pytest.raises(BatchAdmissionError) as caught:
        engine.admit_many(asks, batch=2)  # the refusal is in the second batch: found before the first is written
    assert [index for index, _ in caught.value.refusals] == [2]
    assert "already watched by operation elsewhere" in caught.value.refusals[0][1].message
    assert caught.value.admitted == ()
    assert [s.record.operation_id for s in store.all()] == ["elsewhere"]
    assert [e.kind for e in store.events("elsewhere")] == ["created", "resume_refused"]  # as for one request
    with pytest.raises(BatchAdmissionError) as repeated:
        engine.admit_many(_asks(["x", "y", "x"]), where=lambda index: f"line {index + 1}")
    assert [(i, r.message) for i, r in repeated.value.refusals] == [
        (2, "job_id is given twice (also at line 1); give each once")
    ]
    assert len(store.all()) == 1


@pytest.mark.parametrize("prefix", ["bulk", None])
def test_a_crash_inside_a_batch_leaves_whole_batches_and_a_rerun_creates_each_job_once(
    store: Store, monkeypatch: pytest.MonkeyPatch, prefix: str | None
) -> None:
    assert isinstance(store, SQLStore)
    real = store._seal_onto  # each event is sealed here, then a batch's records are inserted together
    calls = iter(range(1_000))

    def dies_in_the_second_batch(tx: Tx, log_id: str, event: ev.NewEvent, at: datetime) -> AuditRecord:
        if next(calls) == 5:  # the second event of the second batch of four
            raise RuntimeError("killed")
        return real(tx, log_id, event, at)

    monkeypatch.setattr(store, "_seal_onto", dies_in_the_second_batch)
    engine = Engine(store, owner="cli", clock=store.db_now)
    jobs = [f"j{n}" for n in range(10)]
    with pytest.raises(RuntimeError, match="killed"):
        engine.admit_many(_asks(jobs, prefix), batch=4)
    assert sorted(s.record.job_id for s in store.all()) == ["j0", "j1", "j2", "j3"]  # the first batch, whole
    assert len(_created_events(store)) == 4
    monkeypatch.setattr(store, "_seal_onto", real)
    again = engine.admit_many(_asks(jobs, prefix), batch=4)
    assert [a.created for a in again] == [False] * 4 + [True] * 6
    assert sorted(s.record.job_id for s in store.all()) == sorted(jobs)
    assert set(_created_events(store).values()) == {1} and len(_created_events(store)) == 10


def test_generated_operation_ids_never_collide_within_a_call(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The random part of a generated id is short (6 hex digits): within one second of one large file two draws
    can be equal, and the second would roll back a whole batch. The call keeps the ids it gave out."""
    draws: Iterator[str] = iter(["aaaaaa", "aaaaaa", "aaaaaa", "bbbbbb", "cccccc", "cccccc", "dddddd"])
    monkeypatch.setattr(secrets, "token_hex", lambda _: next(draws))  # the engine draws from this module
    at = datetime(2026, 4, 18, 10, 20, tzinfo=UTC)
    engine = Engine(store, owner="cli", clock=lambda: at)
    admitted = engine.admit_many(_asks(["a", "b", "c", "d"]), batch=10)
    assert [a.record.operation_id.rsplit("-", 1)[1] for a in admitted] == ["aaaaaa", "bbbbbb", "cccccc", "dddddd"]


def test_a_tighter_limit_on_an_existing_operation_is_narrowed_as_for_one_request(store: Store) -> None:
    engine = Engine(store, owner="cli", clock=store.db_now)
    engine.admit_many(_asks(["a", "b"], "bulk"))
    narrowed = engine.admit_many(_asks(["a", "b", "c"], "bulk", max_requests=2))
    assert [a.record.plan.max_status_requests for a in narrowed] == [2, 2, 2]
    assert [a.created for a in narrowed] == [False, False, True]
    assert [e.kind for e in store.events("bulk-1")] == ["created", "limits_narrowed"]
    with pytest.raises(BatchAdmissionError, match="exceeds the approved 2"):
        engine.admit_many(_asks(["a", "b", "c"], "bulk", max_requests=4))


def test_a_contract_that_is_not_installed_creates_nothing_on_every_path(store: Store) -> None:
    """Admission is where "installed contracts only" lives: one request, a batch, and the combined watches of one
    process are all refused, naming the install command, and nothing is written."""
    other = parse_contract(contract_text("http://127.0.0.1:9", max_requests=5, name="other"), source="o.toml")
    engine = Engine(store, owner="cli", clock=store.db_now)
    with pytest.raises(AdmissionError, match="pollwarden contracts install") as refused:
        engine.admit(WatchRequest(other, "j1", by="enqueue"))
    assert refused.value.kind is Refusal.NOT_INSTALLED
    with pytest.raises(BatchAdmissionError) as batch:
        engine.admit_many(_asks(["a", "b"], "bulk", contract=other))
    assert [index for index, _ in batch.value.refusals] == [0, 1]
    (answer,) = engine.admit_each([WatchRequest(other, "j2")], [engine])
    assert isinstance(answer, Refuse) and answer.kind is Refusal.NOT_INSTALLED
    assert store.all() == [] and _created_events(store) == {}
    install(store, other)
    assert engine.admit(WatchRequest(other, "j1", by="enqueue")).created
