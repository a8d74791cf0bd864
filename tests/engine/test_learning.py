"""Learnt schedules through the engine (issue 26): a contract's second hundred jobs need fewer checks than its
first hundred, at its lag target, on both backends; the decision says so and `why` replays it."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from datetime import datetime, timedelta

from bench.learn_keys import Clock as Clock  # one simulated clock for the bench and these tests

from pollwarden.core.admission import Limits, WatchRequest
from pollwarden.core.contract.parse import Contract, parse_contract
from pollwarden.core.learnt import MIN_ENDED
from pollwarden.core.observe import Exchange, Response
from pollwarden.core.reasons import DelaySource, Phase
from pollwarden.engine import Engine, Polled, Watching
from pollwarden.report.story import story_lines
from pollwarden.report.why import explain, pick
from pollwarden.simulator import contract_text
from pollwarden.store.base import Store
from tests.conftest import install


class Jobs:
    """A provider whose jobs run for a known time from their first sight: `running`, then `succeeded`."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.ends: dict[str, datetime] = {}
        self.requests = 0

    def prepare(self) -> None:
        pass

    def renew(self) -> None:
        pass

    def fetch(
        self, job_id: str, extra_headers: Mapping[str, str] | None = None, *, location: str | None = None
    ) -> Exchange:
        self.requests += 1
        now = self.clock()
        state = "succeeded" if now >= self.ends[job_id] else "running"
        body = json.dumps(self.body(job_id, state)).encode()
        return Response(status=200, headers={}, body=body, sent_at=now, received_at=now)

    def body(self, job_id: str, state: str) -> dict[str, object]:
        """What the provider answers for `job_id` in `state` (a subclass adds fields)."""
        return {"state": state, "result_url": f"https://results.example/{job_id}"}


def _contract(*, learn: bool = True) -> Contract:
    # The plain backoff keeps every lag within 30 s too (its longest wait): the same target, learnt or not.
    text = contract_text("http://127.0.0.1:9", base_delay="5s", max_delay="30s", deadline="1h", max_requests=60)
    schedule = 'max_delay = "30s"\nlag_target = "30s"' + ("" if learn else "\nlearn = false")
    return parse_contract(text.replace('max_delay = "30s"', schedule), source="test.toml")


def _run(engine: Engine, contract: Contract, jobs: Jobs, clock: Clock, rng: random.Random, count: int) -> list[float]:
    """Each job's detection lag, one job after another; the checks are counted by `jobs`."""
    lags = []
    for _ in range(count):
        job = f"job-{len(jobs.ends)}"
        jobs.ends[job] = clock() + timedelta(seconds=60 * math.exp(rng.gauss(0, 0.4)))
        admitted = engine.admit(WatchRequest(contract, job, by="tests"))
        final = engine.run(
            contract, jobs, admitted.record.operation_id, Watching(sleep=clock.sleep), record=admitted.record
        )
        assert final.phase is Phase.SUCCEEDED
        lags.append((clock() - jobs.ends[job]).total_seconds())
    return lags


def test_the_second_hundred_jobs_use_fewer_checks_than_the_first_at_the_lag_target(store: Store) -> None:
    """The first `MIN_ENDED` jobs run the plain backoff; from then on the checks are placed by what they took."""
    clock, rng = Clock(), random.Random(7)
    contract = _contract()
    install(store, contract)
    engine = Engine(store, owner="tests", clock=clock, rng=random.Random(3))
    jobs = Jobs(clock)
    _run(engine, contract, jobs, clock, rng, MIN_ENDED)
    plain = jobs.requests / MIN_ENDED
    _run(engine, contract, jobs, clock, rng, 100 - MIN_ENDED)
    first = jobs.requests
    lags = sorted(_run(engine, contract, jobs, clock, rng, 100))
    second = jobs.requests - first
    assert second < first, (first, second)
    assert second / 100 < 0.6 * plain, (plain, second / 100)
    assert lags[94] <= 30.0  # the p95 detection lag the contract's target asks
    model = engine.models.model(contract.name, timedelta(seconds=30))
    assert model is not None and model.count > 100  # read again as operations ended (at most once a second)


def test_a_learnt_decision_says_so_and_why_replays_it(store: Store) -> None:
    clock, rng = Clock(), random.Random(11)
    contract = _contract()
    install(store, contract)
    engine = Engine(store, owner="tests", clock=clock, rng=random.Random(5))
    jobs = Jobs(clock)
    _run(engine, contract, jobs, clock, rng, MIN_ENDED)
    job = "job-after"
    jobs.ends[job] = clock() + timedelta(hours=2)  # still running at every check below
    admitted = engine.admit(WatchRequest(contract, job, by="tests"))
    assert admitted.record.delay_source is DelaySource.LEARNT  # the first check too is placed by the history
    assert admitted.record.next_poll_at > admitted.record.created_at
    operation = admitted.record.operation_id
    clock.now = admitted.record.next_poll_at
    assert isinstance(engine.step(contract, jobs, operation), Polled)
    event = pick(store.events(operation))
    assert event.data["delay_source"] == "learnt"
    assert f"learnt from {MIN_ENDED} ended jobs of exports (p5 " in event.data["detail"]
    assert "for a p95 lag of 30s" in event.data["detail"]
    assert explain(event).same
    told = [line for line in story_lines(store.events(operation)) if "learnt from" in line]
    assert told and "(learnt schedule): learnt from " in told[-1] and told[-1].endswith("for a p95 lag of 30s")


def test_a_contract_that_does_not_learn_keeps_its_backoff(store: Store) -> None:
    clock, rng = Clock(), random.Random(7)
    contract = _contract(learn=False)
    install(store, contract)
    engine = Engine(store, owner="tests", clock=clock)
    jobs = Jobs(clock)
    _run(engine, contract, jobs, clock, rng, MIN_ENDED + 5)
    jobs.ends["job-x"] = clock() + timedelta(minutes=3)
    admitted = engine.admit(WatchRequest(contract, "job-x", limits=Limits(lag_target=timedelta(seconds=30))))
    assert admitted.record.delay_source is DelaySource.LOCAL_BACKOFF
    engine.run(contract, jobs, admitted.record.operation_id, Watching(sleep=clock.sleep), record=admitted.record)
    decisions = [e for e in store.events(admitted.record.operation_id) if e.kind == "decision"]
    assert {e.data["delay_source"] for e in decisions[:-1]} == {"local_backoff"}
