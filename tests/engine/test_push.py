"""A provider's push received by the engine (`engine.push.receive`), on both backends: a signed push makes the
job's operation due now with a `woken_by_push` event and a ring of the store's bell; a replay, a forgery, a
stale or oversized push changes nothing; a push for no operation is answered as one that woke one; a storm of
pushes wakes one check per min_interval."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from pollwarden.core.admission import WatchRequest
from pollwarden.core.contract.parse import Contract, parse_contract
from pollwarden.core.push_signature import MAX_BODY_BYTES
from pollwarden.core.reasons import DelaySource
from pollwarden.engine import Engine
from pollwarden.engine.push import receive, wake_one
from pollwarden.events import Paced
from pollwarden.simulator import contract_text
from pollwarden.simulator.push import forged, signed_push
from pollwarden.store.base import Store
from tests.conftest import install

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
PUSH = (
    '\n[push]\nkind = "standard-webhooks"\nsecret_env = "EXPORTS_HOOK"\njob_id = "data.id"\nevents = ["export.done"]\n'
)


def _contract() -> Contract:
    return parse_contract(contract_text("http://127.0.0.1:9", base_delay="10m", max_delay="10m", deadline="1h",
                                        extra=PUSH), source="test.toml")  # fmt: skip


def _signed(
    job_id: str, delivery: str, *, event: str = "export.done", stamp: int | None = None
) -> tuple[dict[str, str], bytes]:
    headers, body = signed_push(SECRET, job_id, delivery, stamp=stamp, event=event)
    return {name.lower(): value for name, value in headers.items()}, body


def _admitted(store: Store, contract: Contract, job_id: str = "exp-1") -> str:
    install(store, contract)
    engine = Engine(store, owner="watch-1")
    operation_id = engine.admit(WatchRequest(contract, job_id, by="test")).record.operation_id
    now = store.db_now()
    claimed = store.claim(operation_id, "watch-1", now, timedelta(seconds=30))
    assert claimed is not None
    lease, record = claimed  # as a first check would leave it: next one in 10 minutes
    later = record.waiting(now + timedelta(minutes=10), DelaySource.LOCAL_BACKOFF)
    assert store.write(lease, later, [Paced(provider="test", until=None)], now, release=True)
    return operation_id


def _kinds(store: Store, operation_id: str) -> list[str]:
    return [event.kind for event in store.events(operation_id)]


def test_a_signed_push_makes_the_operation_due_now_with_its_event(store: Store) -> None:
    contract = _contract()
    operation_id = _admitted(store, contract)
    listener = store.bell().listen()
    try:
        headers, body = _signed("exp-1", "msg_2Kx1")
        answer = receive(store, contract, headers, body, secret=SECRET, owner="hooks")
        assert (answer.status, answer.outcome, answer.woken) == (202, "woken", (operation_id,))
        assert listener.wait(60.0)  # the ring reached this listener: an event (60 s only bounds a hang)
    finally:
        listener.close()
    stored = store.get(operation_id)
    assert stored is not None and stored.record.delay_source is DelaySource.PROVIDER_PUSH
    assert stored.record.next_poll_at <= store.db_now()
    assert stored.record.status_requests_used == 0  # the check it causes reserves, as every check does
    woke = store.events(operation_id)[-1]
    assert woke.kind == "woken_by_push" and woke.data["delivery"] == "msg_2Kx1"
    assert woke.data["event_type"] == "export.done" and "data" not in woke.data  # never the body
    assert stored.lease_owner is None  # given back at once


def test_a_replay_is_answered_alike_and_changes_nothing(store: Store) -> None:
    contract = _contract()
    operation_id = _admitted(store, contract)
    headers, body = _signed("exp-1", "msg_once")
    assert receive(store, contract, headers, body, secret=SECRET, owner="hooks").outcome == "woken"
    before = _kinds(store, operation_id)
    again = receive(store, contract, headers, body, secret=SECRET, owner="hooks")
    assert (again.status, again.outcome) == (202, "replayed")
    assert _kinds(store, operation_id) == before


def test_forged_stale_and_oversized_pushes_change_nothing(store: Store) -> None:
    contract = _contract()
    operation_id = _admitted(store, contract)
    before = store.get(operation_id)
    headers, body = _signed("exp-1", "msg_forged")
    bad = {**headers, "webhook-signature": forged(headers["webhook-signature"])}
    stale_headers, stale_body = _signed("exp-1", "msg_stale", stamp=int(time.time()) - 301)
    answers = [
        receive(store, contract, bad, body, secret=SECRET, owner="hooks"),
        receive(store, contract, headers, body, secret="whsec_" + "A" * 32, owner="hooks"),
        receive(store, contract, stale_headers, stale_body, secret=SECRET, owner="hooks"),
        receive(store, contract, headers, b" " * (MAX_BODY_BYTES + 1), secret=SECRET, owner="hooks"),
        receive(store, contract, headers, body, secret=None, owner="hooks"),
    ]
    assert [(a.status, a.outcome) for a in answers] == [
        (401, "bad_signature"), (401, "bad_signature"), (401, "stale"), (413, "too_large"), (503, "no_secret")
    ]  # fmt: skip
    assert store.get(operation_id) == before
    assert _kinds(store, operation_id) == ["created", "paced"]
    # Not even remembered: the real delivery, after its forgeries, still wakes.
    assert receive(store, contract, headers, body, secret=SECRET, owner="hooks").outcome == "woken"


def test_a_push_for_no_operation_is_answered_as_one_that_woke(store: Store) -> None:
    contract = _contract()
    _admitted(store, contract)
    known = receive(store, contract, *_signed("exp-1", "msg_a"), secret=SECRET, owner="hooks")
    unknown = receive(store, contract, *_signed("exp-nobody", "msg_b"), secret=SECRET, owner="hooks")
    unlisted = receive(store, contract, *_signed("exp-1", "msg_c", event="export.started"), secret=SECRET, owner="x")
    assert known.status == unknown.status == unlisted.status == 202
    assert (unknown.outcome, unlisted.outcome) == ("accepted", "ignored")


def test_a_storm_of_pushes_wakes_one_check(store: Store) -> None:
    contract = _contract()
    operation_id = _admitted(store, contract)
    outcomes = [
        receive(store, contract, *_signed("exp-1", f"msg_{n}"), secret=SECRET, owner="hooks").outcome for n in range(50)
    ]
    assert outcomes.count("woken") == 1 and outcomes.count("accepted") == 49
    assert _kinds(store, operation_id).count("woken_by_push") == 1
    stored = store.get(operation_id)
    assert stored is not None and stored.record.next_poll_at <= store.db_now() + timedelta(seconds=1)


def _checked(store: Store, operation_id: str) -> None:
    """What a check leaves: answered just now ("running"), the next one ten minutes on."""
    now = store.db_now()
    claimed = store.claim(operation_id, "watch-1", now, timedelta(seconds=30))
    assert claimed is not None
    lease, record = claimed
    answered = record.observed(at=now, http_status=200, request_id=None, state="running", rate_limited=False)
    later = answered.waiting(now + timedelta(minutes=10), DelaySource.LOCAL_BACKOFF)
    assert store.write(lease, later, [Paced(provider="test", until=None)], now, release=True)


def test_a_push_just_after_a_check_wakes_at_once_and_the_next_woken_check_waits_min_interval(store: Store) -> None:
    """min_interval counts from the last woken check, kept in the stored record, not from the last answer."""
    contract = _contract()
    operation_id = _admitted(store, contract)
    _checked(store, operation_id)  # a scheduled check answered a moment ago
    first = receive(store, contract, *_signed("exp-1", "msg_after_check"), secret=SECRET, owner="hooks")
    assert first.outcome == "woken"
    stored = store.get(operation_id)
    assert stored is not None and stored.record.woken_at is not None
    assert stored.record.next_poll_at <= store.db_now()  # due at once, not a second after that answer
    woken_at = stored.record.woken_at
    _checked(store, operation_id)  # the woken check ran; the job still runs
    second = receive(store, contract, *_signed("exp-1", "msg_storm"), secret=SECRET, owner="hooks")
    assert second.outcome == "woken"
    again = store.get(operation_id)
    assert again is not None and again.record.next_poll_at == woken_at + timedelta(seconds=1)  # min_interval


@pytest.mark.parametrize("receiver", ["hooks", "watch-1"])
def test_a_push_during_a_check_in_flight_wakes_the_operation_once_that_check_is_recorded(
    store: Store, receiver: str
) -> None:
    """Found by `bench.push` ("push just after a check"): the provider answered "running", the job ended and
    pushed while the watch still held the lease to record that answer. The record was still due (the check in
    flight), so the push found nothing to do and was lost: the job waited for the whole safety-net schedule.
    A check in flight is busy: the receiver wakes the operation again once its answer is recorded. Whoever the
    receiver is: a worker's own (`worker --hooks-port`) wakes under the name that holds its checks' leases (a
    fix that skipped its own leases still lost the push in test_push_cli under load)."""
    contract = _contract()
    operation_id = _admitted(store, contract)
    now = store.db_now()
    in_flight = store.claim(operation_id, "watch-1", now, timedelta(seconds=30))
    assert in_flight is not None
    lease, record = in_flight
    due_now = record.waiting(now, DelaySource.LOCAL_BACKOFF)
    assert store.write(lease, due_now, [Paced(provider="test", until=None)], now, release=True)
    claimed = store.claim(operation_id, "watch-1", store.db_now(), timedelta(seconds=30))  # due now: its check
    assert claimed is not None
    lease, record = claimed
    pushed = receive(store, contract, *_signed("exp-1", "msg_in_flight"), secret=SECRET, owner=receiver)
    assert (pushed.status, pushed.busy) == (202, (operation_id,))
    answered = record.observed(at=store.db_now(), http_status=200, request_id=None, state="running", rate_limited=False)
    later = answered.waiting(store.db_now() + timedelta(minutes=10), DelaySource.LOCAL_BACKOFF)
    assert store.write(lease, later, [Paced(provider="test", until=None)], store.db_now(), release=True)
    assert pushed.wake is not None
    assert wake_one(store, contract, operation_id, pushed.wake, pushed.delivery_id, owner=receiver) == "moved"
    stored = store.get(operation_id)
    assert stored is not None and stored.record.next_poll_at <= store.db_now()
