"""The first check a new operation gets from its contract's learnt history is recorded like every later learnt
wait (issue 26), on both backends: the creating event (`created`, or `submitted` for a submission) carries the
model and the jitter draw that placed it, `why` replays it, `story` tells it; an event of an older version,
without them, still reads."""

from __future__ import annotations

import random
import re
from dataclasses import replace
from datetime import timedelta

import pytest

from pollwarden import events as ev
from pollwarden.core.admission import WatchRequest
from pollwarden.core.learnt import MIN_ENDED
from pollwarden.core.reasons import DelaySource
from pollwarden.engine import Engine
from pollwarden.report.story import story_lines
from pollwarden.report.why import WhyError, explain, pick
from pollwarden.store.base import Store
from tests.conftest import install
from tests.engine.test_learning import Clock, Jobs, _contract, _run
from tests.engine.test_learning_keys import KindedJobs
from tests.engine.test_learning_keys import _contract as _keyed
from tests.engine.test_learning_keys import _run as _run_kind
from tests.engine.test_learning_submit import _contract as _submitting
from tests.engine.test_learning_submit import _history, _submit
from tests.engine.test_learning_submit import provider as provider  # the loopback provider's fixture
from tests.loopback import Loopback


def _learnt_engine(store: Store) -> tuple[Engine, Clock]:
    clock = Clock()
    contract = _contract()
    install(store, contract)
    engine = Engine(store, owner="tests", clock=clock, rng=random.Random(5))
    _run(engine, contract, Jobs(clock), clock, random.Random(11), MIN_ENDED)
    return engine, clock


def test_the_first_check_placed_by_the_history_is_recorded_and_why_replays_it(store: Store) -> None:
    engine, _ = _learnt_engine(store)
    admitted = engine.admit(WatchRequest(_contract(), "job-first", by="tests"))
    assert admitted.record.delay_source is DelaySource.LEARNT
    events = store.events(admitted.record.operation_id)
    created = next(e for e in events if e.kind == "created")
    assert created.data["inputs"]["learnt"]["count"] == MIN_ENDED  # the model that placed it
    event = pick(events)  # no decision after a poll yet: the first check's placement is the last one
    assert event.seq == created.seq
    explanation = explain(event)
    assert explanation.same, explanation.differences
    assert explanation.replayed is not None and explanation.replayed["delay_source"] == "learnt"
    told = story_lines(events)[0]
    assert "watching job job-first" in told
    assert "first check in " in told and f"learnt from {MIN_ENDED} ended jobs of exports (p5 " in told
    # Replayed, not copied: a recorded draw other than the one used places the check elsewhere.
    inputs = {**created.data["inputs"], "u": 1.0 - float(created.data["inputs"]["u"])}
    altered = replace(created, data={**created.data, "inputs": inputs})
    assert any(d.startswith("next_poll_at") for d in explain(altered).differences)


def test_a_submissions_first_check_is_recorded_in_its_submitted_event(provider: Loopback, store: Store) -> None:
    clock = Clock()
    contract = _submitting(provider.url)
    _history(store, contract, clock)
    record = _submit(store, contract, clock, {"model": "large"}, "op-large")
    assert record.delay_source is DelaySource.LEARNT
    events = store.events("op-large")
    submitted = next(e for e in events if e.kind == "submitted")
    assert submitted.data["inputs"]["learnt"]["key"] == "large"
    explanation = explain(pick(events))
    assert explanation.event.seq == submitted.seq and explanation.same, explanation.differences
    assert "with key 'large'" in next(line for line in story_lines(events) if "submitted job" in line)


def test_a_created_event_of_an_older_version_still_reads(store: Store) -> None:
    engine, _ = _learnt_engine(store)
    admitted = engine.admit(WatchRequest(_contract(), "job-old", by="tests"))
    created = next(e for e in store.events(admitted.record.operation_id) if e.kind == "created")
    old = {k: v for k, v in created.data.items() if k not in ("inputs", "placed")}
    typed = ev.parse("created", old)
    assert typed is not None
    old_event = replace(created, data=old)
    assert story_lines([old_event])[0].endswith("transport failures")
    with pytest.raises(WhyError, match="no recorded decision"):
        pick([old_event])


def test_a_watchs_first_check_is_placed_by_every_keys_history_and_says_so(store: Store) -> None:
    """Its key comes from its first answer: none before the first check, which the whole contract's history
    places, and `story` says which; the key is used from the first answer on."""
    clock = Clock()
    contract = _keyed()
    install(store, contract)
    jobs = KindedJobs(clock)
    engine = Engine(store, owner="tests", clock=clock, rng=random.Random(3))
    _run_kind(engine, contract, jobs, "fast", 20, MIN_ENDED)
    _run_kind(engine, contract, jobs, "slow", 300, MIN_ENDED)
    jobs.ends["job-k"], jobs.models["job-k"] = clock() + timedelta(hours=2), "slow"
    admitted = engine.admit(WatchRequest(contract, "job-k", by="tests"))
    assert admitted.record.delay_source is DelaySource.LEARNT and admitted.record.sample_key is None
    events = store.events(admitted.record.operation_id)
    created = next(e for e in events if e.kind == "created")
    assert "key" not in created.data["inputs"]["learnt"]  # the whole contract's model
    told = story_lines(events)[0]
    assert re.search(r"; first check in \S+: learnt from \d+ ended jobs of exports \(p5 ", told), told  # every key's
    assert told.endswith("; every key (a watch's learn_key is read from its first answer, after this check)")
    assert explain(pick(events)).same
