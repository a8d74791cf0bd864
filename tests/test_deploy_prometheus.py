"""deploy/prometheus run in Prometheus's own rule engine (`promtool`, from Debian's `prometheus` package, which
.ci/run installs): the rules load, their unit tests (deploy/prometheus/pollwarden-alerts.test.yml) pass on series
shaped as a real scrape serves them, and the alerts fire on series made from a real scrape of `pollwarden metrics`
(no worker running): over a stuck fleet, and over a database that cannot be read."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.test_metrics_cli import filled_home, metrics_command

PROMETHEUS = Path(__file__).resolve().parent.parent / "deploy" / "prometheus"
RULES = PROMETHEUS / "pollwarden-alerts.yml"
UNIT_TESTS = PROMETHEUS / "pollwarden-alerts.test.yml"
SCRAPE_LABELS = {"job": "pollwarden", "instance": "127.0.0.1:9464"}
"""What Prometheus adds to every series it scrapes from the `pollwarden` job."""

Series = tuple[str, dict[str, str], float]


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is not None:
        return found
    how = "install Debian's prometheus package, which ships promtool: `apt-get install prometheus` (as .ci/run does)"
    if os.environ.get("CI"):
        pytest.fail(f"promtool is missing in CI: {how}", pytrace=False)
    pytest.skip(f"promtool is not installed: {how}")


def _promtool(promtool: str, *args: str) -> str:
    done = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _scrape(*args: str, home: Path) -> list[Series]:
    """Every sample a real `pollwarden metrics` serves (no worker running), with its labels."""
    with metrics_command(*args, home=home) as (url, _), urllib.request.urlopen(url, timeout=30) as answer:
        text = answer.read().decode()
    return [
        (sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


@pytest.fixture(scope="module")
def stuck(tmp_path_factory: pytest.TempPathFactory) -> list[Series]:
    """A scrape of a fleet with an overdue, a rate-limited (95% of its budget) and an orphaned operation, and three
    open decisions (two failed jobs, a deadline): `test_metrics_cli.fill`."""
    return _scrape(home=filled_home(tmp_path_factory.mktemp("stuck") / "home"))


def _values(name: str, value: float, minutes: int) -> str:
    # An age or a lag grows by a second a second, as the real gauge does between scrapes; the rest hold still.
    step = 60 if name.endswith(("_age_seconds", "_lag_seconds")) else 0
    return f"{value:.6f}+{step}x{minutes}"


def _firing(promtool: str, tmp_path: Path, series: list[Series], at_minutes: int) -> set[tuple[str, ...]]:
    """The alerts firing after `at_minutes` of these series (scraped once a minute, up all along): each as its
    name and sorted labels. Asked of promtool by a unit test whose expected answer is empty: its report of what it
    got instead is the answer."""
    minutes = at_minutes + 10
    inputs = [{"series": _selector("up", {}), "values": f"1x{minutes}"}]
    inputs += [{"series": _selector(name, labels), "values": _values(name, v, minutes)} for name, labels, v in series]
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": inputs,
                "promql_expr_test": [
                    {"expr": 'ALERTS{alertstate="firing"}', "eval_time": f"{at_minutes}m", "exp_samples": []}
                ],
            }
        ],
    }
    path = tmp_path / "from-a-scrape.test.yml"
    path.write_text(json.dumps(test))  # JSON is YAML
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    report = done.stdout + done.stderr
    if done.returncode == 0:
        return set()
    got = re.search(r"got: (.*)", report)
    assert got is not None, report
    alerts = [re.findall(r'(\w+)="([^"]*)"', alert) for alert in re.findall(r"\{([^}]*)\}", got.group(1))]
    return {tuple(sorted(f"{k}={v}" for k, v in pairs if k not in ("__name__", "alertstate"))) for pairs in alerts}


def _selector(name: str, labels: dict[str, str]) -> str:
    pairs = ",".join(f'{k}="{v}"' for k, v in {**SCRAPE_LABELS, **labels}.items())
    return f"{name}{{{pairs}}}"


def test_promtool_loads_the_rules(promtool: str) -> None:
    assert "SUCCESS: 10 rules found" in _promtool(promtool, "check", "rules", str(RULES))


def test_the_rules_unit_tests_pass_in_promtool(promtool: str) -> None:
    assert "SUCCESS" in _promtool(promtool, "test", "rules", str(UNIT_TESTS))


def _unit_test_series() -> Iterator[tuple[str, set[str]]]:
    for group in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for item in group["input_series"]:
            found = re.fullmatch(r"(\w+)\{(.*)\}", item["series"])
            assert found is not None, item["series"]
            labels = set(re.findall(r'(\w+)="[^"]*"', found.group(2)))
            assert labels >= set(SCRAPE_LABELS), item["series"]  # every scraped series carries job and instance
            yield found.group(1), labels - set(SCRAPE_LABELS)


def test_the_unit_tests_series_are_named_and_labelled_as_a_real_scrape_serves_them(stuck: list[Series]) -> None:
    served = {name: set(labels) for name, labels, _ in stuck} | {"up": set()}
    seen = set()
    for name, labels in _unit_test_series():
        assert name in served, f"{name} is in the unit tests but no scrape serves it"
        assert labels == served[name], f"{name}: the unit tests label it {labels}, a scrape {served[name]}"
        seen.add(name)
    assert {"pollwarden_fleet_overdue", "pollwarden_fleet_orphaned", "pollwarden_fleet_scrape_ok"} <= seen


def test_every_alert_of_a_stuck_fleet_fires_on_series_made_from_a_real_scrape(
    promtool: str, stuck: list[Series], tmp_path: Path
) -> None:
    assert _firing(promtool, tmp_path, stuck, at_minutes=4) == set()  # nothing has lasted its `for` yet
    exports = ("contract=exports",)
    # At 250 minutes the decisions opened at the scrape have waited over 4 hours for over 5 minutes.
    assert _firing(promtool, tmp_path, stuck, at_minutes=250) == {
        ("alertname=PollwardenOperationsOverdue", *exports, "severity=warning"),
        ("alertname=PollwardenFallingBehind", *exports, "severity=warning"),  # due 10 minutes ago, and growing
        ("alertname=PollwardenOperationsOrphaned", *exports, "severity=warning"),
        ("alertname=PollwardenDecisionsWaiting", *exports, "reason=deadline_exceeded", "severity=warning"),
        ("alertname=PollwardenDecisionsWaiting", *exports, "reason=job_failed", "severity=warning"),
        ("alertname=PollwardenBudgetNearlySpent", *exports, "severity=info"),
        ("alertname=PollwardenRateLimited", *exports, "severity=info"),
    }


def test_a_real_scrape_of_a_database_that_cannot_be_read_fires_database_unreadable_only(
    promtool: str, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"this is not a database, " * 100)
    scraped = _scrape("--db", str(broken), home=tmp_path / "home")
    assert ("pollwarden_fleet_scrape_ok", {}, 0.0) in scraped
    assert _firing(promtool, tmp_path, scraped, at_minutes=10) == {
        ("alertname=PollwardenDatabaseUnreadable", "severity=critical")
    }
