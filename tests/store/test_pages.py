"""The console's pages in the database (issue 28): operations most urgent first, filtered, searched and counted in
SQL on both backends; open decisions counted by their `reason` column and paged."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from pollwarden import events as ev
from pollwarden.core.contract.parse import parse_contract
from pollwarden.core.escalation import build_request
from pollwarden.core.reasons import StopReason
from pollwarden.core.record import new_record
from pollwarden.store.paging import OperationsQuery, Urgency
from pollwarden.store.postgres import upgrade_database

from .conftest import AnyStore, Backend
from .undo import undone_after

NOW = datetime(2026, 12, 2, 19, 33, tzinfo=UTC)
TTL = timedelta(seconds=65)


def _text(name: str) -> str:
    return (
        f'name = "{name}"\nstatus_url = "http://127.0.0.1:9/jobs/{{job_id}}"\n'
        '[states]\npending = ["running"]\nsuccess = ["succeeded"]\nfailure = ["failed"]\n[fields]\nstate = "state"\n'
    )


def _create(store: AnyStore, op: str, *, contract: str = "deploys", due: timedelta, job: str | None = None) -> None:
    text = _text(contract)
    # Created when it is first due: its next poll is then (a deferral could not pass its deadline).
    record = new_record(parse_contract(text), operation_id=op, job_id=job or f"job-{op}", now=NOW + due)
    store.create(record, text, ev.Created.prepared({"job": record.job_id}))


def _stop(store: AnyStore, op: str, reason: StopReason, *, at: timedelta, error: str | None = None) -> str:
    claimed = store.claim(op, "tests/pages", NOW + at, TTL)
    assert claimed is not None
    lease, record = claimed
    when = NOW + at
    stopped = record.ended(reason, "ended", when, error) if reason.job_ended else record.stopped(reason, "x", when)
    request = build_request(stopped, None, when, decision_id=f"d-{op}")
    stop = (ev.JobEnded if reason.job_ended else ev.Escalated).prepared({"reason": reason.value})
    assert store.write(lease, stopped, [stop], when, release=True, decision=request)
    return request.decision_id


def _succeed(store: AnyStore, op: str, *, at: timedelta) -> None:
    claimed = store.claim(op, "tests/pages", NOW + at, TTL)
    assert claimed is not None
    lease, record = claimed
    done = record.succeeded(None, "done", NOW + at)
    assert store.write(lease, done, [ev.SucceededEvent.prepared({})], NOW + at, release=True)


def _fleet(store: AnyStore) -> None:
    _create(store, "op-later", due=timedelta(minutes=30))
    _create(store, "op-soon", due=timedelta(minutes=1))
    _create(store, "op-late", due=-timedelta(minutes=10))  # overdue: due longer ago than the lease TTL
    _create(store, "op-late-worse", contract="exports", due=-timedelta(minutes=20))
    _create(store, "op-gone", due=timedelta(minutes=5))
    _create(store, "op-failed", due=timedelta(0), job="JOB_100%_x")
    _create(store, "op-budget", contract="exports", due=timedelta(0))
    _create(store, "op-done-old", due=timedelta(0))
    _create(store, "op-done-new", due=timedelta(0))
    _stop(store, "op-failed", StopReason.JOB_FAILED, at=-timedelta(minutes=3), error="3/5 pods CrashLoopBackOff")
    _stop(store, "op-budget", StopReason.REQUEST_BUDGET_EXHAUSTED, at=-timedelta(minutes=2))
    _succeed(store, "op-done-old", at=-timedelta(minutes=40))
    _succeed(store, "op-done-new", at=-timedelta(minutes=4))
    # op-gone's watcher is a `watch` process known to be gone (`Urgency.gone`, as `report.ownership` asks it).
    claimed = store.claim("op-gone", "watch/here:4242:abc", NOW - timedelta(minutes=5), TTL)
    assert claimed is not None
    store.release(claimed[0])


def _urgency() -> Urgency:
    return Urgency(NOW, {"deploys": TTL, "exports": TTL}, {"watch/here:4242:abc"}.__contains__)


def _ids(store: AnyStore, **query: object) -> list[str]:
    page = store.operations_page(OperationsQuery(**query), _urgency())  # type: ignore[arg-type]
    return [s.record.operation_id for s in page.rows]


def test_operations_come_most_urgent_first_then_active_by_next_poll_then_ended_newest_first(store: AnyStore) -> None:
    _fleet(store)
    assert _ids(store) == [
        "op-budget",  # awaiting a decision (stopped most recently first)
        "op-failed",
        "op-late-worse",  # overdue, by next poll
        "op-late",
        "op-gone",  # orphaned
        "op-soon",  # active, by next poll
        "op-later",
        "op-done-new",  # ended, newest first
        "op-done-old",
    ]
    page = store.operations_page(OperationsQuery(), _urgency())
    assert page.counts == {"all": 9, "awaiting": 2, "overdue": 2, "orphaned": 1}
    assert page.matched == 9
    assert page.awaiting == {"op-failed": "d-op-failed", "op-budget": "d-op-budget"}


def test_a_page_is_a_slice_and_the_filters_count_what_matches(store: AnyStore) -> None:
    _fleet(store)
    assert _ids(store, offset=2, limit=3) == ["op-late-worse", "op-late", "op-gone"]
    assert _ids(store, offset=9) == []
    assert _ids(store, show="overdue") == ["op-late-worse", "op-late"]
    assert _ids(store, show="orphaned") == ["op-gone"]
    assert _ids(store, show="awaiting", contract="exports") == ["op-budget"]
    assert _ids(store, phase="succeeded") == ["op-done-new", "op-done-old"]
    assert _ids(store, reason="job_failed") == ["op-failed"]
    page = store.operations_page(OperationsQuery(show="overdue", contract="deploys"), _urgency())
    assert page.matched == 1 and page.counts == {"all": 7, "awaiting": 1, "overdue": 1, "orphaned": 1}


def test_search_finds_part_of_an_operation_or_a_job_id_in_any_case_and_wildcards_are_only_themselves(
    store: AnyStore,
) -> None:
    _fleet(store)
    assert _ids(store, search="LATE") == ["op-late-worse", "op-late", "op-later"]
    assert _ids(store, search="Worse") == ["op-late-worse"]
    assert _ids(store, search="100%_X") == ["op-failed"]  # the job id, its % and _ taken literally
    assert _ids(store, search="%") == ["op-failed"]
    assert _ids(store, search="_") == ["op-failed"]  # no operation id has an underscore: only that job id
    assert _ids(store, search="nothing-like-it") == []
    assert _ids(store, search="wor\x00se") == ["op-late-worse"]  # a NUL is in no id: left out of the search
    assert _ids(store, contract="deploys\x00") == [] and _ids(store, reason="\x00") == []


def test_open_decisions_are_counted_by_reason_and_paged_oldest_first(store: AnyStore) -> None:
    for n in range(5):
        _create(store, f"op-{n}", due=timedelta(0))
        reason = StopReason.JOB_FAILED if n % 2 == 0 else StopReason.DEADLINE_EXCEEDED
        _stop(store, f"op-{n}", reason, at=timedelta(seconds=n), error="boom" if n == 0 else None)
    groups = store.decision_groups()
    assert [(g.reason, g.count) for g in groups] == [("deadline_exceeded", 2), ("job_failed", 3)]
    failed = store.open_decisions("job_failed", offset=1, limit=5)
    assert [d.request.decision_id for d in failed] == ["d-op-2", "d-op-4"]
    first = store.open_decisions(limit=1)
    assert [d.request.decision_id for d in first] == ["d-op-0"] and first[0].request.provider_error == "boom"
    assert store.recent_decisions(5) == []


SCHEMA_9 = undone_after(8)
"""What schemas 9 and later added (the upgrade to 9 brings them all again), undone: a store as a schema-8
pollwarden left it."""


def test_schema_9_fills_the_reason_of_the_decisions_already_there(store: AnyStore, backend: Backend) -> None:
    _create(store, "op-a", due=timedelta(0))
    _create(store, "op-b", due=timedelta(0))
    _stop(store, "op-a", StopReason.JOB_EXPIRED, at=timedelta(0))
    _stop(store, "op-b", StopReason.RATE_LIMITED, at=timedelta(seconds=1))
    backend.close_all()
    if isinstance(backend.target, Path):
        with sqlite3.connect(backend.target, isolation_level=None) as conn:
            for statement in SCHEMA_9:
                conn.execute(statement)
            conn.execute("UPDATE meta SET value = '8' WHERE key = 'schema_version'")
        conn.close()
    else:
        with psycopg.connect(backend.target, autocommit=True) as pg:
            for statement in SCHEMA_9:
                pg.execute(statement.encode())
            pg.execute("DELETE FROM schema_migrations WHERE version >= 9")
        assert upgrade_database(backend.target)[0] == 9
    reopened = backend.open()
    assert [(g.reason, g.count) for g in reopened.decision_groups()] == [("job_expired", 1), ("rate_limited", 1)]
    assert [d.request.decision_id for d in reopened.open_decisions("rate_limited")] == ["d-op-b"]


def test_recent_decisions_come_newest_answered_first_then_those_without_a_time(tmp_path: Path) -> None:
    """Two reads since schema 15 (the timed ones in `decisions_answered`' order, then the untimed): together they
    keep the one ORDER BY's order, and a limit the first read fills never reaches the second."""
    from pollwarden.audit import load_or_create_keys
    from pollwarden.store.sqlite import SQLiteStore

    keys = load_or_create_keys(tmp_path / "home")
    store = SQLiteStore(tmp_path / "s.db", keys=keys)
    try:
        for n in range(5):
            _create(store, f"op-{n}", due=timedelta(0))
            _stop(store, f"op-{n}", StopReason.JOB_FAILED, at=timedelta(seconds=n))
    finally:
        store.close()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.execute("UPDATE decisions SET status = 'expired' WHERE decision_id IN ('d-op-0', 'd-op-3')")
        for op, at in (("d-op-1", 10.0), ("d-op-2", 20.0)):
            conn.execute("UPDATE decisions SET status = 'decided', decided_at = ? WHERE decision_id = ?", (at, op))
    store = SQLiteStore(tmp_path / "s.db", keys=keys)
    try:
        assert [d.request.decision_id for d in store.recent_decisions(10)] == ["d-op-2", "d-op-1", "d-op-3", "d-op-0"]
        assert [d.request.decision_id for d in store.recent_decisions(3)] == ["d-op-2", "d-op-1", "d-op-3"]
        assert [d.request.decision_id for d in store.recent_decisions(1)] == ["d-op-2"]
    finally:
        store.close()
