"""Where a learnt plan puts its checks (`core.learnt.place`): the linear shortest path against the plain quadratic
one, the widest gap it is allowed, and the late share it keeps."""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from pollwarden.core.learnt import Sample, _path, estimate, place


def _cdf(durations: list[float]) -> Callable[[float], float]:
    ordered = sorted(durations)
    return lambda t: bisect.bisect_right(ordered, t) / len(ordered)


def _quadratic(times: list[float], cdf: list[float], reach: list[float], max_gap: float, weight: float) -> float:
    """The same shortest path, every edge tried."""
    cost = [0.0] + [math.inf] * (len(times) - 1)
    for k in range(1, len(times)):
        for j in range(k):
            if times[k] - times[j] <= max_gap:
                edge = 1.0 - cdf[j] + weight * max(0.0, reach[k] - cdf[j])
                cost[k] = min(cost[k], cost[j] + edge)
    return cost[-1]


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    points=st.integers(2, 40),
    lag=st.floats(1.0, 40.0),
    gap=st.one_of(st.just(math.inf), st.floats(5.0, 60.0)),
    weight=st.sampled_from([0.0, 0.5, 3.0, 100.0]),
)
def test_the_linear_path_costs_what_trying_every_edge_costs(
    seed: int, points: int, lag: float, gap: float, weight: float
) -> None:
    rng = random.Random(seed)
    times = [0.0, *sorted(rng.uniform(0.0, 100.0) for _ in range(points))]
    gap = max([gap] + [b - a for a, b in itertools.pairwise(times)])
    durations = [min(rng.expovariate(1 / 30), times[-1]) for _ in range(50)]
    f = _cdf(durations)
    cdf = [f(t) for t in times]
    reach = [f(t - lag) if t > lag else 0.0 for t in times]
    found = _path(times, cdf, reach, lag, gap, weight)
    assert math.isclose(
        found.expected + weight * found.missed, _quadratic(times, cdf, reach, gap, weight), abs_tol=1e-9
    )
    assert found.checks[-1] == times[-1]
    previous = 0.0
    for check in found.checks:
        assert check - previous <= gap
        previous = check


def test_the_plan_keeps_its_late_share_and_skips_the_gap_between_two_humps() -> None:
    rng = random.Random(2)
    durations = [(20.0 if rng.random() < 0.5 else 600.0) * math.exp(rng.gauss(0, 0.1)) for _ in range(2000)]
    grid = [k * 0.5 for k in range(math.ceil(max(durations) / 0.5) + 1)]
    free = place(grid, _cdf(durations), 30.0, 0.05)
    assert free.missed <= 0.05
    assert not any(60.0 < c < 400.0 for c in free.checks)  # no job ends there: no check either
    capped = place(grid, _cdf(durations), 30.0, 0.05, max_gap=120.0)
    assert capped.missed <= 0.05 and capped.expected > free.expected
    assert all(b - a <= 120.0 for a, b in zip((0.0, *capped.checks), capped.checks, strict=False))
    late = sum(1 for d in durations if capped.checks[bisect.bisect_left(capped.checks, d)] - d > 30.0)
    assert late / len(durations) <= 0.05 + 1e-9  # what the plan says it keeps is what these jobs see


def test_wide_overlapping_intervals_teach_where_the_jobs_end() -> None:
    """The plain backoff's first jobs bracket a 20 s duration by intervals 5-20 s wide, each placed differently:
    spread evenly, they say jobs end anywhere from 5 s to 40 s; where they overlap is where the jobs end."""
    rng = random.Random(8)
    samples = []
    for _ in range(50):
        d = rng.uniform(19.5, 20.5)
        samples.append(Sample(max(0.0, d - rng.uniform(0.0, 15.0)), d + rng.uniform(0.0, 15.0)))
    sharp = estimate(samples, 1.0)
    assert sharp is not None
    assert sharp.quantile(0.05) >= 16.0 and sharp.quantile(0.95) <= 24.0, (sharp.quantile(0.05), sharp.quantile(0.95))
    assert sum(1 for s in samples if s.upper is not None and s.upper - s.lower > 10.0) > 25  # wider than the hump
