"""deploy/: the Prometheus alert rules parse, and every metric the rules and the Grafana dashboard name is one a
scrape of pollwarden really exposes (the fleet gauges over a real store, and a worker's own counters)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pollwarden.fleet.gauges import METRIC_NAMES
from pollwarden.fleet.worker import Metrics
from pollwarden.home.operating import open_store
from tests.e2e.test_metrics_cli import filled_home

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
RULES = DEPLOY / "prometheus" / "pollwarden-alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "pollwarden-fleet.json"
PROMETHEUS_OWN = {"up"}
"""Series Prometheus makes itself for every target."""


@pytest.fixture(scope="module")
def exposed(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every series name a worker's /metrics shows over a store with something in every gauge."""
    home = filled_home(tmp_path_factory.mktemp("deploy") / "home")
    metrics = Metrics()
    metrics.count_fleet(lambda: open_store(home, keys="none"))
    names: set[str] = set()
    for family in metrics.registry.collect():
        names.update(sample.name for sample in family.samples)
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(family.type, ("",))
        names.update(family.name + suffix for suffix in suffixes)
    return names


def _rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def _metrics_in(expr: str) -> set[str]:
    # A label name or a function never starts with pollwarden_; `up` is the one series of Prometheus's own used.
    return set(re.findall(r"\bpollwarden_[a-z_]+\b", expr)) | ({"up"} & set(re.findall(r"\b[a-z_]+\b", expr)))


def _dashboard_exprs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from _dashboard_exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _dashboard_exprs(item)


def test_the_alert_rules_parse_and_say_what_to_do() -> None:
    rules = _rules()
    alerts = {rule["alert"] for rule in rules}
    wanted = {
        "PollwardenMetricsAbsent",
        "PollwardenDatabaseUnreadable",
        "PollwardenOperationsOverdue",
        "PollwardenOperationsOrphaned",
        "PollwardenDecisionsWaiting",
        "PollwardenBudgetNearlySpent",
    }
    assert wanted <= alerts
    for rule in rules:
        assert set(rule) >= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["annotations"]["summary"]
    overdue = next(r for r in rules if r["alert"] == "PollwardenOperationsOverdue")
    assert overdue["for"] == "5m" and "pollwarden_fleet_overdue" in overdue["expr"]


def test_every_metric_the_rules_name_is_exposed(exposed: set[str]) -> None:
    for rule in _rules():
        missing = _metrics_in(rule["expr"]) - exposed - PROMETHEUS_OWN
        assert not missing, f"{rule['alert']} names {sorted(missing)}, which no scrape shows"


def test_every_metric_the_dashboard_names_is_exposed(exposed: set[str]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = list(_dashboard_exprs(dashboard["panels"]))
    assert len(exprs) >= 10
    named: set[str] = set()
    for expr in exprs:
        missing = _metrics_in(expr) - exposed
        assert not missing, f"the dashboard's {expr!r} names {sorted(missing)}, which no scrape shows"
        named |= _metrics_in(expr)
    assert {"pollwarden_fleet_overdue", "pollwarden_fleet_orphaned", "pollwarden_fleet_scrape_ok"} <= named


def test_the_collectors_list_of_names_is_what_it_exposes(exposed: set[str]) -> None:
    assert set(METRIC_NAMES) <= exposed
