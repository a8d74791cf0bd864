"""A learnt schedule against a request budget of two or three (issue 26): the plan may not spend a tiny budget
before the job can end, nor stop a job that the plain backoff would have seen end, nor break `max_delay`.

Under load, a hostile MCP run once saw a well-behaved job (pending once, then success; 3 requests, `max_delay`
100 ms) stop for a decision once 20 jobs of its contract had ended: these drive the same shape of contract through
the pure core on a simulated clock."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from pollwarden.core import decide, new_record, observe, reserve
from pollwarden.core.contract.parse import Contract
from pollwarden.core.learnt import WINDOW, Learnt, Sample, first_check, learn, sample_of
from pollwarden.core.reasons import DelaySource, Phase, StopReason
from pollwarden.core.record import OperationRecord
from tests.core.support import T0, body, make_contract, response

Answer = Callable[[int, float], bytes]
"""The provider's body for the n-th check (from 1) at an age in seconds."""


def _pending_once(n: int, age: float) -> bytes:
    return body("running") if n == 1 else body("succeeded", result_url="https://r.example/1")


def _ends_at(duration: float) -> Answer:
    return lambda n, age: body("succeeded", result_url="https://r.example/1") if age >= duration else body("running")


def _watch(contract: Contract, answer: Answer, model: Learnt | None, rng: random.Random, n: int) -> OperationRecord:
    """One operation from admission to its end, every check at its due time: `first_check`, then `decide`."""
    record = first_check(new_record(contract, operation_id=f"op-{n}", job_id=f"job-{n}", now=T0), model, rng.random())
    while not record.is_final:
        now = record.next_poll_at
        reserved = reserve(record, now)
        payload = answer(reserved.status_requests_used, (now - T0).total_seconds())
        record = decide(reserved, observe(contract, response(payload, at=now)), now, rng.random(), model).record
    return record


def _hostile_good() -> Contract:
    """The hostile suites' contract: 50 ms doubling to 100 ms, 3 requests, 30 s, the default 30 s lag target."""
    return make_contract(base_delay="50ms", max_delay="100ms", deadline="30s", max_requests=3)


def test_a_learnt_first_check_keeps_max_delay() -> None:
    contract = _hostile_good()
    model = learn(contract.name, [Sample(0.0, 0.08 + i / 1000) for i in range(40)], 30.0)
    assert model is not None
    placed = first_check(new_record(contract, operation_id="op", job_id="job", now=T0), model, 0.99)
    assert placed.delay_source is DelaySource.LEARNT
    assert placed.next_poll_at - T0 <= contract.schedule.max_delay


def test_a_job_pending_once_then_done_succeeds_on_a_three_request_budget_before_and_after_learning() -> None:
    contract, rng = _hostile_good(), random.Random(4)
    samples: list[Sample] = []
    model: Learnt | None = None
    for n in range(60):
        final = _watch(contract, _pending_once, model, rng, n)
        assert final.phase is Phase.SUCCEEDED, (n, final.reason, final.detail)
        assert final.status_requests_used == 2
        assert final.finished_at is not None and final.finished_at - T0 <= 2 * contract.schedule.max_delay
        sample = sample_of(final)
        assert sample is not None
        samples.append(sample)
        model = learn(contract.name, samples[-WINDOW:], 30.0)
    assert model is not None  # the last 40 jobs ran on the learnt plan


def _lognormal(rng: random.Random) -> float:
    return 60.0 * math.exp(rng.gauss(0.0, 0.5))


def _bimodal(rng: random.Random) -> float:
    return (20.0 if rng.random() < 0.5 else 600.0) * math.exp(rng.gauss(0.0, 0.1))


@pytest.mark.parametrize("budget", [2, 3])
@pytest.mark.parametrize("durations", [_lognormal, _bimodal], ids=["lognormal", "bimodal"])
def test_a_tiny_budget_stops_no_job_the_plain_backoff_would_have_seen_end(
    budget: int, durations: Callable[[random.Random], float]
) -> None:
    """A budget stop is right only for a job still running at its last allowed check. The learnt plan places its
    checks where jobs end, never earlier than the plain backoff's first few: every job the plain backoff sees end
    within the budget, the learnt plan sees end too."""
    contract = make_contract(deadline="2h", max_requests=budget)
    rng = random.Random(budget)
    history = [durations(rng) for _ in range(300)]
    model = learn(contract.name, [Sample(max(0.0, d - 10.0), d) for d in history], 30.0)
    assert model is not None
    for n in range(300):
        duration = durations(rng)
        plain = _watch(contract, _ends_at(duration), None, random.Random(n), n)
        learnt = _watch(contract, _ends_at(duration), model, random.Random(n), n)
        for final in (plain, learnt):
            if final.reason is StopReason.REQUEST_BUDGET_EXHAUSTED:
                assert final.last_observed_at is not None
                assert (final.last_observed_at - T0).total_seconds() < duration  # it really was still running
        if plain.phase is Phase.SUCCEEDED:
            assert learnt.phase is Phase.SUCCEEDED, (duration, budget, learnt.detail)
        assert learnt.status_requests_used <= budget


def test_a_learnt_check_is_never_sooner_than_a_second_or_a_tenth_of_the_target() -> None:
    """A plan over jobs of a few tens of milliseconds cannot turn into a burst: a tiny budget lasts at least that
    long (jobs of a millisecond plan no check at all: the contract's own backoff, as declared, takes over)."""
    contract = make_contract(base_delay="50ms", max_delay="100ms", deadline="30s", max_requests=3)
    floor = min(1.0, 5.0 / 10)
    model = learn(contract.name, [Sample(0.0, 0.03 * (i + 1)) for i in range(40)], 5.0)
    assert model is not None
    delays = [model.next_check(age, 0.0) for age in (0.0, 0.5, 0.7, 0.75)]
    planned = [delay for delay in delays if delay is not None]
    assert planned, delays  # the plan places these checks: the floor below is asked of real delays
    assert min(planned) == floor  # a check planned nearer than the floor waits for it
    tiny = learn(contract.name, [Sample(0.0, 0.001 * (i + 1)) for i in range(40)], 5.0)
    assert tiny is not None
    assert [tiny.next_check(age, 0.0) for age in (0.0, 0.01, 0.2)] == [None, None, None]


def test_a_planned_check_just_past_max_delay_is_made_once_at_max_delay() -> None:
    """With `max_delay` 30 s and a plan 31.5 s apart, capping alone sent a second check 1.5 s after the capped one."""
    model = learn("exports", [Sample(0.0, 1.0)] * 40, 30.0)
    assert model is not None
    planned = Learnt.from_json({**model.to_json(), "checks": [10.0, 41.5, 80.0]})
    first = planned.next_check(10.0, 0.5, 30.0)  # about 1.5 s early: it stands for the check at 41.5
    assert first is not None and 30.0 - 0.025 * 30.0 <= first <= 30.0  # less a jitter, never more
    assert planned.next_check(40.0, 0.5, 30.0) == 20.0  # the one after (not 41.5 again), in two equal steps
    far = Learnt.from_json({**model.to_json(), "checks": [10.0, 100.0]})
    assert far.next_check(10.0, 0.5, 30.0) == 30.0  # 90 s in three equal steps, the last on the plan
