"""What the reads of one operation and of the due backlog cost on SQLite without statistics (no store runs ANALYZE).

Not a test: it prints its figures. Run from the repository root:

    python -m bench.read_plans [--operations 10000] [--due 50000] [--held 1000] [--calls 200]

One real SQLite store, seeded through SQL (the plans depend on the schema, not on the records' text):
`operations` ended operations, a tenth of them still active, three decisions each (a tenth open); then `due`
active operations due now, `held` of them leased by ten holders. It times, in milliseconds a call (median of
`calls` calls):

- every decision of one operation (`decisions_query`: status, story, the console's page of it, MCP), with schema
  15's `decisions_operation` and again after dropping it (schema 14);
- the console's newest answered decisions (`RECENT_DECISIONS`, schema 15's `decisions_answered`) and the one
  read that schema 14 made of them;
- the fleet claim's first rows of the due backlog (`claim_due_query`, limit 16) and its look for dead holders
  (`dead_holders_query`: once a `PROBE_EVERY` on a long backlog), from schema 15's `operations_held` and as it
  was, every due row's lease through `operations_due_order`.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pollwarden.store.common import holders_query
from pollwarden.store.sql_leases import DUE, DUE_ORDER, claim_due_query, dead_holders_query
from pollwarden.store.sql_pages import RECENT_DECISIONS
from pollwarden.store.sql_reads import decisions_query
from pollwarden.store.sqlite import SQLITE, SQLiteStore

NOW = 1e9
_RECENT_14 = (
    "SELECT request, status, decided_by, decided_at, option, note FROM decisions WHERE status <> 'open'"
    " ORDER BY CASE WHEN decided_at IS NULL THEN 1 ELSE 0 END, decided_at DESC, decision_id DESC LIMIT ?"
)
"""The console's recent decisions as schema 14 read them: one ORDER BY that no index serves."""
BATCH = 16


def _seed(conn: sqlite3.Connection, operations: int, due: int, held: int) -> None:
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
        " INSERT INTO operations (operation_id, job_id, contract_name, phase, next_poll_at, deadline_at,"
        " status_requests_used, max_status_requests, record, contract, created_at, updated_at)"
        " SELECT 'op' || i, 'j' || i, 'c', CASE WHEN i % 10 = 0 THEN 'active' ELSE 'stopped' END, ? + 3600,"
        " ? + 86400, 0, 10, '{}', '', i, i FROM n",
        (operations, NOW, NOW),
    )
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
        " INSERT INTO operations (operation_id, job_id, contract_name, phase, next_poll_at, deadline_at,"
        " status_requests_used, max_status_requests, record, contract, created_at, updated_at)"
        " SELECT 'due' || i, 'dj' || i, 'c', 'active', ? - i, ? + 86400, 0, 10, '{}', '', i, i FROM n",
        (due, NOW, NOW),
    )
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
        " INSERT INTO decisions (decision_id, operation_id, status, created_at, request, reason, decided_at)"
        " SELECT 'd' || i, 'op' || (i % ?), CASE WHEN i % 10 = 0 THEN 'open' ELSE 'decided' END, i, '{}', 'stop',"
        " CASE WHEN i % 10 = 0 THEN NULL ELSE i + 1 END"
        " FROM n",
        (3 * operations, operations),
    )
    conn.execute(
        "UPDATE operations SET lease_owner = 'w' || (rowid % 10), lease_expires_at = ? + 30"
        " WHERE operation_id IN (SELECT operation_id FROM operations WHERE operation_id LIKE 'due%' LIMIT ?)",
        (NOW, held),
    )
    conn.commit()


def _ms(call: Callable[[int], object], calls: int) -> float:
    times = []
    for i in range(calls):
        start = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def run(operations: int, due: int, held: int, calls: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.db"
        SQLiteStore(path).close()
        conn = sqlite3.connect(path, cached_statements=0)  # a cached statement keeps its plan past DROP INDEX
        try:
            _seed(conn, operations, due, held)
            one = SQLITE.sql(decisions_query(of_operation=True, open_only=False))
            claim = SQLITE.sql(claim_due_query(SQLITE))
            look = SQLITE.sql(dead_holders_query(SQLITE))
            old_look = SQLITE.sql(holders_query(f"operations{SQLITE.indexed_by(DUE_ORDER)}", DUE))

            def decisions(i: int) -> object:
                return conn.execute(one, (f"op{i * 7919 % operations}",)).fetchall()

            out = {
                "decisions of one operation": _ms(decisions, calls),
                "claim of 16 due rows": _ms(lambda _: conn.execute(claim, (NOW, NOW, NOW, BATCH)).fetchall(), calls),
                "look for dead holders": _ms(lambda _: conn.execute(look, (NOW, NOW, "me", NOW)).fetchall(), calls),
                "look for dead holders, schema 14": _ms(
                    lambda _: conn.execute(old_look, (NOW, NOW, "me", NOW)).fetchall(), calls
                ),
            }
            out["newest 20 answered decisions"] = _ms(lambda _: conn.execute(RECENT_DECISIONS, (20,)).fetchall(), calls)
            conn.execute("DROP INDEX decisions_operation")
            out["decisions of one operation, schema 14"] = _ms(decisions, calls)
            out["newest 20 answered decisions, schema 14"] = _ms(
                lambda _: conn.execute(_RECENT_14, (20,)).fetchall(), calls
            )
            return out
        finally:
            conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--operations", type=int, default=10_000)
    parser.add_argument("--due", type=int, default=50_000)
    parser.add_argument("--held", type=int, default=1_000)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    figures = run(args.operations, args.due, args.held, args.calls)
    print(
        f"{args.operations:,} operations ({3 * args.operations:,} decisions), {args.due:,} due, {args.held:,} held;"
        f" median ms a call of {args.calls}:"
    )
    for name, ms in figures.items():
        print(f"  {name}: {ms:.3f} ms")


if __name__ == "__main__":
    main()
