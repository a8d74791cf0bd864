"""Schedules learnt from a contract's history (issue 26): where to check so that the p95 detection lag stays
within a target with as few checks as the durations seen allow. Pure: samples in, a plan out.

Every ended operation leaves one interval-censored sample of its job's duration: it was still pending at the
last check that found it so (`lower`) and had ended by the first check that found it ended (`upper`), both as
ages since the operation was created. An operation stopped while its job still ran (a deadline, a budget) is a
censored sample: the job took longer than `lower`, how much longer nobody saw.

The estimate spreads each ended sample's mass evenly over its interval, and moves each censored sample's mass
to the right, onto the ended mass past its `lower` (Efron's redistribution; to the tail past the longest job
seen when no ended mass lies there). On a grid over [0, longest seen], the plan is the set of check times that
minimises the expected number of checks a job needs, sum over checks of P(job still running at the check
before), subject to P(detection lag > target) <= 5 %: a shortest path whose edge j -> k costs S(t_j) plus
lambda times the mass that ends more than a target before t_k, with lambda bisected until the constraint holds.
Past the longest job seen, and with fewer than `MIN_ENDED` ended samples, the contract's plain backoff is used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
MAX_CELLS = 150
"""Grid cells over [0, longest seen]: the plan's cost is quadratic in them (well under 0.1 s at 150)."""


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

    @property
    def keyed(self) -> bool:
        """Planned from the key's own samples, not the whole contract's."""
        return self.key is not None and self.key_count >= MIN_ENDED

    def next_check(self, age: float, u: float) -> float | None:
        """The delay from `age` to the next planned check, jittered by `u` in [0, 1) within +-2.5 % of the target;
        None past the last planned check (the plain backoff takes over). A check whose jitter window holds `age`
        is the one just made (its jitter drew it early or late), never made again a moment later."""
        spread = JITTER_SHARE * self.lag_target
        for check in self.checks:
            if check - spread / 2 > age:
                return max(check + (u - 0.5) * spread - age, min(1.0, self.lag_target / 10))
        return None

    def words(self, delay: float) -> str:
        scope = ""
        if self.key is not None:
            scope = (
                f" with key {self.key!r}"
                if self.keyed
                else f", every key (key {self.key!r} has {self.key_count} ended, fewer than {MIN_ENDED})"
            )
        return (
            f"next check in {_say(delay)}: learnt from {self.count} ended jobs of {self.contract}{scope}"
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
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a learnt model is damaged: {type(exc).__name__} {exc}") from None


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
    ended = [s for s in samples if s.upper is not None]
    if len(ended) < MIN_ENDED:
        return None
    longest = max(max(s.upper or 0.0 for s in ended), 1e-3)
    step = max(PLANNED_SHARE * lag_target / 4, longest / MAX_CELLS, 1e-3)
    cells = max(1, math.ceil(longest / step))
    mass = [0.0] * cells
    for s in ended:
        assert s.upper is not None
        _spread(mass, step, max(0.0, min(s.lower, s.upper)), s.upper, 1.0)
    tail = 0.0
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


def _spread(mass: list[float], step: float, low: float, high: float, weight: float) -> None:
    """`weight` spread evenly over [low, high] into the grid's cells (a point at `high` when they meet)."""
    cells = len(mass)
    if high - low < 1e-9:
        mass[min(cells - 1, max(0, math.ceil(high / step) - 1))] += weight
        return
    first, last = int(low / step), min(cells - 1, max(0, math.ceil(high / step) - 1))
    for k in range(first, last + 1):
        overlap = min(high, (k + 1) * step) - max(low, k * step)
        if overlap > 0:
            mass[k] += weight * overlap / (high - low)


def plan(est: Estimate, lag_target: float) -> tuple[tuple[float, ...], float]:
    """The check ages that keep P(lag > the planned share of the target) within `MISS` at the fewest expected
    checks, and that expected count."""
    n = len(est.cdf) - 1
    cdf = est.cdf
    lag = PLANNED_SHARE * lag_target
    # reach[k]: P(duration <= t_k - lag): a job ended before it is found more than `lag` late by a check at t_k.
    reach = [est.at(k * est.step - lag) for k in range(n + 1)]
    low, high = 1e-4, 1e5
    best = _path(cdf, reach, high)
    if best[1] > MISS:  # even the densest plan misses more (too coarse a grid): take it, it is the best there is
        return _ages(best[0], est.step), best[2]
    for _ in range(30):
        mid = math.sqrt(low * high)
        found = _path(cdf, reach, mid)
        if found[1] <= MISS:
            best, high = found, mid
        else:
            low = mid
    return _ages(best[0], est.step), best[2]


def _ages(nodes: Sequence[int], step: float) -> tuple[float, ...]:
    return tuple(k * step for k in nodes)


def _path(cdf: Sequence[float], reach: Sequence[float], weight: float) -> tuple[list[int], float, float]:
    """The cheapest checks from 0 to the last grid point at this price of a miss: (nodes, missed, expected)."""
    n = len(cdf) - 1
    cost = [math.inf] * (n + 1)
    back = [0] * (n + 1)
    cost[0] = 0.0
    for k in range(1, n + 1):
        rk = reach[k]
        best, arg = math.inf, 0
        for j in range(k):
            survive = 1.0 - cdf[j]
            missed = rk - cdf[j]
            c = cost[j] + survive + (weight * missed if missed > 0 else 0.0)
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
    return nodes, missed, expected


def learn(contract: str, samples: Sequence[Sample], lag_target: float) -> Learnt | None:
    """The model a contract's decisions use, or None while too few of its operations have ended."""
    est = estimate(samples, lag_target)
    if est is None:
        return None
    checks, expected = plan(est, lag_target)
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


def first_check(record: OperationRecord, learnt: Learnt | None, u: float) -> OperationRecord:
    """A new operation's first check, placed by the contract's learnt plan (its `first_check` is the plain
    backoff's): no check where no job of the contract has ever ended."""
    model = usable(learnt, record)
    delay = None if model is None else model.next_check(0.0, u)
    if delay is None:
        return record
    return record.waiting(record.created_at + timedelta(seconds=delay), DelaySource.LEARNT)


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
