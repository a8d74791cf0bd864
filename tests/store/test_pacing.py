"""Fleet-wide pacing per provider: slots are spaced by the interval on both backends, far ones not taken."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pollwarden.core.contract.parse import parse_contract
from pollwarden.core.decide import defer
from pollwarden.core.record import new_record
from tests.store.conftest import AnyStore, Backend, run_threads

T0 = datetime(2026, 4, 18, 10, 20, tzinfo=UTC)
MS = timedelta(milliseconds=1)
HORIZON = timedelta(seconds=1)


def test_unpaced_provider_is_not_limited(store: AnyStore) -> None:
    assert store.pace("exports", T0, interval=None, horizon=HORIZON) is None


def test_slots_are_spaced_and_far_slots_are_only_reported(store: AnyStore) -> None:
    interval = 250 * MS
    taken = [store.pace("exports", T0, interval=interval, horizon=HORIZON) for _ in range(5)]
    assert taken == [(T0 + n * interval, True) for n in range(5)]
    # The next free slot is 1.25 s away, beyond the horizon: reported, not taken, and reported again.
    assert store.pace("exports", T0, interval=None, horizon=HORIZON) == (T0 + 5 * interval, False)
    assert store.pace("exports", T0, interval=None, horizon=HORIZON) == (T0 + 5 * interval, False)
    # Time moves on: an idle provider's slot is "now", never a burst of saved-up slots.
    later = T0 + timedelta(minutes=5)
    assert store.pace("exports", later, interval=None, horizon=HORIZON) == (later, True)
    assert store.pace("exports", later, interval=None, horizon=HORIZON) == (later + interval, True)
    assert store.pace("other", T0, interval=None, horizon=HORIZON) is None


def test_concurrent_workers_never_share_a_slot(store: AnyStore, backend: Backend) -> None:
    store.pace("exports", T0, interval=10 * MS, horizon=HORIZON)  # configure, take slot T0
    slots: list[datetime] = []

    def claim(_: int) -> None:
        mine = backend.open()
        for _ in range(10):
            paced = mine.pace("exports", T0, interval=None, horizon=timedelta(hours=1))
            assert paced is not None and paced[1]
            slots.append(paced[0])

    run_threads(4, claim)
    assert sorted(slots) == [T0 + n * 10 * MS for n in range(1, 41)]


def test_defer_moves_later_never_earlier_and_never_past_the_deadline() -> None:
    contract = parse_contract(
        'name = "x"\nstatus_url = "http://h/{job_id}"\n[states]\npending = ["r"]\nsuccess = ["s"]\nfailure = ["f"]\n'
        '[fields]\nstate = "state"\n[limits]\ndeadline = "1m"\n',
        source="t",
    )
    record = new_record(contract, operation_id="op", job_id="j", now=T0).deferred(T0 + timedelta(seconds=10))
    assert defer(record, T0).next_poll_at == T0 + timedelta(seconds=10)
    assert defer(record, T0 + timedelta(seconds=20)).next_poll_at == T0 + timedelta(seconds=20)
    assert defer(record, T0 + timedelta(hours=1)).next_poll_at == record.deadline_at
