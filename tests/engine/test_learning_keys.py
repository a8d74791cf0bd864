"""Learnt schedules per `[schedule] learn_key` (issue 26), on both backends: samples kept per key value, a key
with fewer than `MIN_ENDED` ended jobs planned from its contract's whole history (and the decision says so), a
hostile key value never kept."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pollwarden.core.admission import WatchRequest
from pollwarden.core.contract.parse import Contract, parse_contract
from pollwarden.core.learnt import MIN_ENDED, WINDOW, WINDOW_AGE
from pollwarden.core.reasons import Phase
from pollwarden.engine import Engine, Polled, Watching
from pollwarden.home.operating import open_store
from pollwarden.report.why import explain, pick
from pollwarden.simulator import contract_text
from pollwarden.store.base import Store
from tests.conftest import install
from tests.engine.test_learning import Clock, Jobs


class KindedJobs(Jobs):
    """Jobs of several kinds: each answer names its kind in `model` (a value the test may make hostile)."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.models: dict[str, object] = {}

    def body(self, job_id: str, state: str) -> dict[str, object]:
        return {**super().body(job_id, state), "model": self.models[job_id]}


def _contract() -> Contract:
    text = contract_text("http://127.0.0.1:9", base_delay="5s", max_delay="30s", deadline="1h", max_requests=80)
    text = text.replace('max_delay = "30s"', 'max_delay = "30s"\nlag_target = "30s"\nlearn_key = "model"')
    return parse_contract(text, source="test.toml")


def _run(engine: Engine, contract: Contract, jobs: KindedJobs, model: object, median: float, count: int) -> None:
    rng = random.Random(len(jobs.ends))
    for _ in range(count):
        job = f"job-{len(jobs.ends)}"
        jobs.ends[job] = jobs.clock() + timedelta(seconds=median * math.exp(rng.gauss(0, 0.3)))
        jobs.models[job] = model
        admitted = engine.admit(WatchRequest(contract, job, by="tests"))
        final = engine.run(
            contract, jobs, admitted.record.operation_id, Watching(sleep=jobs.clock.sleep), record=admitted.record
        )
        assert final.phase is Phase.SUCCEEDED


def learnt_home(home: Path) -> None:
    """A home whose store learnt two kinds: `MIN_ENDED` ended jobs of "fast" and five of "<slow>", ended now (inside
    the 30-day window): `pollwarden schedules` and the console read it."""
    store = open_store(home)
    try:
        clock = Clock()
        clock.now = datetime.now(UTC)
        contract = _contract()
        install(store, contract)
        jobs = KindedJobs(clock)
        engine = Engine(store, owner="tests", clock=clock)
        _run(engine, contract, jobs, "fast", 20, MIN_ENDED)
        _run(engine, contract, jobs, "<slow>", 300, 5)
    finally:
        store.close()


def _second_decision(engine: Engine, contract: Contract, jobs: KindedJobs, model: str) -> Mapping[str, object]:
    """A new job of `model` that runs for hours: the decision after its first answer."""
    job = f"job-{model}-long"
    jobs.ends[job], jobs.models[job] = jobs.clock() + timedelta(hours=2), model
    admitted = engine.admit(WatchRequest(contract, job, by="tests"))
    jobs.clock.now = admitted.record.next_poll_at
    assert isinstance(engine.step(contract, jobs, admitted.record.operation_id), Polled)
    event = pick(engine.store.events(admitted.record.operation_id))
    assert explain(event).same  # `why` replays it with the model it was given
    return event.data


@pytest.mark.usefixtures("models_read_at_once")  # what is asked below does not depend on how fast the runs went
def test_each_key_learns_its_own_durations_and_a_young_key_borrows_the_contracts(store: Store) -> None:
    clock = Clock()
    contract = _contract()
    install(store, contract)
    engine = Engine(store, owner="tests", clock=clock, rng=random.Random(3))
    jobs = KindedJobs(clock)
    _run(engine, contract, jobs, "fast", 20, MIN_ENDED)
    _run(engine, contract, jobs, "slow", 300, MIN_ENDED)
    since = clock() - WINDOW_AGE
    assert sorted(store.learnt_keys(contract.name, since)) == [("fast", MIN_ENDED), ("slow", MIN_ENDED)]
    assert len(store.learnt_samples(contract.name, since, WINDOW)) == 2 * MIN_ENDED
    assert len(store.learnt_samples(contract.name, since, WINDOW, "fast")) == MIN_ENDED
    fast = engine.models.model(contract.name, timedelta(seconds=30), "fast")
    slow = engine.models.model(contract.name, timedelta(seconds=30), "slow")
    assert fast is not None and slow is not None and fast.keyed and slow.keyed
    assert fast.p50 < 40 < 200 < slow.p50  # each key's own distribution, not the mixture
    said = _second_decision(engine, contract, jobs, "fast")
    assert said["delay_source"] == "learnt"
    assert f"learnt from {MIN_ENDED} ended jobs of exports with key 'fast' (p5 " in str(said["detail"])
    young = _second_decision(engine, contract, jobs, "rare")
    assert young["delay_source"] == "learnt"
    assert (
        f"learnt from {2 * MIN_ENDED} ended jobs of exports, every key (key 'rare' has 0 ended, fewer than"
        f" {MIN_ENDED})" in str(young["detail"])
    )


def test_a_hostile_key_is_never_kept_and_the_job_learns_from_the_whole_contract(store: Store) -> None:
    clock = Clock()
    contract = _contract()
    install(store, contract)
    engine = Engine(store, owner="tests", clock=clock, rng=random.Random(5))
    jobs = KindedJobs(clock)
    _run(engine, contract, jobs, {"name": "gpt"}, 20, 2)
    _run(engine, contract, jobs, "k" * 10_240, 20, 2)
    _run(engine, contract, jobs, "[secret]", 20, 2)  # what the client leaves of an echoed credential
    _run(engine, contract, jobs, "ok", 20, 1)
    since = clock() - WINDOW_AGE
    assert store.learnt_keys(contract.name, since) == [("", 6), ("ok", 1)]
    operations = [s.record for s in store.all() if jobs.models[s.record.job_id] == "[secret]"]
    assert operations and all(op.sample_key is None for op in operations)
    refusals = [e for e in store.events(operations[0].operation_id) if e.kind == "guidance_rejected"]
    assert refusals and all(e.data["value"] == "[secret]" for e in refusals)
    assert "holds the credential" in str(refusals[0].data["why"])
    assert str(refusals[0].data["why"]).endswith("not used: this job learns from its contract's whole history")


class EstimatingJobs(Jobs):
    """Jobs that keep running, whose answers carry the provider's estimate of their end (`eta`), or a hostile one."""

    def __init__(self, clock: Clock, eta: object) -> None:
        super().__init__(clock)
        self.eta = eta

    def body(self, job_id: str, state: str) -> dict[str, object]:
        return {"state": "running", "eta": self.eta}


def _estimating(store: Store, eta: object) -> str:
    """One step of a job whose answer carries `eta`: its operation id."""
    clock = Clock()
    text = contract_text("http://127.0.0.1:9", base_delay="5s", max_delay="120s", deadline="1h", max_requests=80)
    text = text.replace('state = "state"', 'state = "state"\nestimated_completion_at = "eta"')
    contract = parse_contract(text, source="test.toml")
    install(store, contract)
    engine = Engine(store, owner="tests", clock=clock, rng=random.Random(3))
    jobs = EstimatingJobs(clock, eta)
    jobs.ends["job-eta"] = clock() + timedelta(hours=2)
    admitted = engine.admit(WatchRequest(contract, "job-eta", by="tests"))
    assert isinstance(engine.step(contract, jobs, admitted.record.operation_id), Polled)
    return admitted.record.operation_id


def test_the_providers_estimate_places_the_next_check_and_why_replays_it(store: Store) -> None:
    eta = Clock().now + timedelta(seconds=75)
    operation = _estimating(store, eta.isoformat())
    event = pick(store.events(operation))
    assert event.data["delay_source"] == "provider_estimate"
    assert event.data["next_poll_at"].startswith(eta.strftime("%Y-%m-%dT%H:%M:%S"))
    assert "placed by the provider's estimated completion" in str(event.data["detail"])
    assert explain(event).same


@pytest.mark.parametrize("eta", ["2020-01-01T00:00:00Z", 1e12, "garbage", {"at": "soon"}])
def test_a_hostile_estimate_is_ignored_and_recorded_as_a_rejected_hint(store: Store, eta: object) -> None:
    operation = _estimating(store, eta)
    event = pick(store.events(operation))
    assert event.data["delay_source"] == "local_backoff"
    rejected = [e for e in store.events(operation) if e.kind == "guidance_rejected"]
    assert len(rejected) == 1 and rejected[0].data["source"] == "eta"
    assert explain(event).same
