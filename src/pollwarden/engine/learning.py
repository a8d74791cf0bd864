"""The driver's side of learnt schedules (`core.learnt`): each contract's model, from the store's samples.

The samples are written by the store in the write that ends an operation (`learnt_samples`); here they are read
and turned into a model, once per contract and lag target, and kept: a poll asks this cache, never the table.
A model is read again when this process has ended an operation of its contract since (at most once a second, or
at once while it has no model yet), and otherwise every `REFRESH` seconds, so what other processes sharing the
store learnt reaches it too; never sooner than twenty times what its last read took (`SHARE`).
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from ..core.admission import WatchRequest
from ..core.contract.parse import ContractError, Schedule, parse_contract
from ..core.durations import format_duration
from ..core.learnt import MIN_ENDED, WINDOW, WINDOW_AGE, Learnt, Sample, Summary, learn, summary
from ..core.record import OperationRecord
from ..store.base import Store

REFRESH = 10.0
"""Seconds a contract's model is kept when this process ended none of its operations."""
SETTLE = 1.0
"""Seconds at least between two reads of one contract's model when this process keeps ending its operations."""
SHARE = 0.05
"""A model is read again no sooner than its last read took divided by this: recomputing a wide history (hundreds
of milliseconds) runs inside the poll that asks, so it may cost that contract's polls this share of the time."""
KEPT = 4096
"""Models kept at most (contract, lag target and key each): a provider that names a new key for every job cannot
grow this process without bound; the oldest read is dropped first."""
PLANS_KEPT = 256
"""Plans kept at most by what they were planned from (`_learn`), in this process, the oldest used dropped first
(a plan of a few dozen checks: a few hundred kilobytes in all)."""


@dataclass
class _Kept:
    model: Learnt | None
    read_at: float
    cost: float = 0.0
    """Seconds the read took (the samples and the plan)."""
    stale: bool = False


class Models:
    """One store's learnt models, by contract name and lag target; safe to share between threads."""

    def __init__(self, store: Store, clock: Callable[[], datetime], *, monotonic: Callable[[], float] = time.monotonic):
        self._store = store
        self._clock = clock
        self._monotonic = monotonic
        self._kept: dict[tuple[str, float, str | None, float], _Kept] = {}
        self._lock = threading.Lock()

    def model(
        self, contract: str, lag_target: timedelta, key: str | None = None, max_gap: timedelta | None = None
    ) -> Learnt | None:
        """The contract's model for this lag target, or None while too few of its operations have ended. With a
        `key` (its `[schedule] learn_key` value): the key's own model once `MIN_ENDED` of its operations have
        ended, the contract's whole history until then (the model says which)."""
        gap = math.inf if max_gap is None else max_gap.total_seconds()
        kept_as = (contract, lag_target.total_seconds(), key, gap)
        now = self._monotonic()
        with self._lock:
            kept = self._kept.get(kept_as)
            if kept is not None and not _due(kept, now):
                return kept.model
        model, spared = self._read(contract, lag_target.total_seconds(), key, gap)
        done = self._monotonic()
        with self._lock:
            self._kept.pop(kept_as, None)  # re-inserted last: the dict's order is the order of reads
            self._kept[kept_as] = _Kept(model, now, cost=done - now + spared)
            while len(self._kept) > KEPT:
                del self._kept[next(iter(self._kept))]
        return model

    def _read(self, contract: str, lag: float, key: str | None, gap: float) -> tuple[Learnt | None, float]:
        """The model, and the seconds its plan cost when it was made before and is not made again (`_learn`)."""
        since = self._clock() - WINDOW_AGE
        own = 0
        if key is not None:
            samples = self._store.learnt_samples(contract, since, WINDOW, key)
            own = sum(1 for sample in samples if not sample.censored)
            if own >= MIN_ENDED:
                model, spared = _learn(contract, samples, lag, gap, self._monotonic)
                return (None if model is None else replace(model, key=key, key_count=own)), spared
        model, spared = _learn(contract, self._store.learnt_samples(contract, since, WINDOW), lag, gap, self._monotonic)
        return (model if model is None or key is None else replace(model, key=key, key_count=own)), spared

    def for_new(self, request: WatchRequest, key: str | None = None) -> Learnt | None:
        """The model a new operation's first check is placed by, when its contract learns (`core.admission`); `key`:
        its `learn_key` value when known before the first answer (a submission's body)."""
        schedule = request.contract.schedule
        if not schedule.learn:
            return None
        lag_target = request.limits.lag_target or schedule.lag_target
        return self.model(request.contract.name, lag_target, key, schedule.max_delay)

    def after(self, written: bool, record: OperationRecord) -> bool:
        """A fenced write's answer, passed on: when it ended the operation, its contract's models are stale."""
        if written and record.is_final:
            self.ended(record.contract_name)
        return written

    def ended(self, contract: str) -> None:
        """This process ended an operation of `contract`: its models are read again when next asked for."""
        with self._lock:
            for (name, _, _, _), kept in self._kept.items():
                if name == contract:
                    kept.stale = True


_PLANS: dict[tuple[str, float, float, bytes], tuple[Learnt | None, float]] = {}
_PLANS_LOCK = threading.Lock()


def _learn(
    contract: str, samples: Sequence[Sample], lag: float, gap: float, monotonic: Callable[[], float]
) -> tuple[Learnt | None, float]:
    """`learn`, or the plan it made from the same samples before in this process, and the seconds that cost when
    it is not made again. After an end of one of a contract's operations every model of it is read again, each
    key's too, and every key still planned from the whole history reads the same samples (profiled: a third of a
    keyed history's plans were the same plan again); a submission's first check is placed by a model read
    afresh. A plan used again costs its read what making it cost, so the reads are spaced as if it were made
    again (`SHARE`)."""
    # `repr` gives every float exactly: two reads are digested alike only when `learn` would plan the same.
    text = repr([(sample.lower, sample.upper) for sample in samples])
    inputs = (contract, lag, gap, hashlib.sha256(text.encode()).digest())
    with _PLANS_LOCK:
        made = _PLANS.get(inputs)
    spared = 0.0
    if made is None:
        start = monotonic()
        made = learn(contract, samples, lag, gap), monotonic() - start
    else:
        spared = made[1]
    with _PLANS_LOCK:
        _PLANS.pop(inputs, None)  # re-inserted last: the oldest made is dropped first
        _PLANS[inputs] = made
        while len(_PLANS) > PLANS_KEPT:
            del _PLANS[next(iter(_PLANS))]
    return made[0], spared


_SHARED: weakref.WeakKeyDictionary[Store, Models] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def models_for(store: Store, clock: Callable[[], datetime]) -> Models:
    """The models of this store object, shared by every engine on it (a worker's lanes, the engine that finishes
    a batch's slow rest): one read and one plan per contract for all of them. The first engine's clock dates
    the window."""
    with _SHARED_LOCK:
        models = _SHARED.get(store)
        if models is None:
            models = _SHARED[store] = Models(store, clock)
        return models


def _due(kept: _Kept, now: float) -> bool:
    age = now - kept.read_at
    spaced = kept.cost / SHARE
    if kept.stale and (kept.model is None or age >= max(SETTLE, spaced)):
        return True
    return age >= max(REFRESH, spaced)


SHOWN_KEYS = 20
"""Keys shown a contract at most (those with the most samples): a provider naming many kinds floods no page."""


def summaries(store: Store, contract: str | None = None) -> list[Summary]:
    """Each contract's learnt distribution (or `contract`'s only), then each of its `learn_key` values' own,
    planned for its newest installed version's schedule (the defaults when none is installed, or its text no
    longer parses): what `pollwarden schedules` and the console show."""
    found = []
    since = store.db_now() - WINDOW_AGE
    for name, _count in store.learnt_contracts():
        if contract is not None and name != contract:
            continue
        schedule = Schedule()
        versions = store.installed_contracts(name)
        if versions:
            with suppress(ContractError):  # a text that no longer parses: the defaults
                schedule = parse_contract(versions[-1].text, source=f"contract {name}").schedule
        found.append(summary(name, store.learnt_samples(name, since, WINDOW), schedule))
        keys = [key for key, _ in store.learnt_keys(name, since) if key]
        for key in keys[:SHOWN_KEYS]:
            found.append(summary(name, store.learnt_samples(name, since, WINDOW, key), schedule, key))
    return found


@dataclass(frozen=True)
class Said:
    """One summary in words, the same in `pollwarden schedules` and on the console's page (each adds its markup)."""

    samples: str
    """"25 samples (0 censored)"."""
    fallback: str | None
    """What plans its checks while it has no model of its own ("fewer than 20 ended: the plain backoff")."""
    durations: str = ""
    checks: str = ""
    learnt: str = ""
    plain: str = ""


def said(one: Summary, shown_checks: int = 12) -> Said:
    samples = f"{one.samples} samples ({one.censored} censored)"
    model = one.model
    if model is None:
        instead = "the plain backoff" if one.key is None else "the contract's whole history"
        return Said(samples, f"fewer than {MIN_ENDED} ended: {instead}")
    checks = ", ".join(_say(c) for c in model.checks[:shown_checks])
    return Said(
        samples,
        None,
        durations=f"p5 {_say(model.p5)}, p50 {_say(model.p50)}, p95 {_say(model.p95)}, longest {_say(model.longest)}",
        checks=(checks + (", ..." if len(model.checks) > shown_checks else "")
                + f" (then the plain backoff), for a p95 lag of {_say(model.lag_target)}"),
        learnt=f"{model.expected:.2f}",
        plain="?" if one.plain_expected is None else f"{one.plain_expected:.2f}",
    )  # fmt: skip


def _say(seconds: float) -> str:
    return format_duration(timedelta(seconds=round(seconds)))
