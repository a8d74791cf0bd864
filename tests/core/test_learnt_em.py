"""The estimate's rounds (`core.learnt_em`): the sparse spread's one-pass widths are the ones a search per cell
finds, so making it cheap moved no plan."""

from __future__ import annotations

import math
import random

from pollwarden.core.learnt_em import _smoothed, _spread


def _searched(mass: list[float], grid: int, half: int, jobs: float, reach: int) -> list[float]:
    """`_spread` as it was first written: each sparse cell's width found by its own binary search."""
    cells = len(mass)

    def held(k: int, width: int) -> float:
        return math.fsum(mass[max(0, k - width) : k + width + 1])

    crowded = [held(k, half) >= jobs for k in range(grid)]
    widths = {}
    for k, m in enumerate(mass[:grid]):
        if m > 0 and not crowded[k] and reach > half:  # a reach within the smoothing spreads nothing wider
            low_w, width = half, reach
            while width - low_w > 1:
                mid = (low_w + width) // 2
                low_w, width = (mid, width) if held(k, mid) < jobs else (low_w, mid)
            if not any(crowded[max(0, k - width) : k + width + 1]):  # a dense block's edge stays narrow
                widths[k] = width
    dense = [0.0 if k in widths else m for k, m in enumerate(mass[:grid])]
    out = _smoothed(dense, half) + [0.0] * (cells - grid)
    for k, width in widths.items():
        low, high = max(0, k - width), min(cells, k + width + 1)
        for j in range(low, high):
            out[j] += mass[k] / (high - low)
    return out


def test_the_sparse_widths_found_in_one_pass_are_those_a_search_per_cell_finds() -> None:
    for seed in range(40):
        rng = random.Random(seed)
        grid = rng.randint(1, 300)
        mass = [rng.choice([0.0, 0.0, 0.01, 0.1, 0.5, 3.0]) * rng.random() for _ in range(grid)]
        mass += [0.0] * rng.randint(0, 60)
        reach = rng.choice([1, 3, 6, 40, 200])
        got = _spread(mass, grid, 5, 10.0, reach)
        want = _searched(mass, grid, 5, 10.0, reach)
        assert all(abs(a - b) < 1e-9 for a, b in zip(got, want, strict=True)), seed


def test_a_reach_short_of_the_smoothing_spreads_no_cell_narrower_than_the_smoothing() -> None:
    """A coarse grid (a 1 s target over jobs of 25-50 minutes: 5 s cells, a reach of 3) must not give a sparse
    cell's mass a narrower window than the dense cells' `half` each side."""
    mass = [0.0] * 400
    for k in (300, 320, 345, 370, 399):
        mass[k] = 1.0
    assert _spread(mass, 400, 5, 10.0, 3) == _smoothed(mass, 5)
