"""The fleet's metrics: one worker's Prometheus counters and histograms (`Metrics`), and the gauges of the whole
fleet counted by the database when scraped (`count_fleet`): active, due (a paced operation included: pacing
leaves it due), overdue, open decisions, unreadable rows, the oldest due lag, and the outbox."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..store.base import ContractCounts, OutboxCount, Store

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter


class Metrics:
    """Prometheus metrics of one worker process; each instance has its own registry (tests run several).

    prometheus_client is imported when a worker makes its metrics, not with this module: `enqueue` and
    `db upgrade` share the fleet's command module, and only a running worker counts anything."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry()
        self._children: dict[tuple[Counter, str], Counter] = {}
        self.polls = Counter(
            "pollwarden_polls", "Status requests completed, by outcome", ["outcome"], registry=self.registry
        )
        self.escalations = Counter(
            "pollwarden_escalations", "Operations stopped for a decision, by reason", ["reason"], registry=self.registry
        )
        self.requests = Counter(
            "pollwarden_provider_requests", "Status requests sent, by provider", ["provider"], registry=self.registry
        )
        self.failures = Counter(
            "pollwarden_step_failures", "Polls that raised instead of ending in a record", registry=self.registry
        )
        self.aside = Counter(
            "pollwarden_polls_aside",
            "Status requests still unanswered when their batch moved on, finished on a thread of their own",
            registry=self.registry,
        )
        self.lateness = Histogram(
            "pollwarden_scheduling_lateness_seconds",
            "How long after next_poll_at a due operation was polled",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
            registry=self.registry,
        )
        self.budget = Histogram(
            "pollwarden_budget_used_ratio",
            "Status requests used of the budget when an operation ended",
            buckets=(0.1, 0.25, 0.5, 0.75, 0.9, 1.0),
            registry=self.registry,
        )

    def count(self, family: Counter, label: str) -> None:
        """One more in the family's child for this label value. The children are kept: `labels()` validates
        its arguments and takes the family's lock, several times the cost of the increment, on every poll."""
        child = self._children.get((family, label))
        if child is None:  # two threads may both make it: `labels()` hands both the same child
            child = self._children[(family, label)] = family.labels(label)
        child.inc()

    def count_fleet(self, store_factory: Callable[[], Store], *, fresh_for: float = 1.0) -> None:
        """Gauges of the whole fleet, per contract, counted by the database when scraped (at most once per
        `fresh_for` seconds, so many scrapers cost one query set): active, due, overdue, open decisions and
        the oldest due operation's lag. Every worker reports the same numbers: aggregate them with max, not sum."""
        count_fleet(self.registry, store_factory, fresh_for=fresh_for)

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve /metrics; returns the port (useful with port 0)."""
        return serve_metrics(self.registry, port, host)


def count_fleet(registry: CollectorRegistry, store_factory: Callable[[], Store], *, fresh_for: float = 1.0) -> None:
    """The fleet gauges (`Metrics.count_fleet`) in `registry`: one worker's, or a supervisor's for all its processes."""
    registry.register(_FleetGauges(store_factory, fresh_for))


def serve_metrics(registry: CollectorRegistry, port: int, host: str = "127.0.0.1") -> int:
    """Serve `registry` as /metrics on a thread of this process; returns the port (useful with port 0)."""
    from prometheus_client import start_http_server

    server, _ = start_http_server(port, addr=host, registry=registry)
    return int(server.server_port)


class _FleetGauges:
    """A prometheus_client collector (duck-typed: `collect` yields metric families) over `Store.fleet_counts`."""

    def __init__(self, store_factory: Callable[[], Store], fresh_for: float) -> None:
        self._factory = store_factory
        self._fresh_for = fresh_for
        self._lock = threading.Lock()
        self._store: Store | None = None
        self._taken = (float("-inf"), datetime.now(UTC), list[ContractCounts](), list[OutboxCount]())

    def _counts(self) -> tuple[datetime, list[ContractCounts], list[OutboxCount]]:
        from ..report.ownership import lease_ttl_of

        with self._lock:
            taken, now, counts, outbox = self._taken
            if time.monotonic() - taken >= self._fresh_for:
                if self._store is None:
                    self._store = self._factory()
                now = self._store.db_now()
                counts = self._store.fleet_counts(now, lease_ttl_of)
                outbox = self._store.outbox_counts()
                self._taken = (time.monotonic(), now, counts, outbox)
            return now, counts, outbox

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        try:
            now, counts, outbox = self._counts()
        except Exception:  # a scrape must answer while the database is away; the gauges are left out
            return
        gauges: dict[str, tuple[str, Callable[[ContractCounts], float]]] = {
            "active": ("Active operations (waiting on their job)", lambda c: c.active),
            "due": ("Active operations whose next check is due", lambda c: c.due),
            "overdue": ("Due longer ago than the lease TTL with nobody polling", lambda c: c.overdue),
            "open_decisions": ("Decision requests waiting for a person", lambda c: c.open_decisions),
            "unreadable_rows": (
                "Operations whose record cannot be read, set aside: no worker polls them until a person repairs them",
                lambda c: c.unreadable,
            ),
            "oldest_due_lag_seconds": (
                "How long the earliest due operation has been waiting to be polled",
                lambda c: 0.0 if c.oldest_due is None else max(0.0, (now - c.oldest_due).total_seconds()),
            ),
        }
        for name, (text, value) in gauges.items():
            family = GaugeMetricFamily(f"pollwarden_fleet_{name}", text, labels=["contract"])
            for c in counts:
                family.add_metric([c.contract], float(value(c)))
            yield family
        # The outbox: webhooks and witness heads not delivered yet, by state (`retrying`: an attempt failed; a
        # witness that stays there is one that cannot be written), and how long the oldest has waited.
        waiting = GaugeMetricFamily(
            "pollwarden_outbox_deliveries", "Deliveries in the outbox, by kind and state", labels=["kind", "state"]
        )
        oldest = GaugeMetricFamily(
            "pollwarden_outbox_oldest_age_seconds",
            "How long the oldest delivery of each kind and state has been in the outbox",
            labels=["kind", "state"],
        )
        for o in outbox:
            waiting.add_metric([o.kind, o.state], float(o.count))
            age = 0.0 if o.oldest is None else max(0.0, (now - o.oldest).total_seconds())
            oldest.add_metric([o.kind, o.state], age)
        yield waiting
        yield oldest


__all__ = ["Metrics", "count_fleet", "serve_metrics"]
