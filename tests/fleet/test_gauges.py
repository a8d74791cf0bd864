"""The worker's fleet gauges, scraped from a real registry over a real SQLite store."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from prometheus_client import generate_latest

from pollwarden import events as ev
from pollwarden.audit import load_or_create_keys
from pollwarden.core import new_record, parse_contract
from pollwarden.fleet.log import JsonLog
from pollwarden.fleet.metrics import Metrics
from pollwarden.home.operating import open_store
from pollwarden.home.outbox import Courier
from pollwarden.store.base import Store
from pollwarden.store.open import open_store as open_store_at
from pollwarden.store.owner import process_owner
from pollwarden.store.witness import Witness
from tests.loopback import Answer, serving

from ..core.support import contract_text


def test_a_scrape_reports_active_due_overdue_and_the_oldest_due_lag_per_contract(tmp_path: Path) -> None:
    text = contract_text()  # timeout 30 s: a lease TTL of 65 s
    contract = parse_contract(text)
    home = tmp_path / "home"
    now = datetime.now(UTC)
    store = open_store(home)
    try:
        for op, due_in in (("late", -600), ("due", -5), ("later", 600)):
            record = new_record(contract, operation_id=op, job_id=op, now=now)
            store.create(replace(record, next_poll_at=now + timedelta(seconds=due_in)), text, ev.Created.prepared({}))
    finally:
        store.close()
    opened: list[Store] = []

    def factory() -> Store:
        opened.append(open_store(home, keys="none"))
        return opened[-1]

    metrics = Metrics()
    metrics.count_fleet(factory, fresh_for=60)
    try:
        scraped = generate_latest(metrics.registry).decode()
        again = generate_latest(metrics.registry).decode()
    finally:
        for store in opened:
            store.close()
    assert 'pollwarden_fleet_active{contract="exports"} 3.0' in scraped
    assert 'pollwarden_fleet_due{contract="exports"} 2.0' in scraped
    assert 'pollwarden_fleet_overdue{contract="exports"} 1.0' in scraped
    assert 'pollwarden_fleet_rate_limited{contract="exports"} 0.0' in scraped
    assert 'pollwarden_fleet_orphaned{contract="exports"} 0.0' in scraped
    assert "pollwarden_fleet_scrape_ok 1.0" in scraped
    lag = next(line for line in scraped.splitlines() if line.startswith("pollwarden_fleet_oldest_due_lag_seconds{"))
    assert 600 <= float(lag.split()[-1]) < 700
    assert again == scraped and len(opened) == 1  # within fresh_for: one store, one set of queries


def test_a_scrape_while_the_database_is_away_says_so_and_logs_why(tmp_path: Path) -> None:
    def factory() -> Store:
        raise OSError("database unreachable")

    logged = io.StringIO()
    metrics = Metrics()
    metrics.count_fleet(factory, fresh_for=0, log=JsonLog(logged, worker="w"))
    scraped = generate_latest(metrics.registry).decode()
    again = generate_latest(metrics.registry).decode()
    assert "# TYPE pollwarden_polls_total counter" in scraped  # the worker's own metrics still answer
    assert "pollwarden_fleet_scrape_ok 0.0" in scraped and "pollwarden_fleet_active" not in scraped
    assert "pollwarden_fleet_scrape_errors_total 2.0" in again
    lines = [json.loads(line) for line in logged.getvalue().splitlines()]
    unreadable = ("metrics_database_unreadable", "OSError: database unreachable")
    assert [(e["event"], e["error"]) for e in lines] == [unreadable] * 2


def test_a_witness_that_cannot_be_written_shows_in_the_outbox_gauges(tmp_path: Path) -> None:
    """A head the witness refused stays in the outbox, `retrying`: what an operator alerts on."""
    with serving({("POST", "/heads"): Answer(503)}) as witness:
        store = open_store_at(
            tmp_path / "f.db",
            keys=load_or_create_keys(tmp_path / "keys"),
            witness=Witness.parse(f"{witness.url}/heads", "t"),
        )
        try:
            store.append("op", ev.WatchInterrupted.prepared({"by": "test"}), datetime.now(UTC))
            Courier(store, owner=process_owner("outbox")).deliver_due()
            metrics = Metrics()
            metrics.count_fleet(lambda: store, fresh_for=0)
            scraped = generate_latest(metrics.registry).decode()
        finally:
            store.close()
    assert 'pollwarden_outbox_deliveries{kind="witness",state="retrying"} 1.0' in scraped
    assert 'pollwarden_outbox_oldest_age_seconds{kind="witness",state="retrying"}' in scraped
