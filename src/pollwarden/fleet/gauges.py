"""The fleet's gauges, read from the database at each scrape: one collector for every /metrics pollwarden serves.

`pollwarden metrics` (no worker needed), `worker --metrics-port`, a supervisor's one /metrics, the broker's
`--metrics-port` and the console's /metrics all register this collector, so what an alert sees does not depend
on which process happens to run. Metrics must not go dark exactly when things are stuck: the numbers come from
the database, not from a worker's memory, and a database that cannot be read answers the scrape with
`pollwarden_fleet_scrape_ok 0` (the error logged, once per failed read) rather than with silence.

A scrape reads the database at most once per `fresh_for` seconds; scrapers that come faster share that reading.

prometheus_client is imported when a collector is made, not with this module.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..report.ownership import lease_ttl_of, orphaned_by
from ..store.base import ContractCounts, DecisionCount, HolderCount, OutboxCount, Store

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

Log = Callable[..., None]
"""A JSON-lines logger (`fleet.log.JsonLog`): an event name and its fields."""

_CONTRACT_GAUGES: dict[str, tuple[str, Callable[[ContractCounts, datetime], float]]] = {
    "active": ("Active operations (waiting on their job)", lambda c, _: c.active),
    "due": ("Active operations whose next check is due", lambda c, _: c.due),
    "overdue": ("Due longer ago than the lease TTL with nobody checking", lambda c, _: c.overdue),
    "rate_limited": (
        "Active operations whose last answer was the provider's rate limit",
        lambda c, _: c.rate_limited,
    ),
    "unreadable_rows": (
        "Operations whose record cannot be read, set aside: no worker checks them until a person repairs them",
        lambda c, _: c.unreadable,
    ),
    "oldest_due_lag_seconds": (
        "How long the earliest due operation has been waiting to be checked",
        lambda c, now: 0.0 if c.oldest_due is None else max(0.0, (now - c.oldest_due).total_seconds()),
    ),
    "budget_used_max_ratio": (
        "The largest share of its status-request budget any active operation has used (0 to 1)",
        lambda c, _: c.budget_used,
    ),
}

METRIC_NAMES = (
    *(f"pollwarden_fleet_{name}" for name in _CONTRACT_GAUGES),
    "pollwarden_fleet_orphaned",
    "pollwarden_fleet_open_decisions",
    "pollwarden_fleet_oldest_open_decision_age_seconds",
    "pollwarden_fleet_scrape_ok",
    "pollwarden_fleet_scrape_duration_seconds",
    "pollwarden_fleet_scrape_errors_total",
    "pollwarden_outbox_deliveries",
    "pollwarden_outbox_oldest_age_seconds",
)
"""Every series name this collector can expose (a counter's with its `_total`): the deploy/ rules and dashboard
are checked against it."""


@dataclass(frozen=True)
class FleetReading:
    """One read of the database: everything a scrape shows."""

    now: datetime
    counts: list[ContractCounts]
    decisions: list[DecisionCount]
    holders: list[HolderCount]
    outbox: list[OutboxCount]
    took: float
    """Seconds the read took."""


def read_fleet(store: Store) -> FleetReading:
    started = time.monotonic()
    now = store.db_now()
    return FleetReading(
        now=now,
        counts=store.fleet_counts(now, lease_ttl_of),
        decisions=store.open_decision_counts(),
        holders=store.active_holders(now),
        outbox=store.outbox_counts(),
        took=time.monotonic() - started,
    )


@dataclass
class _Cache:
    at: float = float("-inf")
    reading: FleetReading | None = None
    error: str | None = None
    errors: int = 0
    took: float = 0.0
    orphaned: dict[str, int] = field(default_factory=dict)


class FleetGauges:
    """A prometheus_client collector (duck-typed: `collect` yields metric families) over one store, opened on the
    first scrape and again after a read that failed (a database restarted, a file replaced)."""

    def __init__(
        self,
        store_factory: Callable[[], Store],
        *,
        fresh_for: float = 1.0,
        log: Log | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._factory = store_factory
        self._fresh_for = fresh_for
        self._log = log
        self._clock = clock
        self._lock = threading.Lock()
        self._store: Store | None = None
        self._cache = _Cache()

    def reading(self) -> _Cache:
        """The newest reading (read afresh when the last one is `fresh_for` old); its `error` when it failed."""
        with self._lock:
            cache = self._cache
            if self._clock() - cache.at < self._fresh_for:
                return cache
            started = time.monotonic()
            try:
                if self._store is None:
                    self._store = self._factory()
                reading = read_fleet(self._store)
                orphaned: dict[str, int] = {}
                for one in reading.holders:
                    if orphaned_by(one.holder):
                        orphaned[one.contract] = orphaned.get(one.contract, 0) + one.count
                self._cache = _Cache(self._clock(), reading, None, cache.errors, reading.took, orphaned)
            except Exception as exc:  # a scrape must answer while the database is away: with scrape_ok 0
                self._drop_store()
                error = f"{type(exc).__name__}: {exc}"
                if self._log is not None:
                    self._log("metrics_database_unreadable", error=error[:500])
                self._cache = _Cache(self._clock(), None, error, cache.errors + 1, time.monotonic() - started)
            return self._cache

    def _drop_store(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            with contextlib.suppress(Exception):  # closing a store whose database is gone may fail too
                store.close()

    def close(self) -> None:
        with self._lock:
            self._drop_store()

    def describe(self) -> list[Metric]:
        """Nothing, so that registering reads no database (prometheus_client calls `collect` otherwise)."""
        return []

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        cache = self.reading()
        ok = GaugeMetricFamily("pollwarden_fleet_scrape_ok", "1 when the database was read for these gauges, else 0")
        ok.add_metric([], 0.0 if cache.reading is None else 1.0)
        yield ok
        took = GaugeMetricFamily(
            "pollwarden_fleet_scrape_duration_seconds", "How long the last read of the database took"
        )
        took.add_metric([], cache.took)
        yield took
        errors = CounterMetricFamily(
            "pollwarden_fleet_scrape_errors", "Reads of the database for these gauges that failed (each one logged)"
        )
        errors.add_metric([], float(cache.errors))
        yield errors
        if cache.reading is not None:
            yield from _families(cache.reading, cache.orphaned)


def _families(reading: FleetReading, orphaned: dict[str, int]) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    now = reading.now
    # Every contract the fleet knows of has every gauge, a 0 included: a contract whose operations have all
    # stopped for a person still shows active 0, and an alert on it compares a number, not an absent series.
    known = {c.contract: c for c in reading.counts}
    for contract in [d.contract for d in reading.decisions] + [h.contract for h in reading.holders]:
        known.setdefault(contract, ContractCounts(contract))
    counts = [known[name] for name in sorted(known)]
    for name, (text, value) in _CONTRACT_GAUGES.items():
        family = GaugeMetricFamily(f"pollwarden_fleet_{name}", text, labels=["contract"])
        for c in counts:
            family.add_metric([c.contract], float(value(c, now)))
        yield family
    lost = GaugeMetricFamily(
        "pollwarden_fleet_orphaned",
        "Active operations whose watching process is known to be gone (nothing checks them until resumed)",
        labels=["contract"],
    )
    for contract in sorted(set(known) | set(orphaned)):
        lost.add_metric([contract], float(orphaned.get(contract, 0)))
    yield lost
    waiting = GaugeMetricFamily(
        "pollwarden_fleet_open_decisions", "Decision requests waiting for a person", labels=["contract", "reason"]
    )
    oldest = GaugeMetricFamily(
        "pollwarden_fleet_oldest_open_decision_age_seconds",
        "How long the oldest open decision request of each contract and reason has waited",
        labels=["contract", "reason"],
    )
    for d in reading.decisions:
        waiting.add_metric([d.contract, d.reason], float(d.count))
        oldest.add_metric([d.contract, d.reason], _age(now, d.oldest))
    yield waiting
    yield oldest
    # The outbox: webhooks and witness heads not delivered yet, by state (`retrying`: an attempt failed; a
    # witness that stays there is one that cannot be written), and how long the oldest has waited.
    deliveries = GaugeMetricFamily(
        "pollwarden_outbox_deliveries", "Deliveries in the outbox, by kind and state", labels=["kind", "state"]
    )
    age = GaugeMetricFamily(
        "pollwarden_outbox_oldest_age_seconds",
        "How long the oldest delivery of each kind and state has been in the outbox",
        labels=["kind", "state"],
    )
    for o in reading.outbox:
        deliveries.add_metric([o.kind, o.state], float(o.count))
        age.add_metric([o.kind, o.state], _age(now, o.oldest))
    yield deliveries
    yield age


def _age(now: datetime, oldest: datetime | None) -> float:
    """Seconds the oldest of a group has waited: 0 for none, never negative (another host's clock)."""
    return 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())


def count_fleet(
    registry: CollectorRegistry,
    store_factory: Callable[[], Store],
    *,
    fresh_for: float = 1.0,
    log: Log | None = None,
) -> FleetGauges:
    """The fleet gauges in `registry`: one worker's, a supervisor's for all its processes, or `pollwarden metrics`."""
    gauges = FleetGauges(store_factory, fresh_for=fresh_for, log=log)
    registry.register(gauges)
    return gauges


def fleet_registry(
    store_factory: Callable[[], Store], *, log: Log | None = None
) -> tuple[CollectorRegistry, FleetGauges]:
    """A registry holding only the fleet gauges: what `pollwarden metrics`, the broker and the console serve."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    return registry, count_fleet(registry, store_factory, log=log)


def metrics_page(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The body and Content-Type of a /metrics answer, for a server that mounts it on a route of its own (the
    console's)."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return generate_latest(registry), CONTENT_TYPE_LATEST


def serve_metrics(registry: CollectorRegistry, port: int, host: str = "127.0.0.1") -> int:
    """Serve `registry` as /metrics on a thread of this process; returns the port (useful with port 0)."""
    from prometheus_client import start_http_server

    server, _ = start_http_server(port, addr=host, registry=registry)
    return int(server.server_port)


__all__ = [
    "METRIC_NAMES",
    "FleetGauges",
    "FleetReading",
    "count_fleet",
    "fleet_registry",
    "metrics_page",
    "read_fleet",
    "serve_metrics",
]
