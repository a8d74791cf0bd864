"""`claim_due`, the fleet claim, on both backends: due rows only, earliest first, never one row to two
claimers, and fencing tokens that only grow (docs/design.md, "The step (R37) and the lease", step 2)."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from pollwarden import events as ev
from pollwarden.core.contract.parse import parse_contract
from pollwarden.core.decide import reserve
from pollwarden.core.reasons import Phase, StopReason
from pollwarden.core.record import OperationRecord, new_record
from pollwarden.store.base import Claimed
from pollwarden.store.owner import process_owner, this_host, this_place
from pollwarden.store.postgres import PostgresStore
from pollwarden.store.sql_leases import PROBE_EVERY

from .conftest import AnyStore, Backend, run_threads
from .test_store import CONTRACT, T0

TTL = timedelta(seconds=30)
SECOND = timedelta(seconds=1)


def _create(store: AnyStore, op: str, due: datetime, *, phase: Phase = Phase.ACTIVE) -> OperationRecord:
    record = new_record(parse_contract(CONTRACT), operation_id=op, job_id=f"job-{op}", now=T0 - timedelta(minutes=1))
    record = record.deferred(due)
    if phase is not Phase.ACTIVE:
        record = replace(record, phase=phase, reason=StopReason.JOB_FAILED, finished_at=T0)
    store.create(record, CONTRACT, ev.Created.prepared({}))
    return record


def _ids(claimed: list[Claimed]) -> list[str]:
    return [c.lease.operation_id for c in claimed]


def test_only_active_operations_that_are_due_are_claimed_earliest_first(store: AnyStore) -> None:
    records = {
        "late": _create(store, "late", T0 - 2 * SECOND),
        "now": _create(store, "now", T0),
        "b-tie": _create(store, "b-tie", T0 - SECOND),
        "a-tie": _create(store, "a-tie", T0 - SECOND),
    }
    _create(store, "future", T0 + timedelta(microseconds=1))
    _create(store, "ended", T0 - timedelta(hours=1), phase=Phase.STOPPED)
    claimed = store.claim_due("w1:1:a", T0, TTL, limit=10)
    assert _ids(claimed) == ["late", "a-tie", "b-tie", "now"]
    for lease, record, text in ((c.lease, c.record, c.contract_text) for c in claimed):
        assert record == records[lease.operation_id] and text == CONTRACT
        assert (lease.owner, lease.token, lease.expires_at) == ("w1:1:a", 1, T0 + TTL)
        stored = store.get(lease.operation_id)
        assert stored is not None
        assert (stored.lease_owner, stored.lease_token, stored.lease_expires_at) == ("w1:1:a", 1, T0 + TTL)
    assert store.claim_due("w2:2:b", T0, TTL, limit=10) == []
    assert _ids(store.claim_due("w2:2:b", T0 + SECOND, TTL, limit=10)) == ["future"]


def test_next_due_is_the_earliest_active_poll_time(store: AnyStore) -> None:
    assert store.next_due() is None
    _create(store, "ended", T0 - timedelta(hours=1), phase=Phase.STOPPED)
    assert store.next_due() is None
    _create(store, "later", T0 + timedelta(minutes=5))
    _create(store, "sooner", T0 + timedelta(seconds=3, microseconds=250))
    assert store.next_due() == T0 + timedelta(seconds=3, microseconds=250)
    assert store.claim_due("w1:1:a", T0 + timedelta(seconds=4), TTL, limit=1) != []
    assert store.next_due() == T0 + timedelta(seconds=3, microseconds=250)  # leased rows still count
    # ... but not for a lane that found nothing to claim: the leased row is in flight elsewhere.
    assert store.next_due(free_at=T0 + timedelta(seconds=4)) == T0 + timedelta(minutes=5)
    assert store.next_due(free_at=T0 + timedelta(seconds=4) + TTL) == T0 + timedelta(seconds=3, microseconds=250)


def test_a_claim_passes_over_the_contracts_it_is_told_to_skip_and_so_does_next_due(store: AnyStore) -> None:
    """A worker still reading a contract's credential (its token command) does not claim that contract's operations,
    nor wake for them: they stay due, for a worker that has the credential, or for this one once it has."""
    other = CONTRACT.replace('name = "exports"', 'name = "reports"')
    _create(store, "first", T0 - 2 * SECOND)
    record = new_record(parse_contract(other), operation_id="other", job_id="job-other", now=T0 - timedelta(minutes=1))
    store.create(record.deferred(T0 - 3 * SECOND), other, ev.Created.prepared({}))
    assert store.next_due(skip={"reports"}) == T0 - 2 * SECOND
    assert store.next_due(free_at=T0, skip={"exports", "reports"}) is None
    assert _ids(store.claim_due("w1:1:a", T0, TTL, limit=10, skip={"reports"})) == ["first"]
    assert store.claim_due("w1:1:a", T0, TTL, limit=10, skip={"reports"}) == []
    claimed, written = store.claim_due_then_write("w2:2:b", T0, TTL, 10, lambda claimed: [], skip={"exports"})
    assert (_ids(claimed), written) == (["other"], [])


def test_the_limit_takes_the_most_overdue_first(store: AnyStore) -> None:
    for i in range(5):
        _create(store, f"op{i}", T0 - i * SECOND)
    assert _ids(store.claim_due("w1:1:a", T0, TTL, limit=2)) == ["op4", "op3"]
    assert _ids(store.claim_due("w2:2:b", T0, TTL, limit=2)) == ["op2", "op1"]
    assert _ids(store.claim_due("w3:3:c", T0, TTL, limit=2)) == ["op0"]
    assert store.claim_due("w3:3:c", T0, TTL, limit=0) == []


def test_a_leased_operation_is_skipped_until_its_lease_expires_then_taken_over(store: AnyStore) -> None:
    _create(store, "held", T0 - SECOND)
    _create(store, "free", T0 - SECOND)
    held = store.claim("held", "w1:1:a", T0 - SECOND, TTL)
    assert held is not None
    assert _ids(store.claim_due("w2:2:b", T0, TTL, limit=10)) == ["free"]
    assert store.claim_due("w2:2:b", T0 - SECOND + TTL - timedelta(microseconds=1), TTL, limit=10) == []
    taken = store.claim_due("w3:3:c", T0 - SECOND + TTL, TTL, limit=10)
    assert [(c.lease.operation_id, c.lease.token) for c in taken] == [("held", 2)]
    assert store.events("held")[-1].kind == "lease_taken_over"
    assert store.events("held")[-1].data == {"previous_owner": "w1:1:a", "owner": "w3:3:c", "token": 2}
    # The first holder woke up late: its write is fenced off.
    assert not store.write(held[0], reserve(held[1], T0), [ev.Reserved.prepared({})], T0, release=True)
    assert store.write(taken[0].lease, reserve(taken[0].record, T0), [ev.Reserved.prepared({})], T0, release=True)
    stored = store.get("held")
    assert stored is not None and stored.record.status_requests_used == 1 and stored.lease_owner is None


def test_tokens_grow_with_every_claim_and_a_released_row_is_claimed_without_a_takeover(store: AnyStore) -> None:
    _create(store, "op", T0)
    tokens = []
    for round_ in range(3):
        now = T0 + round_ * SECOND
        (claimed, *rest) = store.claim_due(f"w{round_}:1:a", now, TTL, limit=1)
        lease, record = claimed.lease, claimed.record
        assert rest == []
        tokens.append(lease.token)
        assert store.write(lease, record.deferred(now + SECOND), [ev.Paced.prepared({})], now, release=True)
    assert tokens == [1, 2, 3]
    assert "lease_taken_over" not in [e.kind for e in store.events("op")]


def test_concurrent_claimers_never_share_an_operation_in_a_round(store: AnyStore, backend: Backend) -> None:
    """8 claimers, each with a store of its own (a worker process), 3 rounds over 60 due operations."""
    operations = 60
    claimers = 8
    for i in range(operations):
        _create(store, f"op{i:02d}", T0 - (i % 7) * SECOND)
    stores = [backend.open() for _ in range(claimers)]
    for round_ in range(3):
        now = T0 + round_ * timedelta(minutes=1)
        taken: list[list[str]] = [[] for _ in range(claimers)]

        def work(index: int, now: datetime = now, taken: list[list[str]] = taken, round_: int = round_) -> None:
            mine = stores[index]
            claimed: list[Claimed] = []
            while batch := mine.claim_due(f"worker-{index}:1:x", now, TTL, limit=3):
                claimed.extend(batch)
            # Finish the round as a worker would: one fenced write per claim, lease released.
            for c in claimed:
                polled = reserve(c.record, now).deferred(now + timedelta(minutes=1))
                assert mine.write(c.lease, polled, [ev.Paced.prepared({"round": round_})], now, release=True)
            taken[index] = _ids(claimed)

        run_threads(claimers, work)
        counts = Counter(op for ops in taken for op in ops)
        assert [op for op, n in counts.items() if n > 1] == []
        assert len(counts) == operations
    for stored in store.all():
        assert stored.lease_token == 3 and stored.record.status_requests_used == 3 and stored.lease_owner is None


def test_one_postgres_store_is_safe_to_share_between_threads(pg_store: PostgresStore) -> None:
    """A worker process runs many claim loops over one pool; more threads than connections must queue."""
    store = pg_store
    for i in range(40):
        _create(store, f"op{i:02d}", T0)
    seen: list[str] = []
    lock = threading.Lock()

    def work(index: int) -> None:
        while batch := store.claim_due(f"thread-{index}:1:x", T0, TTL, limit=2):
            with lock:
                seen.extend(_ids(batch))

    run_threads(10, work)
    assert sorted(seen) == [f"op{i:02d}" for i in range(40)]


def test_a_dead_holders_lease_is_claimed_at_once_and_every_other_held_one_waited_out(store: AnyStore) -> None:
    """The fleet claim keeps `claim`'s rule (`lease_held`): a holder proved gone (this host, boot and PID namespace,
    its pid gone) cannot be sending, so its lease is not waited out; one that cannot be proved gone (alive, another
    host, namespace or boot, or an owner that does not say) is waited out, whoever the claimer is."""
    boot, pidns = this_place()
    if boot is None or pidns is None:
        pytest.skip("no /proc here: nothing can be proved dead, every lease runs out")
    dead = _no_process()
    holders = {
        "dead": process_owner("worker", pid=dead),
        "dead-too": process_owner("worker", pid=dead),
        "alive": process_owner("worker"),  # this test's own process
        "elsewhere": f"worker/elsewhere-{this_host()}:{dead}:aa:{boot}:{pidns}",
        "other-namespace": f"worker/{this_host()}:{dead}:aa:{boot}:1",
        "other-boot": f"worker/{this_host()}:{dead}:aa:{'0' * 16}:{pidns}",
        "unprovable": f"worker/{this_host()}:{dead}:aa",
    }
    for op, holder in holders.items():
        _create(store, op, T0 - SECOND)
        assert store.claim(op, holder, T0 - SECOND, TTL) is not None
    _create(store, "free", T0)
    claimer = process_owner("worker")
    # Earliest due first, whether free or a dead holder's; a store's first claim looks for dead holders.
    hour = timedelta(hours=1)  # the claimer's own leases outlast the test
    assert _ids(store.claim_due(claimer, T0, hour, limit=1)) == ["dead"]
    claimed, written = store.claim_due_then_write(claimer, T0, hour, 10, lambda claimed: [])  # the worker's claim
    assert (_ids(claimed), written) == (["dead-too", "free"], [])
    assert [c.lease.token for c in claimed] == [2, 1]
    for op in ("dead", "dead-too"):
        taken = [e.data for e in store.events(op) if e.kind == "lease_taken_over"]
        assert [(e["previous_owner"], e["owner"]) for e in taken] == [(holders[op], claimer)]
    assert store.claim_due(process_owner("worker"), T0, TTL, limit=10) == []  # the claimer is alive
    assert sorted(_ids(store.claim_due(claimer, T0 - SECOND + TTL, TTL, limit=10))) == sorted(
        op for op in holders if not op.startswith("dead")
    )

    # A claim that fills its limit with free rows looks for dead holders once a PROBE_EVERY, not every time: the
    # claim above found fewer rows than its limit, so it looked.
    later = T0 - SECOND + TTL
    _create(store, "dead-later", T0)
    assert store.claim("dead-later", process_owner("worker", pid=dead), later, TTL) is not None
    _create(store, "free-1", T0 + SECOND)
    _create(store, "free-2", T0 + SECOND)
    assert _ids(store.claim_due(claimer, later + PROBE_EVERY - timedelta(microseconds=1), TTL, limit=1)) == ["free-1"]
    assert _ids(store.claim_due(claimer, later + PROBE_EVERY, TTL, limit=1)) == ["dead-later"]


def test_a_dead_holder_with_expired_and_unexpired_leases_has_each_row_claimed_once(store: AnyStore) -> None:
    """A killed worker's leases run out at different times (each reservation extends its own): its expired rows are
    free and its unexpired ones are a dead holder's, two reads of one claim. A row of both reads was claimed twice in
    one transaction, and the claim raised (`zip() argument 2 is longer`), stopping every worker on the host."""
    boot, pidns = this_place()
    if boot is None or pidns is None:
        pytest.skip("no /proc here: nothing can be proved dead, every lease runs out")
    dead = process_owner("worker", pid=_no_process())
    _create(store, "early", T0 - timedelta(seconds=60))
    _create(store, "late", T0 - timedelta(seconds=60))
    assert store.claim("early", dead, T0 - timedelta(seconds=40), TTL) is not None  # ran out at T0 - 10 s
    assert store.claim("late", dead, T0 - timedelta(seconds=5), TTL) is not None  # runs until T0 + 25 s
    claimed = store.claim_due(process_owner("worker"), T0, TTL, limit=10)
    assert sorted(_ids(claimed)) == ["early", "late"]
    assert [c.lease.token for c in sorted(claimed, key=lambda c: c.lease.operation_id)] == [2, 2]


def _no_process() -> int:
    """A pid no process has: past the kernel's largest (no process is started: tests/store runs in `make test-fast`)."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
