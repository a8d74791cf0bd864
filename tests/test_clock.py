"""One clock: every claim, lease and audit time comes from the store's clock, which on PostgreSQL is the database
server's, read at most once a second and carried forward on the monotonic clock between (`CarriedClock`).

The end-to-end case (a `watch` whose host is a minute ahead, against a worker's lease on PostgreSQL) is in
tests/e2e/test_one_owner.py; here, the carried clock itself, and the Python API writing the store's time, not
its host's, against a store whose clock is an hour behind this host's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pollwarden import Succeeded, Watch
from pollwarden.audit import load_or_create_keys
from pollwarden.clock import CarriedClock
from pollwarden.simulator import Simulator
from pollwarden.store.sqlite import SQLiteStore
from tests.conftest import write_contract

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_store_is_asked_once_per_period_and_its_time_carried_forward_between() -> None:
    readings = [T0, T0 + timedelta(seconds=1.5)]
    asked: list[datetime] = []

    def read() -> datetime:
        asked.append(readings[len(asked)])
        return asked[-1]

    ticks = Ticks()
    clock = CarriedClock(read, every=1.0, monotonic=ticks)
    assert clock() == T0
    ticks.now += 0.25
    assert clock() == T0 + timedelta(seconds=0.25) and len(asked) == 1
    ticks.now += 1.0  # a second since the reading: asked again
    assert clock() == T0 + timedelta(seconds=1.5) and len(asked) == 2


def test_a_later_reading_that_is_earlier_never_turns_the_clock_back() -> None:
    readings = iter([T0, T0 + timedelta(seconds=0.5)])
    ticks = Ticks()
    clock = CarriedClock(lambda: next(readings), every=1.0, monotonic=ticks)
    assert clock() == T0
    ticks.now += 1.0
    assert clock() == T0 + timedelta(seconds=1.0)  # the database said 0.5 s: the clock holds what it gave


def test_a_store_that_cannot_be_asked_keeps_the_last_reading_going_and_is_asked_again() -> None:
    answers: list[datetime | Exception] = [T0, OSError("the database is away"), T0 + timedelta(seconds=3)]

    def read() -> datetime:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    ticks = Ticks()
    clock = CarriedClock(read, every=1.0, monotonic=ticks)
    assert clock() == T0
    ticks.now += 2.0
    assert clock() == T0 + timedelta(seconds=2.0)
    assert clock() == T0 + timedelta(seconds=3.0)
    with pytest.raises(OSError):
        CarriedClock(lambda: (_ for _ in ()).throw(OSError("never up")))()


class Behind(SQLiteStore):
    """A store whose clock is an hour behind this host's: a database server's, as a host a fleet shares."""

    def db_now(self) -> datetime:
        return super().db_now() - timedelta(hours=1)


def test_the_python_api_times_its_claims_and_audit_by_the_stores_clock(
    sim: Simulator, tmp_path: Path, home: Path
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    store = Behind(home / "pollwarden.db", keys=load_or_create_keys(home))
    try:
        started = datetime.now(UTC)
        outcome = Watch(contract, "happy-1", store=store, operation_id="op-behind").run()
        assert isinstance(outcome, Succeeded), outcome
        record = outcome.record
        hour = timedelta(hours=1)
        assert started - hour - timedelta(minutes=1) < record.created_at < started - hour + timedelta(minutes=1)
        events = store.events("op-behind")
        assert events and all(abs(event.at - record.created_at) < timedelta(minutes=1) for event in events)
        observed = [event for event in events if event.kind == "observed"]
        sent = [datetime.fromisoformat(str(event.data["sent_at"]).replace("Z", "+00:00")) for event in observed]
        assert sent and all(abs(at - record.created_at) < timedelta(minutes=1) for at in sent), sent
    finally:
        store.close()
