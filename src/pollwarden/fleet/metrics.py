"""One worker process's metrics: its Prometheus counters and histograms (`Metrics`), with the gauges of the whole
fleet (`fleet.gauges`: due counts a paced operation too, since pacing leaves it due) in the same registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..store.base import Store
from .gauges import count_fleet, serve_metrics
from .log import JsonLog

if TYPE_CHECKING:
    from prometheus_client import Counter


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

    def count_fleet(
        self, store_factory: Callable[[], Store], *, fresh_for: float = 1.0, log: JsonLog | None = None
    ) -> None:
        """Gauges of the whole fleet (`fleet.gauges`), counted by the database when scraped (at most once per
        `fresh_for` seconds, so many scrapers cost one query set). Every worker reports the same numbers:
        aggregate them with max, not sum."""
        count_fleet(self.registry, store_factory, fresh_for=fresh_for, log=log)

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve /metrics; returns the port (useful with port 0)."""
        return serve_metrics(self.registry, port, host)


__all__ = ["Metrics"]
