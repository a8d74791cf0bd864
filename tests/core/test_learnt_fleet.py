"""A fleet's learnt checks do not come in waves (issue 26): operations admitted together (one `enqueue`, a batch)
are all the same age at every moment, so a plan in ages since creation sends all their checks together. Each
operation's plan is moved earlier by its own share of `FLEET_SHARE` of the lag target (a phase drawn from its
id, so `why` replays it): pure core, a simulated clock, the spread measured in the checks' planned times."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta

from pollwarden.core import decide, observe, reserve
from pollwarden.core.learnt import FLEET_SHARE, JITTER_SHARE, Learnt, Sample, first_check, learn
from pollwarden.core.reasons import DelaySource
from pollwarden.core.record import OperationRecord
from tests.core.support import T0, body, make_contract, make_record, response

LAG = 30.0
JOBS = 50


def _model() -> Learnt:
    rng = random.Random(1)
    model = learn("exports", [Sample(t, t + 5.0) for t in (30.0 + 150 * rng.random() for _ in range(200))], LAG)
    assert model is not None
    return model


def _together(model: Learnt) -> list[OperationRecord]:
    """`JOBS` operations admitted in one instant (ids as admission makes them: a random token each)."""
    rng = random.Random(9)
    created = make_record(make_contract(max_delay="5m", deadline="2h", max_requests=50))
    return [
        first_check(replace(created, operation_id=f"exports-20260101-{rng.getrandbits(24):06x}"), model, rng.random())
        for _ in range(JOBS)
    ]


def _spread(moments: list[datetime]) -> float:
    return (max(moments) - min(moments)).total_seconds()


def test_operations_admitted_together_spread_their_first_check_over_a_quarter_of_the_target() -> None:
    model = _model()
    records = _together(model)
    assert {r.delay_source for r in records} == {DelaySource.LEARNT}
    first = model.checks[0]
    planned = [(r.next_poll_at - T0).total_seconds() for r in records]
    # Never later than the plan (the jitter's half aside): earlier checks never make a job found later.
    assert max(planned) <= first + JITTER_SHARE * LAG / 2
    assert min(planned) >= first - (FLEET_SHARE + JITTER_SHARE / 2) * LAG
    # Was within 1.5 s (+-2.5 % of the target): all 50 at once.
    assert _spread([r.next_poll_at for r in records]) >= 0.8 * FLEET_SHARE * LAG


def test_their_later_checks_stay_spread() -> None:
    model = _model()
    later = []
    rng = random.Random(4)
    contract = make_contract(max_delay="5m", deadline="2h", max_requests=50)
    for record in _together(model):
        at = record.next_poll_at
        reserved = reserve(record, at)
        decision = decide(reserved, observe(contract, response(body("running"), at=at)), at, rng.random(), model)
        assert decision.delay_source is DelaySource.LEARNT
        assert decision.next_poll_at is not None
        later.append(decision.next_poll_at)
    assert _spread(later) >= 0.8 * FLEET_SHARE * LAG


def test_the_phase_is_the_operations_own_so_a_replay_places_it_again() -> None:
    model = _model()
    records = _together(model)
    again = [first_check(replace(r, next_poll_at=r.created_at), model, 0.5) for r in records]
    assert [r.next_poll_at for r in again] == [
        first_check(replace(r, next_poll_at=r.created_at), model, 0.5).next_poll_at for r in records
    ]
    assert _spread([r.next_poll_at for r in again]) >= 0.8 * FLEET_SHARE * LAG  # the same draw: the phase spreads
    assert all(timedelta(0) < r.next_poll_at - T0 for r in again)


def test_a_model_recorded_before_the_phase_existed_places_its_checks_as_it_did_then() -> None:
    """A decision's recorded model is what `why` replays with: one recorded before the phase (no `fleet_share` in
    its JSON) must place the same checks it placed then, not move them by a phase it never had."""
    model = _model()
    recorded = model.to_json()
    assert recorded["fleet_share"] == FLEET_SHARE
    old = Learnt.from_json({k: v for k, v in recorded.items() if k != "fleet_share"})
    assert old.fleet_share == 0.0 and Learnt.from_json(recorded) == model
    records = [first_check(r, old, 0.5) for r in _together(model)]
    assert {(r.next_poll_at - T0).total_seconds() for r in records} == {
        (first_check(records[0], replace(model, fleet_share=0.0), 0.5).next_poll_at - T0).total_seconds()
    }


def test_a_damaged_recorded_fleet_share_is_refused() -> None:
    recorded = _model().to_json()
    for bad in (-0.1, 1.5, float("nan"), "wide"):
        try:
            Learnt.from_json(recorded | {"fleet_share": bad})
        except ValueError as exc:
            assert "fleet_share" in str(exc) or "damaged" in str(exc)
        else:
            raise AssertionError(f"fleet_share {bad!r} was accepted")
