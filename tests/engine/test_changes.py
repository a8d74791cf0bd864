"""The changes of an operation other than its poll (`engine.changes`): one claim policy, one release-on-error, a
fenced write that cannot be ignored, and the fleet's pacing as a due time. Both backends."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from pollwarden import events as ev
from pollwarden.core.contract.parse import parse_contract
from pollwarden.core.decide import reserve
from pollwarden.core.reasons import DelaySource
from pollwarden.core.record import OperationRecord, new_record
from pollwarden.engine import changes
from pollwarden.events import Reserved
from pollwarden.report.ownership import lease_ttl_of, ownership_of
from pollwarden.store.base import DecisionTaken, Resolution
from tests.store.conftest import AnyStore
from tests.store.test_store import _stop_with_decision

CONTRACT = """\
name = "deploys"
status_url = "http://127.0.0.1:9/jobs/{job_id}"
[states]
pending = ["running"]
success = ["succeeded"]
failure = ["failed"]
[fields]
state = "state"
[limits]
deadline = "2h"
max_requests = 50
"""
T0 = datetime(2026, 4, 18, 10, 20, tzinfo=UTC)
TTL = timedelta(seconds=10)
SECOND = timedelta(seconds=1)


def _create(store: AnyStore, op: str, due: datetime) -> OperationRecord:
    record = new_record(parse_contract(CONTRACT), operation_id=op, job_id=f"job-{op}", now=T0 - timedelta(minutes=10))
    record = record.waiting(due, DelaySource.LOCAL_BACKOFF)
    store.create(record, CONTRACT, ev.Created.prepared({}))
    return record


def _polled(held: changes.Held, now: datetime) -> None:
    """A poll as the flow writes its reservation, then the answer's wait: the record changes, so pacing ends."""
    reserved = reserve(held.record, now).waiting(now + timedelta(minutes=30), DelaySource.LOCAL_BACKOFF)
    held.write(reserved, [Reserved.prepared(Reserved.payload(reserved, held.lease.token))])


def test_pacing_keeps_the_backlog_due_and_writes_one_event_per_wait(store: AnyStore) -> None:
    """62 operations due for a provider paced to one request every 5 s, the fleet waking every second for 90 s:
    the gauges count every unpolled one as due (the one due for 7 minutes as overdue and as the oldest lag) the
    whole time, and each operation's wait for its slot is one `paced` event, however often a claim met it."""
    interval = timedelta(seconds=5)
    late = _create(store, "op-late", T0 - timedelta(minutes=7))
    ops = [late.operation_id] + [_create(store, f"op-{n:02}", T0).operation_id for n in range(61)]
    assert store.pace("deploys", T0, interval=interval, horizon=changes.PACING_HORIZON) == (T0, True)  # taken
    polled: list[str] = []
    late_seen = 0
    for tick in range(90):
        now = T0 + tick * SECOND
        for claimed in store.claim_due("worker-a", now, TTL, limit=100):
            held = changes.Held.of(store, claimed, lambda now=now: now)  # type: ignore[misc]
            slot = changes.pace_due(held, "deploys", interval, now)
            if slot.taken:  # the near slot is waited for in place (at most the horizon): the poll goes then
                assert slot.at - now <= changes.PACING_HORIZON
                _polled(held, slot.at)
                polled.append(claimed.lease.operation_id)
            else:
                assert slot.at > now
        (counts,) = store.fleet_counts(now, lease_ttl_of)
        unpolled = len(ops) - len(polled)
        assert (counts.active, counts.due) == (len(ops), unpolled), tick
        if late.operation_id not in polled:
            assert counts.overdue >= 1 and counts.oldest_due == late.next_poll_at, tick
            stored = store.get(late.operation_id)  # `status` and the console read it as overdue too
            assert stored is not None and stored.lease_owner is None and ownership_of(stored, now).overdue, tick
            late_seen += 1
    assert late_seen == 5 and polled[0] == late.operation_id  # paced to the next slot, 5 s, counted meanwhile
    assert 17 <= len(polled) <= 18  # one every 5 s after the slot taken before
    assert len(set(polled)) == len(polled)
    paced = Counter(op for op in ops for e in store.events(op) if e.kind == "paced")
    assert set(paced) == set(ops) and max(paced.values()) == 1, paced  # every one waited, each wait one event


def test_a_paced_operation_is_not_claimed_before_its_slot_nor_slept_past(store: AnyStore) -> None:
    _create(store, "a", T0)
    _create(store, "b", T0)
    first, second = store.claim_due("w", T0, timedelta(minutes=1), limit=10)
    assert changes.pace_due(changes.Held.of(store, first, lambda: T0), "deploys", 10 * SECOND, T0).taken
    slot = changes.pace_due(changes.Held.of(store, second, lambda: T0), "deploys", None, T0)
    assert slot == changes.Slot(T0 + 10 * SECOND, taken=False)
    # `first` still holds its lease (its poll is on its way): nothing else is claimable before the slot.
    assert store.claim_due("w", T0 + 9 * SECOND, TTL, limit=10) == []
    assert store.next_due(free_at=T0 + SECOND) == T0 + 10 * SECOND
    (again,) = store.claim_due("w", T0 + 10 * SECOND, TTL, limit=10)
    assert again.lease.operation_id == second.lease.operation_id


def test_a_lost_lease_is_refused_not_ignored(store: AnyStore) -> None:
    _create(store, "a", T0)
    _create(store, "b", T0)
    first, second = store.claim_due("w", T0, TTL, limit=10)
    assert changes.pace_due(changes.Held.of(store, first, lambda: T0), "deploys", 60 * SECOND, T0).taken
    later = T0 + 2 * TTL  # the next slot is 40 s further: `second` would be paced, but its lease is gone
    assert store.claim("b", "other", later, TTL) is not None  # the lease ran out and was taken
    with pytest.raises(changes.TakenOver):
        changes.pace_due(changes.Held.of(store, second, lambda: later), "deploys", None, later)
    with pytest.raises(changes.TakenOver):
        _polled(changes.Held.of(store, second, lambda: later), later)
    assert [e.kind for e in store.events("b") if e.kind == "paced"] == []


def test_holding_gives_the_lease_back_on_any_error_and_waits_as_patient_as_asked(store: AnyStore) -> None:
    _create(store, "a", T0)

    class Refused(Exception):
        pass

    with pytest.raises(Refused), changes.holding(store, "a", "person", TTL, lambda: T0) as held:
        assert held.record.operation_id == "a"
        raise Refused
    assert store.claim("a", "agent", T0, TTL) is not None  # given back: free at once
    with pytest.raises(changes.HeldElsewhere):
        changes.claim(store, "a", "person", TTL, lambda: T0, changes.AT_ONCE)
    stopping = threading.Event()
    stopping.set()  # a process that is leaving waits for nobody, however patient
    with pytest.raises(changes.HeldElsewhere):
        changes.claim(store, "a", "person", TTL, lambda: T0, changes.Patience(3600, stopping))


def test_a_write_of_the_record_ends_the_wait_and_the_next_wait_is_told_again(store: AnyStore) -> None:
    """One event per wait, not one per operation for ever: any write of the record (a poll, a person's answer)
    ends the wait, and pacing it again is a new wait with its own event."""
    _create(store, "a", T0)
    _create(store, "b", T0)
    first, second = store.claim_due("w", T0, TTL, limit=10)
    changes.pace_due(changes.Held.of(store, first, lambda: T0), "deploys", 60 * SECOND, T0)  # takes the free slot
    assert not changes.pace_due(changes.Held.of(store, second, lambda: T0), "deploys", None, T0).taken
    # A person's answer (here: narrowed limits, any fenced write) claims it by name, paced or not.
    with changes.holding(store, "b", "person", TTL, lambda: T0) as held:
        held.write(held.record, [ev.WatchInterrupted.of(held.record, by="person", why="a write of the record")])
    assert store.claim_due("w", T0 + SECOND, TTL, limit=10)[0].lease.operation_id == "b"  # due at once again
    (again,) = [c for c in store.claim_due("w2", T0 + 20 * SECOND, TTL, limit=10) if c.lease.operation_id == "b"]
    later = T0 + 20 * SECOND
    assert not changes.pace_due(changes.Held.of(store, again, lambda: later), "deploys", None, later).taken
    assert [e.kind for e in store.events("b")].count("paced") == 2


def test_a_persons_answer_is_fenced_once_only_and_refused_on_a_lost_lease(store: AnyStore) -> None:
    _stop_with_decision(store, "op", "d-1")
    old = store.claim("op", "decide", T0, TTL)
    assert old is not None
    assert store.claim("op", "other", T0 + TTL, TTL) is not None  # the answer's lease ran out and was taken
    with pytest.raises(changes.TakenOver):
        changes.Held(store, old[0], old[1], lambda: T0).resolve(Resolution("d-1", "refused", "ana"), None, [])
    still = store.get_decision("d-1")
    assert still is not None and still.status == "open"
    later = T0 + 2 * TTL
    with changes.holding(store, "op", "decide", TTL, lambda: later) as held:
        held.resolve(Resolution("d-1", "refused", "ana", "not now"), None, [])
    with pytest.raises(DecisionTaken), changes.holding(store, "op", "decide", TTL, lambda: later) as again:
        again.resolve(Resolution("d-1", "decided", "bo", option=1), None, [])
    answered = store.get_decision("d-1")
    assert answered is not None and (answered.status, answered.decided_by, answered.decided_at) == (
        "refused",
        "ana",
        later,
    )
    assert store.claim("op", "next", later, TTL) is not None  # both answers gave the lease back
