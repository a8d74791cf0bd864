"""Degenerate and hostile histories for the learnt schedule's estimate (`core.learnt`): the plan they give is
still one that finds the usual job within the lag target, and nothing a store could hand back raises."""

from __future__ import annotations

import math
import random
from datetime import timedelta

from pollwarden.core import Decision, decide, observe, reserve
from pollwarden.core.learnt import JITTER_SHARE, Learnt, Sample, estimate, learn
from pollwarden.core.reasons import DelaySource
from pollwarden.core.record import OperationRecord
from tests.core.support import T0, body, make_contract, make_record, response

LAG = 30.0
DAY = 86_400.0


def _minute_jobs(count: int, seed: int = 1) -> list[Sample]:
    """Jobs of about a minute, each bracketed by checks a few seconds apart."""
    rng = random.Random(seed)
    return [Sample(56.0 + 4 * rng.random(), 60.0 + 4 * rng.random()) for _ in range(count)]


def _first_check_lag(samples: list[Sample], duration: float) -> float:
    """How late the plan's checks (jitter at its mean, no `max_delay`) find a job of `duration`."""
    model = learn("exports", samples, LAG)
    assert model is not None
    age = 0.0
    while age < duration:
        delay = model.next_check(age, 0.5, checked=age > 0)
        assert delay is not None, (age, model.checks[:5])
        age += delay
    return age - duration


def test_one_enormous_outlier_does_not_coarsen_the_plan_for_every_other_job() -> None:
    usual = _minute_jobs(100)
    assert _first_check_lag(usual, 64.0) <= LAG
    # One job of 30 days among a hundred of a minute: the grid spanned all 30 days in 600 cells of 72 minutes,
    # so the first check came at 72 minutes and a minute's job was found 71 minutes late.
    outlier = [*usual, Sample(30 * DAY - 100, 30 * DAY)]
    assert _first_check_lag(outlier, 64.0) <= LAG
    model = learn("exports", outlier, LAG)
    assert model is not None
    assert model.p50 < 120.0, model.p50
    assert model.longest == 30 * DAY  # still the longest seen


def test_a_few_outliers_past_the_grid_count_as_its_tail() -> None:
    outliers = [*_minute_jobs(200), Sample(29 * DAY, 30 * DAY), Sample(20 * DAY, None)]
    model = learn("exports", outliers, LAG)
    assert model is not None
    assert model.p95 < 120.0
    assert model.next_check(model.checks[-1] + LAG, 0.5) is None  # past the plan: the plain backoff


def test_samples_no_store_should_hold_are_left_out_not_raised_on() -> None:
    usual = _minute_jobs(40)
    plain = learn("exports", usual, LAG)
    hostile = [
        Sample(-100.0, None),  # a censored one before its creation (clock skew between workers)
        Sample(float("nan"), 60.0),
        Sample(5.0, float("inf")),
        Sample(float("nan"), None),
        Sample(float("-inf"), None),
        Sample(70.0, float("nan")),
    ]
    model = learn("exports", usual + hostile, LAG)
    assert plain is not None and model is not None
    assert all(math.isfinite(c) for c in model.checks)
    assert math.isfinite(model.p50) and math.isfinite(model.p95) and math.isfinite(model.expected)
    assert model.checks[0] >= 50.0, model.checks  # the skewed censored one moved no mass to age 0


def test_time_running_backwards_in_a_sample_is_a_point_at_its_lower_bound() -> None:
    skewed = _minute_jobs(40) + [Sample(62.0, 10.0)] * 5  # upper before lower: a worker's clock behind
    model = learn("exports", skewed, LAG)
    assert model is not None and model.checks[0] >= 50.0 and model.p5 >= 50.0


def test_identical_and_zero_width_histories_give_a_plan() -> None:
    same = learn("exports", [Sample(60.0, 60.0)] * 50, LAG)
    assert same is not None
    assert 55.0 <= same.checks[0] <= 66.0, same.checks
    every = estimate([Sample(60.0, 60.0)] * 50, LAG)
    assert every is not None and every.at(61.0) == 1.0  # all of them ended by then, none in a tail
    assert 45.0 <= same.p5 <= same.p95 <= 60.0  # the smoothing spreads it by a quarter of the target
    instant = learn("exports", [Sample(0.0, 0.0)] * 50, LAG)
    assert instant is not None and instant.checks[0] <= LAG
    censored_only = learn("exports", [Sample(60.0, None)] * 500, LAG)
    assert censored_only is None


def test_a_planned_check_just_past_max_delay_keeps_its_jitter_within_max_delay() -> None:
    """Operations enqueued together whose planned checks lie a little past `max_delay` must not all check at
    exactly `max_delay` in one wave after another: the jitter moves such a check earlier, never later."""
    model = Learnt("exports", 40, LAG, (31.0, 62.0, 93.0, 124.0), 30.0, 60.0, 120.0, 124.0, 3.0)
    max_gap, spread = 30.0, JITTER_SHARE * LAG
    for checked, age in ((False, 0.0), (True, 30.0), (True, 60.0)):
        early, late = (model.next_check(age, u, max_gap, checked=checked) for u in (0.0, 0.999))
        assert early is not None and late is not None
        assert early <= max_gap and late <= max_gap, (age, early, late)
        assert abs(early - late) >= spread / 4, (age, early, late)  # was 30.0 for every draw
        again = model.next_check(age + min(early, late), 0.5, max_gap)
        assert again is not None and again > max_gap / 2  # the planned check was made, not made again


def _pending(record: OperationRecord, model: Learnt, at_s: float) -> Decision:
    at = T0 + timedelta(seconds=at_s)
    reserved = reserve(record.waiting(at, record.delay_source), at)
    return decide(reserved, observe(make_contract(), response(body("running"), at=at)), at, 0.5, model)


def test_a_learnt_check_planned_past_the_deadline_is_made_once_just_before_it() -> None:
    """The plan skips ages where no job ended; when the deadline falls in such a gap, waking at the deadline only
    to stop never looked at a job that may have ended in between: one last check comes just before it."""
    model = Learnt("exports", 40, LAG, (100.0, 130.0), 90.0, 100.0, 120.0, 130.0, 2.0)
    record = make_record(deadline=timedelta(seconds=50))
    first = _pending(record, model, 1.0)
    assert first.next_poll_at is not None and first.delay_source is DelaySource.LEARNT
    assert record.deadline_at - timedelta(seconds=1) <= first.next_poll_at < record.deadline_at
    last = _pending(first.record, model, (first.next_poll_at - T0).total_seconds())
    assert last.next_poll_at == record.deadline_at  # that was the last one: the deadline stops it, no third
    assert "after the deadline" in last.detail


def test_so_is_one_planned_past_the_usefulness_window() -> None:
    model = Learnt("exports", 40, LAG, (100.0, 130.0), 90.0, 100.0, 120.0, 130.0, 2.0)
    record = make_record(useful_for=timedelta(seconds=40))
    useful_until = record.plan.useful_until
    assert useful_until is not None
    decision = _pending(record, model, 1.0)
    assert decision.next_poll_at is not None
    assert useful_until - timedelta(seconds=1) <= decision.next_poll_at < useful_until
