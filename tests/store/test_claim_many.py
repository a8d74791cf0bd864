"""`claim_many` and `claim_then_write`: the claims of the Python API's watches that are due together, in one
transaction, each answered as if it had been claimed alone; `claim_due_then_write`: a worker's claims and the
reservations they lead to, in one transaction."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pollwarden import events as ev
from pollwarden.core.decide import reserve
from pollwarden.store.base import ClaimAnswer, Claimed, FencedWrite, StoreError

from .conftest import AnyStore
from .test_store import CONTRACT, T0, TTL, _record


def test_claim_many_answers_each_claim_as_claiming_them_one_by_one_would(store: AnyStore) -> None:
    for op in ("a", "b", "c"):
        store.create(_record(op), CONTRACT, ev.Created.prepared({}))
    assert store.claim("c", "hostC:3:c", T0, TTL) is not None
    answers = store.claim_many(
        [("b", "hostA:1:a", TTL), ("a", "hostA:1:x", TTL * 2), ("b", "hostB:2:b", TTL), ("c", "hostA:1:a", TTL)], T0
    )
    first_b, a, second_b, c = answers
    assert first_b is not None and first_b[0].owner == "hostA:1:a" and first_b[0].token == 1
    assert a is not None and a[0].owner == "hostA:1:x" and a[0].expires_at == T0 + TTL * 2
    assert second_b is None  # named twice: the first claimer has it, unexpired
    assert c is None  # held by someone else
    stored = store.get("b")
    assert stored is not None and stored.lease_owner == "hostA:1:a" and stored.lease_token == 1


def test_claim_many_takes_an_expired_lease_and_logs_the_takeover(store: AnyStore) -> None:
    store.create(_record("a"), CONTRACT, ev.Created.prepared({}))
    store.create(_record("b"), CONTRACT, ev.Created.prepared({}))
    assert store.claim("a", "hostA:1:a", T0, TTL) is not None
    later = T0 + TTL + timedelta(seconds=1)
    a, b = store.claim_many([("a", "hostB:2:b", TTL), ("b", "hostB:2:b", TTL)], later)
    assert a is not None and a[0].token == 2 and b is not None and b[0].token == 1
    assert [e.kind for e in store.events("a")] == ["created", "lease_taken_over"]
    assert [e.kind for e in store.events("b")] == ["created"]


def test_claim_then_write_commits_the_claims_and_their_writes_together(store: AnyStore) -> None:
    for op in ("a", "b"):
        store.create(_record(op), CONTRACT, ev.Created.prepared({}))

    def reserve_all(answers: list[ClaimAnswer]) -> list[FencedWrite]:
        return [FencedWrite(lease, reserve(record, T0), [ev.Reserved.prepared({})], release=False) for lease, record in
                [answer for answer in answers if answer is not None]]  # fmt: skip

    answers, written = store.claim_then_write([("a", "hostA:1:a", TTL), ("b", "hostA:1:b", TTL)], T0, reserve_all)
    assert [answer is not None for answer in answers] == [True, True] and written == [True, True]
    for op in ("a", "b"):
        stored = store.get(op)
        assert stored is not None and stored.record.status_requests_used == 1 and stored.lease_token == 1
        assert [e.kind for e in store.events(op)] == ["created", "reserved"]


def test_claim_then_write_that_fails_leaves_neither_claims_nor_writes(store: AnyStore) -> None:
    store.create(_record("a"), CONTRACT, ev.Created.prepared({}))

    def failing(answers: list[ClaimAnswer]) -> list[FencedWrite]:
        raise StoreError("refused")

    with pytest.raises(StoreError, match="refused"):
        store.claim_then_write([("a", "hostA:1:a", TTL)], T0, failing)
    stored = store.get("a")
    assert stored is not None and stored.lease_owner is None and stored.lease_token == 0


def test_claim_due_then_write_commits_the_fleet_claim_and_its_writes_together(store: AnyStore) -> None:
    for op in ("a", "b", "c"):
        store.create(_record(op), CONTRACT, ev.Created.prepared({}))
    assert store.claim("b", "hostB:2:b", T0, TTL) is not None  # held: not due for the fleet

    def reserve_all(claimed: list[Claimed]) -> list[FencedWrite]:
        return [FencedWrite(c.lease, reserve(c.record, T0), [ev.Reserved.prepared({})], release=False) for c in claimed]

    claimed, written = store.claim_due_then_write("worker/h:1:w", T0, TTL, 10, reserve_all)
    assert [c.lease.operation_id for c in claimed] == ["a", "c"] and written == [True, True]
    assert all(c.contract_text == CONTRACT and c.lease.token == 1 for c in claimed)
    for op in ("a", "c"):
        stored = store.get(op)
        assert stored is not None and stored.lease_owner == "worker/h:1:w" and stored.record.status_requests_used == 1
        assert [e.kind for e in store.events(op)] == ["created", "reserved"]
    assert store.claim_due_then_write("worker/h:1:w", T0, TTL, 10, reserve_all) == ([], [])  # nothing due now


def test_claim_due_then_write_that_fails_leaves_neither_claims_nor_writes(store: AnyStore) -> None:
    store.create(_record("a"), CONTRACT, ev.Created.prepared({}))
    told: list[str] = []

    def failing(claimed: list[Claimed]) -> list[FencedWrite]:
        told.extend(c.lease.operation_id for c in claimed)
        raise StoreError("refused")

    with pytest.raises(StoreError, match="refused"):
        store.claim_due_then_write("worker/h:1:w", T0, TTL, 10, failing)
    assert told == ["a"]
    stored = store.get("a")
    assert stored is not None and stored.lease_owner is None and stored.lease_token == 0
    assert [c.lease.operation_id for c in store.claim_due("worker/h:1:w", T0, TTL, 10)] == ["a"]  # still due
