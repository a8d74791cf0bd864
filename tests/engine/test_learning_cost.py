"""What re-learning costs the polls that ask for it (issue 26): a contract's model is recomputed inside a poll, so
a process that keeps ending that contract's jobs re-reads it at most once per `SHARE`-worth of what the last read
took (and never more often than `SETTLE`), whatever the machine's speed."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from pollwarden.core.learnt import Learnt, Sample
from pollwarden.core.learnt import learn as plan_from
from pollwarden.engine import learning

SAMPLES = [Sample(lower=50.0 + i, upper=60.0 + i) for i in range(40)]


class SlowSamples:
    """A store whose sample read takes `cost` seconds of a fake monotonic clock, counting its reads."""

    def __init__(self, cost: float) -> None:
        self.now = 0.0
        self.cost = cost
        self.reads = 0
        self.samples = SAMPLES

    def monotonic(self) -> float:
        return self.now

    def learnt_samples(self, contract: str, since: datetime, limit: int, key: str | None = None) -> Sequence[Sample]:
        self.reads += 1
        self.now += self.cost
        return self.samples


def _models(store: SlowSamples) -> learning.Models:
    return learning.Models(store, lambda: datetime(2026, 3, 1, tzinfo=UTC), monotonic=store.monotonic)  # type: ignore[arg-type]


def _reads_after_ends(cost: float, wait: float) -> int:
    store = SlowSamples(cost)
    models = _models(store)
    assert models.model("exports", timedelta(seconds=30)) is not None
    for _ in range(10):  # this process ends a job of the contract, waits, asks again
        models.ended("exports")
        store.now += wait
        models.model("exports", timedelta(seconds=30))
    return store.reads


def test_a_cheap_model_is_read_again_a_settle_after_an_end() -> None:
    assert _reads_after_ends(cost=0.001, wait=learning.SETTLE) == 11


def test_a_costly_model_is_read_again_only_when_its_cost_is_a_small_share_of_the_time_since() -> None:
    # A read of 0.4 s asked for every 1.5 s would spend a quarter of the time learning: it waits 0.4 / SHARE.
    cost, wait = 0.4, 1.5
    reads = _reads_after_ends(cost, wait)
    elapsed = 10 * wait + reads * cost
    assert reads * cost <= learning.SHARE * elapsed + cost
    assert reads >= 2  # it is still read again, not kept for ever


def test_a_model_asked_for_with_a_widest_gap_plans_no_two_checks_further_apart() -> None:
    """Jobs of 20 s or 10 min: the plan skips the empty minutes between them, unless the schedule's max_delay
    forbids a gap that wide (then the model is planned with it, and kept apart from the unbounded one)."""
    store = SlowSamples(0.0)
    store.samples = [Sample(lower=15.0, upper=20.0 + i % 3) for i in range(30)]
    store.samples += [Sample(lower=590.0, upper=600.0 + i % 7) for i in range(30)]
    models = _models(store)
    free = models.model("exports", timedelta(seconds=30))
    bound = models.model("exports", timedelta(seconds=30), max_gap=timedelta(seconds=60))
    assert free is not None and bound is not None
    widest = max(b - a for a, b in itertools.pairwise((0.0, *free.checks)))
    assert widest > 60  # without the bound the plan leaps the gap
    assert max(b - a for a, b in itertools.pairwise((0.0, *bound.checks))) <= 60
    assert store.reads == 2


def test_a_plan_is_made_once_for_the_same_samples_and_again_for_new_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key still planned from the whole history (and a key whose samples are the ones read before) reads
    the same samples after each end, and a submission reads its model afresh: the plan made from the same samples
    is used again, not made again."""
    made: list[Sequence[Sample]] = []

    def learn(contract: str, samples: Sequence[Sample], lag: float, gap: float = math.inf) -> Learnt | None:
        made.append(samples)
        return plan_from(contract, samples, lag, gap)

    monkeypatch.setattr(learning, "learn", learn)
    monkeypatch.setattr(learning, "_PLANS", {})  # none made by an earlier test of this process
    store = SlowSamples(0.0)
    models = _models(store)
    whole = models.model("exports", timedelta(seconds=30))
    keyed = models.model("exports", timedelta(seconds=30), "fast")
    assert whole is not None and keyed == replace(whole, key="fast", key_count=len(SAMPLES))
    assert len(made) == 1 and store.reads == 2  # each read, one plan
    assert _models(store).model("exports", timedelta(seconds=30)) == whole and len(made) == 1  # another reader
    store.samples = SAMPLES[1:]
    models.ended("exports")
    store.now += learning.SETTLE
    again = models.model("exports", timedelta(seconds=30))
    assert len(made) == 2 and made[-1] == SAMPLES[1:]
    assert again is not None and again.count == len(SAMPLES) - 1
