"""The outbox's store side (schema 7), on SQLite and PostgreSQL: a delivery is written in the transaction that
commits what it announces, claimed with a fenced lease, and written back once; a witness's heads coalesce into
one row."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from pollwarden import events as ev
from pollwarden.core.contract.parse import parse_contract
from pollwarden.core.escalation import DecisionRequest, build_request
from pollwarden.store.base import Attempted, DeliveryLease, OutboxEntry, Store
from pollwarden.store.delivery import queued_by
from pollwarden.store.open import open_store
from pollwarden.store.owner import process_owner, this_place
from pollwarden.store.witness import Witness

from .conftest import AnyStore, Backend
from .test_store import CONTRACT, T0, TTL, _record, _stopped

HOOKED = CONTRACT + '\n[escalation]\nwebhook_url = "http://127.0.0.1:9/hook"\n'


def _stop(store: Store, op: str, decision_id: str, contract: str = HOOKED) -> DecisionRequest:
    store.create(_record(op), contract, ev.Created.prepared({}))
    claimed = store.claim(op, "hostA:1:a", T0, TTL)
    assert claimed is not None
    request = build_request(_stopped(claimed[1]), parse_contract(contract), T0, decision_id=decision_id)
    assert store.write(
        claimed[0], _stopped(claimed[1]), [ev.Escalated.prepared({})], T0, release=True, decision=request
    )
    return request


def _claim(
    store: Store, owner: str, now: datetime, *, witness: str | None = None, every: bool = False
) -> list[tuple[DeliveryLease, OutboxEntry]]:
    return store.claim_deliveries(owner, now, TTL, 10, witness=witness, every=every)


def test_a_decision_request_is_queued_for_its_webhook_in_the_write_that_makes_it(store: AnyStore) -> None:
    request = _stop(store, "op", "d-1")
    assert request.announce
    (entry,) = store.outbox()
    assert (entry.kind, entry.subject, entry.operation_id, entry.status, entry.attempts) == (
        "webhook", "d-1", "op", "pending", 0,
    )  # fmt: skip
    assert entry.queued_by == queued_by() and entry.lease_owner is None
    assert store.outbox(queued_by="another:1:x") == []


def test_a_contract_without_a_webhook_queues_nothing(store: AnyStore) -> None:
    assert not _stop(store, "op", "d-1", CONTRACT).announce
    assert store.outbox() == []


def test_a_write_whose_lease_was_lost_queues_nothing(store: AnyStore) -> None:
    store.create(_record("op"), HOOKED, ev.Created.prepared({}))
    first = store.claim("op", "hostA:1:a", T0, TTL)
    assert first is not None
    assert store.claim("op", "hostB:1:b", T0 + TTL, TTL) is not None  # the first lease ran out: taken over
    request = build_request(_stopped(first[1]), parse_contract(HOOKED), T0, decision_id="d-1")
    assert not store.write(first[0], _stopped(first[1]), [], T0, release=True, decision=request)
    assert store.outbox() == []


def test_a_claimed_delivery_is_nobody_elses_until_its_lease_ends_and_a_stale_claimer_changes_nothing(
    store: AnyStore,
) -> None:
    _stop(store, "op", "d-1")
    now = store.db_now()
    ((lease, entry),) = _claim(store, "hostA:1:a", now)
    assert entry.subject == "d-1" and lease.operation_id == "op"
    assert _claim(store, "hostB:1:b", now) == [] and _claim(store, "hostB:1:b", now, every=True) == []
    ((taken, _),) = _claim(store, "hostB:1:b", now + TTL)  # the first claimer's lease has run out
    assert taken.token == lease.token + 1
    assert not store.finish_delivery(lease, Attempted(1, True, None), now)  # stale: nothing changes
    assert [e.lease_owner for e in store.outbox()] == ["hostB:1:b"]
    assert store.finish_delivery(taken, Attempted(1, True, None), now)
    assert store.outbox() == []


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_a_holder_that_died_on_this_host_is_not_waited_out(store: AnyStore) -> None:
    _stop(store, "op", "d-1")
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    now = store.db_now()
    assert _claim(store, process_owner("outbox", pid=int(proc.stdout)), now)  # a holder proved gone: its pid ended
    ((taken, _),) = _claim(store, process_owner("outbox"), now + timedelta(seconds=1), every=True)
    assert taken.token == 2


def test_a_dead_holders_deliveries_are_claimed_though_live_holders_rows_fill_the_limit(store: AnyStore) -> None:
    """The fleet claim's rule (`lease_held`, holders read first): a live holder's rows, due earlier, cannot crowd a
    dead holder's out of the limit, and a dead holder's expired row (a free one) is claimed once, not also as
    the dead holder's."""
    from .test_fleet_claims import _no_process

    boot, pidns = this_place()
    if boot is None or pidns is None:
        pytest.skip("no /proc here: nothing can be proved dead, every lease runs out")
    for n in range(1, 7):
        _stop(store, f"op-{n}", f"d-{n}")
    now = store.db_now()
    live, dead, claimer = process_owner("outbox"), process_owner("outbox", pid=_no_process()), process_owner("hooks")
    assert [e.subject for _, e in store.claim_deliveries(live, now, TTL, 3, witness=None)] == ["d-1", "d-2", "d-3"]
    expired = store.claim_deliveries(dead, now - TTL - timedelta(seconds=1), TTL, 1, witness=None, every=True)
    assert [e.subject for _, e in expired] == ["d-4"]
    unexpired = store.claim_deliveries(dead, now, TTL, 2, witness=None, skip=[expired[0][1].delivery_id])
    assert [e.subject for _, e in unexpired] == ["d-5", "d-6"]
    claimed = store.claim_deliveries(claimer, now, TTL, 3, witness=None)
    assert sorted((e.subject, lease.token) for lease, e in claimed) == [("d-4", 2), ("d-5", 2), ("d-6", 2)]
    assert {e.subject: e.lease_owner for e in store.outbox()} == {
        "d-1": live, "d-2": live, "d-3": live, "d-4": claimer, "d-5": claimer, "d-6": claimer,
    }  # fmt: skip


def test_what_came_of_an_attempt_is_written_once_with_its_audit_event(store: AnyStore) -> None:
    _stop(store, "op", "d-1")
    now = store.db_now()
    ((lease, _),) = _claim(store, "hostA:1:a", now)
    later = now + timedelta(seconds=30)
    assert store.finish_delivery(lease, Attempted(1, False, later, 500, "the webhook answered 500"), now)
    (entry,) = store.outbox()
    assert (entry.status, entry.attempts, entry.last_status, entry.next_attempt_at) == ("pending", 1, 500, later)
    assert _claim(store, "hostA:1:a", now) == [] and store.next_delivery(None) == later
    ((lease, entry),) = _claim(store, "hostA:1:a", later)
    told = ev.NotifyFailed(decision_id="d-1", ok=False, attempts=2, status=500, error="x")
    assert store.finish_delivery(lease, Attempted(2, False, None, 500, "x", event=told), later)
    (failed,) = store.outbox()
    assert (failed.status, failed.attempts, failed.lease_owner) == ("failed", 2, None)
    assert _claim(store, "hostA:1:a", later, every=True) == [] and store.next_delivery(None) is None
    assert [e.kind for e in store.events("op")][-1] == "notify_failed"
    assert [(c.kind, c.state, c.count) for c in store.outbox_counts()] == [("webhook", "failed", 1)]


def _with_witness(backend: Backend, location: Path) -> Store:
    store = open_store(backend.target, keys=backend.keys, witness=Witness.parse(str(location), "test"))
    backend.opened.append(store)
    return store


def test_each_head_is_queued_for_the_witness_in_its_commit_and_a_newer_one_replaces_it(
    store: AnyStore, backend: Backend, tmp_path: Path
) -> None:
    witnessed = _with_witness(backend, tmp_path)
    key = Witness.parse(str(tmp_path), "test").key
    for n in range(3):
        witnessed.append("op", ev.WatchInterrupted.prepared({"n": n}), T0)
    (entry,) = witnessed.outbox()
    assert (entry.kind, entry.subject, entry.head) == ("witness", key, witnessed.audit_heads()[-1].counter)
    assert str(tmp_path) not in repr(entry)  # the location is not stored: a URL's query may carry a token
    store.append("op", ev.WatchInterrupted.prepared({"n": 3}), T0)  # a store with no witness queues none
    assert [e.head for e in witnessed.outbox()] == [entry.head]
    # Only a loop of this witness claims its heads.
    now = witnessed.db_now()
    assert _claim(store, "hostB:1:b", now) == [] and _claim(store, "hostB:1:b", now, witness="other") == []
    ((lease, claimed),) = _claim(witnessed, "hostA:1:a", now, witness=key)
    # Refused: tried again later; a newer head replaces the one waiting and keeps that schedule.
    retry = now + timedelta(seconds=5)
    assert witnessed.finish_delivery(lease, Attempted(1, False, retry, error="down", head=claimed.head), now)
    witnessed.append("op", ev.WatchInterrupted.prepared({"n": 4}), T0)
    (waiting,) = witnessed.outbox()
    assert waiting.head == witnessed.audit_heads()[-1].counter and (waiting.attempts, waiting.next_attempt_at) == (
        1, retry,
    )  # fmt: skip
    # Taken while a newer head came: it stays, for the newer head, due when the loop said.
    ((lease, claimed),) = _claim(witnessed, "hostA:1:a", retry, witness=key)
    witnessed.append("op", ev.WatchInterrupted.prepared({"n": 5}), T0)
    assert witnessed.finish_delivery(lease, Attempted(0, True, retry + TTL, head=claimed.head), retry)
    (left,) = witnessed.outbox()
    assert left.head == witnessed.audit_heads()[-1].counter and (left.attempts, left.next_attempt_at) == (
        0,
        retry + TTL,
    )
    ((lease, claimed),) = _claim(witnessed, "hostA:1:a", retry + TTL, witness=key)
    assert witnessed.finish_delivery(lease, Attempted(0, True, None, head=claimed.head), retry)
    assert witnessed.outbox() == []
