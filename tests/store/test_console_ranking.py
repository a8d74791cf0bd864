"""The console's ranking read class by class (issue 28) gives the same operations in the same order, with the same
counts, as the one statement that ranked the whole fleet before it: that statement is kept here as the oracle, and
both are asked every page of every filter over a fleet with every kind of row (ties in due and update times, an
active operation awaiting a decision, overdue and orphaned at once, a lease still held, no owner at all)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pollwarden import events as ev
from pollwarden.core.contract.parse import parse_contract
from pollwarden.core.escalation import build_request
from pollwarden.core.reasons import StopReason
from pollwarden.core.record import new_record
from pollwarden.store.paging import SHOWS, OperationsQuery, Urgency

from .conftest import AnyStore

NOW = datetime(2026, 12, 2, 19, 33, tzinfo=UTC)
TTL = timedelta(seconds=65)
GONE = "watch/here:4242:abc"
LIVE = "watch/there:77:def"
CONTRACTS = ("alpha", "beta", "gamma")


def _text(name: str) -> str:
    return (
        f'name = "{name}"\nstatus_url = "http://127.0.0.1:9/jobs/{{job_id}}"\n'
        '[states]\npending = ["running"]\nsuccess = ["succeeded"]\nfailure = ["failed"]\n[fields]\nstate = "state"\n'
    )


def _fleet(store: AnyStore, count: int = 90) -> None:
    pick = random.Random(28)
    for n in range(count):
        name = CONTRACTS[n % 3]
        due = timedelta(minutes=pick.choice((-30, -10, -10, -1, 0, 1, 5, 5, 20)))  # repeated: ties in due times
        op = f"op-{pick.randrange(10**6):06d}-{n}"
        record = new_record(parse_contract(_text(name)), operation_id=op, job_id=f"job-{n}", now=NOW + due)
        store.create(record, _text(name), ev.Created.prepared({"job": record.job_id}))
        kind = pick.choice(("plain", "plain", "gone", "live", "held", "asks", "stopped", "stopped", "done"))
        if kind == "plain":
            continue
        owner = {"gone": GONE, "live": LIVE}.get(kind, "tests/ranking")
        at = NOW + timedelta(minutes=pick.choice((-40, -5, -5, -1)))  # repeated: ties in update times
        claimed = store.claim(op, owner, NOW + due - timedelta(minutes=1), TTL)
        assert claimed is not None
        lease, active = claimed
        if kind in ("gone", "live"):
            store.release(lease)
        elif kind == "held":  # its lease runs past NOW where it was due from NOW on, and had run out before
            continue
        elif kind == "done":
            done = active.succeeded(None, "done", at)
            assert store.write(lease, done, [ev.SucceededEvent.prepared({})], at, release=True)
        else:
            reason = pick.choice((StopReason.JOB_FAILED, StopReason.DEADLINE_EXCEEDED))
            stopped = active.ended(reason, "x", at, None) if reason.job_ended else active.stopped(reason, "x", at)
            request = build_request(stopped, None, at, decision_id=f"d-{op}")
            # "asks": a question about an operation that stays active (as an agent's cancel request is).
            record_written = active if kind == "asks" else stopped
            assert store.write(lease, record_written, [], at, release=True, decision=request)
    # Overdue, and held by a process known gone: a lease that still runs keeps them out of both flags.
    for n, op in enumerate(f"op-held-{n}" for n in range(3)):
        record = new_record(parse_contract(_text("alpha")), operation_id=op, job_id=f"h-{n}", now=NOW - TTL * 5)
        store.create(record, _text("alpha"), ev.Created.prepared({"job": record.job_id}))
        assert store.claim(op, GONE, NOW - timedelta(seconds=5), TTL) is not None


def _urgency() -> Urgency:
    return Urgency(NOW, dict.fromkeys(CONTRACTS, TTL), {GONE}.__contains__)


def _oracle(store: Any, query: OperationsQuery, urgency: Urgency) -> tuple[list[str], dict[str, int]]:
    """The ranking statement as it was before the ranking was read class by class (commit 2104954)."""
    from pollwarden.store.sql_pages import _FROM

    ranks = store._urgency(urgency, [GONE])
    where, params = store._filters(query)
    flags = ", ".join(f"CASE WHEN {sql} THEN 1 ELSE 0 END AS f_{key}" for key, (sql, _) in ranks.items())
    flag_params = [p for _, ps in ranks.values() for p in ps]
    rank = " ".join(f"WHEN f_{key} = 1 THEN {n}" for n, key in enumerate(ranks))
    shown = f"WHERE f_{query.show} = 1" if query.show in ranks else ""
    rows = store._rows(
        f"WITH ranked AS (SELECT operations.operation_id AS id, {flags},"
        " CASE WHEN phase = 'active' THEN 0 ELSE 1 END AS ended,"
        " CASE WHEN phase = 'active' THEN next_poll_at END AS due, updated_at AS at"
        f" FROM {_FROM} WHERE {where})"
        f" SELECT id FROM ranked {shown}"
        f" ORDER BY CASE {rank} WHEN ended = 0 THEN {len(ranks)} ELSE {len(ranks) + 1} END, ended, due, at DESC, id",
        [*flag_params, *params],
    )
    counted = ", ".join(f"SUM(CASE WHEN {sql} THEN 1 ELSE 0 END)" for sql, _ in ranks.values())
    row = store._row(f"SELECT COUNT(*), {counted} FROM {_FROM} WHERE {where}", [*flag_params, *params])
    counts = dict(zip(("all", *ranks), (int(n or 0) for n in row), strict=True))
    return [str(r[0]) for r in rows], counts


FILTERS: list[dict[str, Any]] = [
    {},
    {"contract": "beta"},
    {"phase": "active"},
    {"phase": "stopped"},
    {"search": "1"},
    {"reason": "job_failed"},
]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()) or "none")
def test_every_page_of_every_filter_ranks_as_the_one_statement_did(store: AnyStore, filters: dict[str, Any]) -> None:
    _fleet(store)
    urgency = _urgency()
    kinds = set()
    for show in SHOWS:
        expected, counts = _oracle(store, OperationsQuery(show=show, **filters), urgency)
        for size in (7, 50):
            pages: list[str] = []
            for offset in range(0, len(expected) + size, size):
                page = store.operations_page(OperationsQuery(show=show, offset=offset, limit=size, **filters), urgency)
                assert page.counts == counts and page.matched == len(expected)
                pages += [s.record.operation_id for s in page.rows]
            assert pages == expected, (show, size)
        kinds.add((show, len(expected) > 0))
    if not filters:  # the fleet has every kind of row the ranking tells apart
        assert kinds == {(show, True) for show in SHOWS}
        whole = store.operations_page(OperationsQuery(limit=1000), urgency)
        assert {s.record.phase.value for s in whole.rows} >= {"active", "stopped", "succeeded"}
        assert any(s.record.phase.value == "active" for s in whole.rows if s.record.operation_id in whole.awaiting)
        assert whole.counts["overdue"] > 0 and whole.counts["orphaned"] > 0 and whole.counts["awaiting"] > 0
