"""Schedules learnt from a contract's history (issue 26): where to check so that the p95 detection lag stays
within a target with as few checks as the durations seen allow. Pure: samples in, a plan out.

Every ended operation leaves one interval-censored sample of its job's duration: it was still pending at the
last check that found it so (`lower`) and had ended by the first check that found it ended (`upper`), both as
ages since the operation was created. An operation stopped while its job still ran (a deadline, a budget) is a
censored sample: the job took longer than `lower`, how much longer nobody saw.

The estimate spreads each ended sample's mass over its interval, first evenly, then by self-consistency rounds
(where other jobs' intervals overlap it: Turnbull's EM, smoothed so no spike narrower than the plan can use
forms), and moves each censored sample's mass to the right, onto the ended mass past its `lower` (Efron's
redistribution; to the tail past the longest job seen when no ended mass lies there). On a grid over
[0, longest seen], the plan is the set of check times that minimises the expected number of checks a job
needs, sum over checks of P(job still running at the check before), subject to P(detection lag > target) <=
`MISS`: a shortest path whose edge j -> k costs S(t_j) plus lambda times the mass that ends more than a target
before t_k, in linear time (`_path`), with lambda bisected until the constraint holds (`place`, which
bench/learn.py also runs on the true durations as the oracle). Past the longest job seen, and with fewer than
`MIN_ENDED` ended samples, the contract's plain backoff is used.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .contract.parse import Schedule
from .durations import format_duration
from .reasons import DelaySource, Jitter, Phase
from .record import OperationRecord
from .schedule import raw_delay

MIN_ENDED = 20
"""Ended operations of a contract before its checks are placed by what they took."""
WINDOW = 500
"""The most recent samples per contract that the estimate reads."""
WINDOW_AGE = timedelta(days=30)
"""Samples older than this are not read: a provider's durations drift."""
MISS = 0.03
"""The share of jobs the plan lets be found later than the target. The target is a p95 lag: the other two points
are kept for what the estimate gets wrong and for the jitter (bench/learn.py measured 0.05 passing the target
by 25 % on a lognormal of sigma 1.0; 0.03 kept every workload's p95 within it)."""
PLANNED_SHARE = 1.0
"""The lag the plan's gaps are sized for, as a share of the target."""
JITTER_SHARE = 0.05
"""Each planned check moves by up to +-2.5 % of the target (a fresh draw per check), so workers sharing a store
do not check in waves; a check is never made twice for one planned time (`Learnt.next_check`)."""
FLEET_SHARE = 0.25
"""Each operation's learnt checks are all made earlier by its own share of this share of the target (`phase`, from
its id): operations admitted together are the same age at every moment, so with the jitter alone (+-2.5 %) 50 of
them made each planned check within 1.5 s of each other, at every planned check. Moved earlier, never later, by
up to 7.5 s for a 30 s target (measured on the four workloads of bench/learn.py with each job's plan moved by a
uniform draw over this: p95 lag 28.2-28.8 s against 28.3-29.3 s unmoved, +0.06 to +0.11 requests a job)."""
GRID_SHARE = 0.05
"""The grid's step, as a share of the lag target: where checks can be placed (1.5 s for a 30 s target)."""
EM_ROUNDS = 20
"""Self-consistency rounds of the estimate (`_self_consistent`)."""
EM_SMOOTH = 5
"""Cells on each side each round's mass is averaged over (a quarter of the target), so it cannot gather into spikes
narrower than the plan can use (the EMS algorithm: EM with a smoothing step)."""
EM_WORK = 400_000
"""Cell visits the estimate's rounds may take in all (about 0.2 s): fewer rounds for many wide intervals."""
SNAP_SHARE = 0.1
"""A check made up to this share of the target before a planned one stands for it (`Learnt.next_check`)."""
MAX_CELLS = 600
"""Grid cells over [0, longest seen] at most: the plan's cost is linear in them (about 0.05 s at 600)."""
TAIL_SHARE = 0.01
"""The share of the longest ended jobs that may lie past the grid (in its tail, checked by the plain backoff)
rather than stretch it (`_span`)."""


@dataclass(frozen=True)
class Sample:
    """One operation's duration as its checks bracketed it, in seconds since the operation was created."""

    lower: float
    upper: float | None
    """None: censored (the operation stopped while its job was still pending at `lower`)."""

    @property
    def censored(self) -> bool:
        return self.upper is None


@dataclass(frozen=True)
class Learnt:
    """What a decision placed by history used: everything `why` needs to place it again, and `story` to tell it."""

    contract: str
    count: int
    """Ended samples the estimate read (censored ones are not counted here)."""
    lag_target: float
    checks: tuple[float, ...]
    """Planned check ages in seconds, increasing; past the last, the plain backoff."""
    p5: float
    p50: float
    p95: float
    longest: float
    expected: float
    """Expected checks per job under this plan (from the estimate); the tail past the longest seen excluded."""
    key: str | None = None
    """The operation's `[schedule] learn_key` value, if it has one (`core.learnt_inputs`)."""
    key_count: int = 0
    """Ended samples of that key: with fewer than `MIN_ENDED` the model is its contract's whole history."""
    fleet_share: float = 0.0
    """`FLEET_SHARE` as this model was made with (`phase`): recorded with it, so a decision made before the phase
    existed (its model has none) replays as it was made."""

    @property
    def keyed(self) -> bool:
        """Planned from the key's own samples, not the whole contract's."""
        return self.key is not None and self.key_count >= MIN_ENDED

    def next_check(self, age: float, u: float, max_gap: float = math.inf, *, checked: bool = True) -> float | None:
        """The delay from `age` to the next planned check, jittered by `u` in [0, 1) within +-2.5 % of the target;
        None past the last planned check (the plain backoff takes over). A check whose jitter window holds `age`
        is the one just made (its jitter drew it early or late), never made again a moment later; so is one made up
        to a tenth of the target before it. A planned check further than `max_gap` (the contract's `max_delay`)
        is made at `max_gap`, less a jitter, when that is at most a tenth of the target early, else reached in
        equal steps within `max_gap`: capping the wait alone would leave a second check a moment before the planned
        one."""
        spread, snap = JITTER_SHARE * self.lag_target, SNAP_SHARE * self.lag_target
        made = max(spread / 2, snap) if checked else spread / 2  # `checked`: a check was made at `age`
        for check in self.checks:
            if check - made > age:
                delay = check + (u - 0.5) * spread - age
                if delay > max_gap > 0:
                    # Made at `max_gap` less a jitter (never later: `max_gap` is a bound), so operations enqueued
                    # together do not all check at exactly `max_gap`; the snap shrinks by the jitter's reach so the
                    # check made still stands for the planned one.
                    if delay - max_gap <= snap - spread / 2:
                        delay = max_gap - u * min(spread / 2, max_gap / 2)
                    else:
                        delay /= math.ceil(delay / max_gap)
                return max(delay, min(1.0, self.lag_target / 10, max_gap))
        return None

    def words(self, delay: float, lead: str = "next check") -> str:
        """The wait `delay` as a decision tells it, and what placed it; `lead` names the check ("first check" for
        the one placed at admission, `core.learnt_first`)."""
        scope = ""
        if self.key is not None:
            scope = (
                f" with key {self.key!r}"
                if self.keyed
                else f", every key (key {self.key!r} has {self.key_count} ended, fewer than {MIN_ENDED})"
            )
        return (
            f"{lead} in {_say(delay)}: learnt from {self.count} ended jobs of {self.contract}{scope}"
            f" (p5 {_say(self.p5)}, p50 {_say(self.p50)}, p95 {_say(self.p95)})"
            f" for a p95 lag of {_say(self.lag_target)}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "contract": self.contract,
            "count": self.count,
            "lag_target": self.lag_target,
            "checks": list(self.checks),
            "p5": self.p5,
            "p50": self.p50,
            "p95": self.p95,
            "longest": self.longest,
            "expected": self.expected,
            **({} if self.key is None else {"key": self.key, "key_count": self.key_count}),
            **({"fleet_share": self.fleet_share} if self.fleet_share else {}),
        }

    @classmethod
    def from_json(cls, data: Any) -> Learnt:
        """A recorded model (a decision's inputs): hostile until parsed, so a damaged one is a ValueError."""
        if not isinstance(data, dict):
            raise ValueError("a learnt model must be a JSON object")
        try:
            checks = tuple(float(c) for c in data["checks"])
            return cls(
                contract=str(data["contract"]),
                count=int(data["count"]),
                lag_target=float(data["lag_target"]),
                checks=checks,
                p5=float(data["p5"]),
                p50=float(data["p50"]),
                p95=float(data["p95"]),
                longest=float(data["longest"]),
                expected=float(data["expected"]),
                key=None if data.get("key") is None else str(data["key"]),
                key_count=int(data.get("key_count", 0)),
                fleet_share=_share(data.get("fleet_share", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a learnt model is damaged: {type(exc).__name__} {exc}") from None


def _share(value: Any) -> float:
    share = float(value)
    if not 0.0 <= share <= 1.0:  # also NaN: a recorded model is hostile until parsed
        raise ValueError(f"fleet_share {value!r} is not a share between 0 and 1")
    return share


def _say(seconds: float) -> str:
    return format_duration(timedelta(seconds=round(seconds)))


@dataclass(frozen=True)
class Estimate:
    """The duration distribution on a grid: `cdf[k]` is P(duration <= k * step); `tail` the mass past the end."""

    step: float
    cdf: tuple[float, ...]
    count: int
    longest: float

    def at(self, t: float) -> float:
        """P(duration <= t), linear between grid points."""
        if t <= 0:
            return 0.0
        x = t / self.step
        k = int(x)
        if k >= len(self.cdf) - 1:
            return self.cdf[-1]
        return self.cdf[k] + (self.cdf[k + 1] - self.cdf[k]) * (x - k)

    def quantile(self, q: float) -> float:
        """The smallest duration with at least `q` of the mass at or below it (the longest seen, if never)."""
        for k in range(1, len(self.cdf)):
            if self.cdf[k] >= q:
                low, high = self.cdf[k - 1], self.cdf[k]
                frac = 1.0 if high <= low else (q - low) / (high - low)
                return (k - 1 + frac) * self.step
        return self.longest


def estimate(samples: Sequence[Sample], lag_target: float) -> Estimate | None:
    """The distribution of what `samples` bracketed; None with fewer than `MIN_ENDED` ended samples."""
    samples = _sane(samples)
    ended = [s for s in samples if s.upper is not None]
    if len(ended) < MIN_ENDED:
        return None
    longest = max(max(s.upper or 0.0 for s in ended), 1e-3)
    span = _span(sorted(s.upper or 0.0 for s in ended), lag_target)
    step = max(GRID_SHARE * lag_target, span / MAX_CELLS, 1e-3)
    cells = max(1, math.ceil(span / step))
    shares, tail = [], 0.0
    for s in ended:
        assert s.upper is not None
        if s.lower >= span and s.upper > span:
            tail += 1.0  # ended past the grid: its mass is the tail's, where the plain backoff checks
            continue
        shares.append(_shares(cells, step, s.lower, min(s.upper, span)))
    mass = _self_consistent(cells, shares)
    for s in sorted((s for s in samples if s.upper is None), key=lambda s: s.lower):
        first = min(cells, int(s.lower / step))
        beyond = sum(mass[first:])
        if beyond <= 0:
            tail += 1.0
            continue
        scale = 1.0 + 1.0 / beyond  # the censored one's unit of mass, shared in proportion to what is there
        for k in range(first, cells):
            mass[k] *= scale
    total = sum(mass) + tail
    cdf = [0.0]
    running = 0.0
    for m in mass:
        running += m / total
        cdf.append(min(1.0, running))
    return Estimate(step=step, cdf=tuple(cdf), count=len(ended), longest=longest)


def _sane(samples: Sequence[Sample]) -> list[Sample]:
    """The samples an estimate can read: a bound that is not a finite number (a damaged row) leaves its sample
    out; an age before the operation's creation (clock skew between workers) is 0; an end seen before the last
    pending check is a point there, as `sample_of` writes it."""
    kept = []
    for s in samples:
        if not math.isfinite(s.lower) or (s.upper is not None and not math.isfinite(s.upper)):
            continue
        lower = max(0.0, s.lower)
        kept.append(Sample(lower, None if s.upper is None else max(lower, s.upper)))
    return kept


def _span(uppers: Sequence[float], lag_target: float) -> float:
    """How far the grid reaches, from the ended samples' sorted upper bounds: the longest seen, unless that would
    make its cells coarser than `GRID_SHARE` of the target only for the last `TAIL_SHARE` of the jobs (one job of
    30 days among a hundred of a minute made every cell 72 minutes wide, and the first check came after 72
    minutes); then twice the duration those outliers leave out, or as far as fine cells reach, whichever is more."""
    longest, fine = uppers[-1], MAX_CELLS * GRID_SHARE * lag_target
    typical = uppers[max(0, math.ceil((1.0 - TAIL_SHARE) * len(uppers)) - 1)]
    return max(1e-3, min(longest, max(fine, 2.0 * typical)))


def _shares(cells: int, step: float, low: float, high: float) -> tuple[int, list[float]]:
    """The grid's cells that [low, high] covers, from the first, each with its share of the interval (a point at
    `high` when they meet)."""
    if high - low < 1e-9:
        return min(cells - 1, max(0, math.ceil(high / step) - 1)), [1.0]
    first, last = min(cells - 1, int(low / step)), min(cells - 1, max(0, math.ceil(high / step) - 1))
    shares = [max(0.0, min(high, (k + 1) * step) - max(low, k * step)) / (high - low) for k in range(first, last + 1)]
    return first, shares


def _self_consistent(cells: int, shares: Sequence[tuple[int, list[float]]]) -> list[float]:
    """Each ended sample's unit of mass over its interval: first evenly, then, for `EM_ROUNDS` rounds, in
    proportion to the mass already there (Turnbull's self-consistency, the EM steps to the maximum-likelihood
    estimate of an interval-censored distribution). Where intervals of different jobs overlap, the mass gathers
    in the overlap: the plain backoff's wide, randomly placed intervals of the first jobs teach where jobs end
    much more sharply than spreading each evenly does; where every interval is the same (the plan's own checks),
    nothing changes. The rounds are fewer when the intervals are many and wide (`EM_WORK` cell visits at most)."""
    mass = [0.0] * cells
    for first, weights in shares:
        for j, w in enumerate(weights):
            mass[first + j] += w
    visits = sum(len(weights) for _, weights in shares)
    for _ in range(min(EM_ROUNDS, EM_WORK // max(1, visits))):
        moved = [0.0] * cells
        for first, weights in shares:  # by slices, not by index: the same sums, fewer steps
            end = first + len(weights)
            seen = [w * m for w, m in zip(weights, mass[first:end], strict=True)]
            total = sum(seen)
            if total <= 0:
                seen, total = weights, 1.0
            moved[first:end] = [before + part / total for before, part in zip(moved[first:end], seen, strict=True)]
        mass = _smoothed(moved, EM_SMOOTH)
    return mass


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


def plan(est: Estimate, lag_target: float, max_gap: float = math.inf) -> tuple[tuple[float, ...], float]:
    """The check ages that keep P(lag > the planned share of the target) within `MISS` at the fewest expected
    checks, no two more than `max_gap` apart, and that expected count."""
    times = [k * est.step for k in range(len(est.cdf))]
    placed = place(times, est.at, PLANNED_SHARE * lag_target, MISS, max_gap)
    return placed.checks, placed.expected


@dataclass(frozen=True)
class Placement:
    """Checks chosen by `place`: their ages, the checks a job needs on average, the share found later than the lag."""

    checks: tuple[float, ...]
    expected: float
    missed: float


def place(
    times: Sequence[float], cdf: Callable[[float], float], lag: float, miss: float, max_gap: float = math.inf
) -> Placement:
    """The fewest expected checks among `times` (increasing, from 0; the last is where every job has ended) such
    that at most `miss` of the jobs, whose durations `cdf` gives, are found more than `lag` after they end, and no
    two checks (nor 0 and the first) are more than `max_gap` apart.

    A check at t_k after one at t_j is sent to every job still running at t_j, 1 - F(t_j), and finds late every
    job that ended between t_j and t_k - lag. The cheapest checks at a price `weight` for each late job are a
    shortest path over `times` (`_path`); the price is bisected until the late share is within `miss`. This is
    Everett's Lagrangian method: what it returns is optimal for its own late share, never above `miss`, and
    only the duality gap (small on any smooth distribution) separates it from the best at exactly `miss`."""
    max_gap = max([max_gap] + [b - a for a, b in itertools.pairwise(times)])  # never below the grid
    ended = [cdf(t) for t in times]
    reach = [cdf(t - lag) if t > lag else 0.0 for t in times]
    low, high = 1e-4, 1e5
    best = _path(times, ended, reach, lag, max_gap, high)
    if best.missed <= miss:
        for _ in range(30):
            mid = math.sqrt(low * high)
            found = _path(times, ended, reach, lag, max_gap, mid)
            if found.missed <= miss:
                best, high = found, mid
            else:
                low = mid
    # Else even the densest plan misses more (too coarse a grid): it is the best there is.
    return best


def _path(
    times: Sequence[float], cdf: Sequence[float], reach: Sequence[float], lag: float, max_gap: float, weight: float
) -> Placement:
    """The cheapest checks from 0 to the last time at this price of a late job.

    The cost of going from check j to check k is (1 - cdf[j]) + weight * max(0, reach[k] - cdf[j]). For a j at
    least `lag` before t_k the second term is never negative (reach[k] = F(t_k - lag) >= F(t_j)), for a later j
    it is zero: so the best j is the least of cost[j] - (1 + weight) cdf[j] over the first window, or of
    cost[j] - cdf[j] over the second, each a sliding window kept by a monotone queue: linear, not quadratic."""
    n = len(times) - 1
    cost = [0.0] * (n + 1)
    back = [0] * (n + 1)
    # Each queue holds (its value, j), the value kept rather than computed again at every comparison: the
    # planner runs this ~30 times a plan, on every read of a model, and the recomputing was half its time.
    scale = 1.0 + weight
    late: deque[tuple[float, int]] = deque()  # j with t_k - max_gap <= t_j <= t_k - lag, by cost[j] - scale cdf[j]
    near: deque[tuple[float, int]] = deque()  # j with t_j > t_k - lag (and within max_gap), by cost[j] - cdf[j]
    moved = 0  # every j below this is (or was) in `late`'s window
    for k in range(1, n + 1):
        t = times[k]
        value = cost[k - 1] - cdf[k - 1]
        while near and near[-1][0] >= value:
            near.pop()
        near.append((value, k - 1))
        while moved < k and t - times[moved] >= lag:
            value = cost[moved] - scale * cdf[moved]
            while late and late[-1][0] >= value:
                late.pop()
            late.append((value, moved))
            moved += 1
        while late and t - times[late[0][1]] > max_gap:
            late.popleft()
        while near and (near[0][1] < moved or t - times[near[0][1]] > max_gap):
            near.popleft()
        best, arg = math.inf, 0
        if late:
            j = late[0][1]
            best, arg = cost[j] + 1.0 - cdf[j] + weight * (reach[k] - cdf[j]), j
        if near:
            j = near[0][1]
            c = cost[j] + 1.0 - cdf[j]
            if c < best:
                best, arg = c, j
        cost[k], back[k] = best, arg
    nodes: list[int] = []
    k = n
    while k > 0:
        nodes.append(k)
        k = back[k]
    nodes.reverse()
    missed = expected = 0.0
    previous = 0
    for k in nodes:
        expected += 1.0 - cdf[previous]
        missed += max(0.0, reach[k] - cdf[previous])
        previous = k
    return Placement(tuple(times[k] for k in nodes), expected, missed)


def learn(contract: str, samples: Sequence[Sample], lag_target: float, max_gap: float = math.inf) -> Learnt | None:
    """The model a contract's decisions use, or None while too few of its operations have ended. `max_gap`: the
    contract's `max_delay`, which caps every wait anyway; planned with, the checks it forces are placed where
    they find jobs instead of being added between the planned ones."""
    est = estimate(samples, lag_target)
    if est is None:
        return None
    checks, expected = plan(est, lag_target, max_gap)
    return Learnt(
        contract=contract,
        count=est.count,
        lag_target=lag_target,
        checks=checks,
        p5=est.quantile(0.05),
        p50=est.quantile(0.5),
        p95=est.quantile(0.95),
        longest=est.longest,
        expected=expected,
        fleet_share=FLEET_SHARE,
    )


def expected_checks(est: Estimate, ages: Sequence[float]) -> float:
    """How many of the checks at `ages` a job of this distribution needs on average (each is sent while the job
    has not been seen ended): for comparing a plan with the plain backoff's ages."""
    total, previous = 0.0, 0.0
    for age in ages:
        total += 1.0 - est.at(previous)
        previous = age
        if previous >= est.longest:
            break
    return total


def sample_of(record: OperationRecord) -> Sample | None:
    """What an operation whose waiting just ended says of its job's duration: an interval when a check saw the job
    end (succeeded, or failed, cancelled or expired by the provider), censored when it stopped while the job still
    ran, nothing when no check ever saw the job at all."""
    if not record.is_final:
        return None
    seen_pending = record.pending_seen_at
    lower = 0.0 if seen_pending is None else max(0.0, (seen_pending - record.created_at).total_seconds())
    ended = record.phase is Phase.SUCCEEDED or (record.reason is not None and record.reason.job_ended)
    if ended:
        at = record.last_observed_at or record.finished_at
        if at is None:
            return None
        return Sample(lower=lower, upper=max(lower, (at - record.created_at).total_seconds()))
    return None if seen_pending is None else Sample(lower=lower, upper=None)


def usable(learnt: Learnt | None, record: OperationRecord) -> Learnt | None:
    """The model, if this operation may use it: its plan learns, and the model was planned for its lag target."""
    schedule = record.plan.schedule
    if learnt is None or not schedule.learn or learnt.lag_target != schedule.lag_target.total_seconds():
        return None
    return learnt


def phase(record: OperationRecord, learnt: Learnt) -> float:
    """Seconds this operation's learnt checks are all made before the plan's (`FLEET_SHARE`): its own, from its
    id (a random token for every operation admission names), so operations admitted together spread and a
    replay of its record places each check again. As an age: the plan is read `phase` seconds ahead."""
    digest = hashlib.sha256(record.operation_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 * learnt.fleet_share * learnt.lag_target


def first_check(record: OperationRecord, learnt: Learnt | None, u: float) -> OperationRecord:
    """A new operation's first check, placed by the contract's learnt plan (its `first_check` is the plain
    backoff's): no check where no job of the contract has ever ended, nor later than `max_delay`, which bounds
    every wait (a learnt one in `decide` too)."""
    model = usable(learnt, record)
    cap = record.plan.schedule.max_delay
    early = 0.0 if model is None else phase(record, model)
    delay = None if model is None else model.next_check(early, u, cap.total_seconds(), checked=False)
    if delay is None:
        return record
    wait = min(timedelta(seconds=delay), cap)
    return record.waiting(record.created_at + wait, DelaySource.LEARNT)


def plain_ages(schedule: Schedule, until: float) -> list[float]:
    """The plain backoff's check ages up to `until` seconds, each wait at its jitter's mean: what a contract that
    does not learn would send, for comparing (`pollwarden schedules`)."""
    mean = 0.75 if schedule.jitter is Jitter.BOUNDED else 0.5
    ages, age, attempt = [], schedule.first_check.total_seconds(), 0
    while True:
        ages.append(age)
        if age >= until or len(ages) >= 10_000:
            return ages
        age += raw_delay(schedule, attempt).total_seconds() * mean
        attempt += 1


@dataclass(frozen=True)
class Summary:
    """One contract's learnt distribution as `pollwarden schedules` shows it."""

    contract: str
    samples: int
    censored: int
    model: Learnt | None
    plain_expected: float | None
    key: str | None = None
    """The `[schedule] learn_key` value these samples were kept under; None: the contract's every sample."""
    estimate: Estimate | None = None
    """The distribution itself, for a plot (the console); not in `to_json`."""

    def to_json(self) -> dict[str, Any]:
        return {
            "contract": self.contract,
            "key": self.key,
            "samples": self.samples,
            "censored": self.censored,
            "learnt": None if self.model is None else self.model.to_json(),
            "requests_per_job_learnt": None if self.model is None else round(self.model.expected, 2),
            "requests_per_job_plain": None if self.plain_expected is None else round(self.plain_expected, 2),
        }


def summary(contract: str, samples: Sequence[Sample], schedule: Schedule, key: str | None = None) -> Summary:
    """What the samples teach and what the plan saves against the plain backoff, expected per job (of one `key`'s
    samples, or of the whole contract's)."""
    lag = schedule.lag_target.total_seconds()
    est = estimate(samples, lag)
    model = learn(contract, samples, lag) if est is not None else None
    plain = None if est is None else expected_checks(est, plain_ages(schedule, est.longest))
    censored = sum(1 for s in samples if s.upper is None)
    return Summary(contract, len(samples), censored, model, plain, key, est)
