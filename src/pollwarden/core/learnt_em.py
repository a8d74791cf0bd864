"""The self-consistency rounds of a learnt schedule's estimate (`core.learnt.estimate`): each ended sample's
unit of mass over its interval on the grid, gathered where other jobs' intervals overlap it, smoothed so it forms
neither spikes narrower than a plan can use nor holes between a few sparse jobs. Pure: lists in, lists out."""

from __future__ import annotations

import math
from collections.abc import Sequence

EM_ROUNDS = 20
"""Self-consistency rounds of the estimate (`self_consistent`)."""
EM_SMOOTH = 5
"""Cells on each side each round's mass is averaged over (a quarter of the target), so it cannot gather into spikes
narrower than the plan can use (the EMS algorithm: EM with a smoothing step)."""
SPARSE_JOBS = 10.0
"""Where fewer jobs' mass than this lies within a cell's `EM_SMOOTH` neighbours on each side, that cell's mass is
spread wider, until its window holds this much (`_spread`): thirty jobs over a ten-minute hump leave holes between
them that are not where jobs never end, and with one width for all the plan put its long gaps in them (13-22 % of
fresh jobs late for 3 % planned). Dense mass keeps the narrow smoothing, so narrow kinds keep their few checks (a
fixed five-job width everywhere cost more than the plain backoff on them), and so does a dense block's edge: a
sparse cell whose wider window reaches a dense cell (every distribution's falling edge holds few jobs, and spread
wide past it the plan checked past the longest job for almost every history)."""
SPARSE_REACH = 10.0
"""Targets on each side a sparse cell's mass may be spread over at most (200 cells on the finest grid, fewer on a
coarser one: `reach`), past the longest job seen too: the last few jobs of a sparse hump say no more that none is
longer than they say that none ends between them."""
REACH_CELLS = 200
"""`SPARSE_REACH` in cells at most (the finest grid's): the cells past the longest seen the estimate may add."""
EM_WORK = 400_000
"""Cell visits the estimate's rounds may take in all, each round's spread over the whole grid counted too (an
estimate of 500 samples took 55-120 ms on a busy 2-core test machine): fewer rounds for many wide intervals."""


def reach(step: float, lag_target: float) -> int:
    """Cells on each side a sparse cell's mass may be spread over on a grid of `step` (`SPARSE_REACH`): counted in
    cells alone, a grid coarsened by one outlier (1e7 s among jobs of a minute) let the plan run 38 days past it."""
    return max(1, min(REACH_CELLS, math.ceil(SPARSE_REACH * lag_target / step)))


def shares_of(cells: int, step: float, low: float, high: float) -> tuple[int, list[float]]:
    """The grid's cells that [low, high] covers, from the first, each with its share of the interval (a point at
    `high` when they meet)."""
    if high - low < 1e-9:
        return min(cells - 1, max(0, math.ceil(high / step) - 1)), [1.0]
    first, last = min(cells - 1, int(low / step)), min(cells - 1, max(0, math.ceil(high / step) - 1))
    shares = [max(0.0, min(high, (k + 1) * step) - max(low, k * step)) / (high - low) for k in range(first, last + 1)]
    return first, shares


def self_consistent(cells: int, grid: int, shares: Sequence[tuple[int, list[float]]], reach: int) -> list[float]:
    """Each ended sample's unit of mass over its interval: first evenly, then, for `EM_ROUNDS` rounds, in
    proportion to the mass already there (Turnbull's self-consistency, the EM steps to the maximum-likelihood
    estimate of an interval-censored distribution). Where intervals of different jobs overlap, the mass gathers
    in the overlap: the plain backoff's wide, randomly placed intervals of the first jobs teach where jobs end
    much more sharply than spreading each evenly does; where every interval is the same (the plan's own checks),
    nothing changes. A sparse cell's mass spreads `reach` cells each side at most. The rounds are fewer when the
    intervals are many and wide (`EM_WORK` cell visits at most)."""
    mass = [0.0] * cells
    for first, weights in shares:
        for j, w in enumerate(weights):
            mass[first + j] += w
    visits = sum(len(weights) for _, weights in shares) + cells  # each round's spread visits every cell too
    for _ in range(min(EM_ROUNDS, EM_WORK // max(1, visits))):
        moved = [0.0] * cells
        for first, weights in shares:  # by slices, not by index: the same sums, fewer steps
            end = first + len(weights)
            seen = [w * m for w, m in zip(weights, mass[first:end], strict=True)]
            total = sum(seen)
            if total <= 0:
                seen, total = weights, 1.0
            moved[first:end] = [before + part / total for before, part in zip(moved[first:end], seen, strict=True)]
        mass = _spread(moved, grid, EM_SMOOTH, SPARSE_JOBS, reach)
    return mass


def _spread(mass: list[float], grid: int, half: int, jobs: float, reach: int) -> list[float]:
    """`_smoothed` over the grid's first `grid` cells where at least `jobs` of mass lies within `half` cells of a
    cell; a cell with less has its mass spread evenly over as many more cells on each side (up to `reach`) as it
    takes to hold that much, past `grid` too: the last few jobs seen are no more the longest there is than the
    gaps between them are places where no job ends. Unless that window holds a dense cell: then the cell is a
    dense block's edge, smoothed as the block is. The total kept."""
    cells = len(mass)
    if reach <= half:  # a coarse grid: no spread would be wider than the smoothing every dense cell gets
        return _smoothed(mass[:grid], half) + [0.0] * (cells - grid)
    prefix = [0.0]
    for m in mass:
        prefix.append(prefix[-1] + m)
    # The mass within `width` cells of cell k is prefix[min(cells, k + width + 1)] - prefix[max(0, k - width)],
    # written out where it is needed rather than called (the calls were a fifth of the estimate's time); for every
    # grid cell at `half`, its window's ends as slices of `prefix`: the same differences.
    dense = mass[:grid]
    ends = prefix[half + 1 : min(cells, grid + half) + 1]
    ends += [prefix[cells]] * (grid - len(ends))
    starts = [0.0] * min(half, grid) + prefix[: max(0, grid - half)]
    crowded = [0]  # cells whose `half` neighbours hold `jobs`, up to each cell
    for end, start in zip(ends, starts, strict=True):
        crowded.append(crowded[-1] + (end - start >= jobs))
    added = [0.0] * (cells + 1)
    # The least width past `half` whose window holds `jobs` (or `reach`), found in one pass: a window that holds
    # less than `jobs` holds the window one narrower around the next cell, so the next cell's least width is at
    # least this one's less one; the search starts there and climbs a cell at a time (linear in all, where a
    # binary search a cell cost 5.9 ms a round with every cell sparse).
    width, last = half + 1, 0
    for k, m in enumerate(dense):
        if m <= 0 or crowded[k + 1] > crowded[k]:
            continue
        width = min(reach, max(half + 1, width - (k - last)))
        while width < reach and prefix[min(cells, k + width + 1)] - prefix[max(0, k - width)] < jobs:
            width += 1
        last = k
        low, high = max(0, k - width), min(cells, k + width + 1)
        if crowded[min(grid, high)] > crowded[min(grid, low)]:
            continue  # a dense block's edge, not a sparse hump: spread wide, the plan checked past every block
        added[low] += m / (high - low)
        added[high] -= m / (high - low)
        dense[k] = 0.0
    out = _smoothed(dense, half) + [0.0] * (cells - grid)
    running = 0.0
    for k in range(cells):
        running += added[k]
        out[k] += max(0.0, running)
    return out


def _smoothed(mass: list[float], half: int) -> list[float]:
    """Each cell's mass averaged with its `half` neighbours on each side (fewer at the ends), the total kept."""
    if half <= 0:
        return mass
    cells = len(mass)
    prefix = [0.0]
    for m in mass:
        prefix.append(prefix[-1] + m)

    def average(k: int) -> float:
        low, high = max(0, k - half), min(cells, k + half + 1)
        return (prefix[high] - prefix[low]) / (high - low)

    # The cells whose window is whole divide by its width without the bounds' min and max (the same numbers).
    inner = range(half, cells - half)
    width = 2 * half + 1
    out = ([average(k) for k in range(min(half, cells))]
           + [(prefix[k + half + 1] - prefix[k - half]) / width for k in inner]
           + [average(k) for k in range(max(half, cells - half), cells)])  # fmt: skip
    total, kept = sum(mass), sum(out)
    return out if kept <= 0 else [m * total / kept for m in out]
