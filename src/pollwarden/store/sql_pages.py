"""The console's pages, read in the database for SQLite and PostgreSQL: a page of operations in the order a person
needs them (`paging.URGENCY`), filtered and searched, with the counts of each filter; open decisions by reason.

Each page reads only its own rows' records: ranking, filtering, counting and the slice are one statement each, so a
page of 50 costs about the same with 300 operations or 10,000 (bench/console.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .common import DECISION_COLUMNS, STORED_COLUMNS, decision_from_row, marks, stored_from_row
from .paging import DecisionGroup, OperationsPage, OperationsQuery, Urgency
from .records import Stored, StoredDecision, UnreadableRow
from .sql_leases import chunks
from .sql_reads import Reads

MAX_GONE = 1000
"""Gone owners a page ranks by: each is a parameter up to three times in one statement, far below both databases'
limits. More than this many dead watch processes at once is a fleet to restart, not to read row by row."""

Clause = tuple[str, list[Any]]

_FROM = (
    "operations LEFT JOIN (SELECT DISTINCT operation_id FROM decisions WHERE status = 'open') AS awaiting"
    " ON awaiting.operation_id = operations.operation_id"
)
"""Every operation with its open decision's mark: one join (a hash join on PostgreSQL) rather than a lookup per
row, which a database whose statistics are not yet gathered may plan as a scan of the decisions per row."""
"""A piece of SQL and its parameters, in placeholder order."""


def like_pattern(text: str) -> str:
    """`text` anywhere, as a LIKE pattern escaped with a backslash: a `%` or `_` a person types is only itself."""
    # A NUL is in no id (and PostgreSQL refuses one in a parameter): searched for, it is left out.
    escaped = text.replace("\x00", "").lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class Pages(Reads):
    """The console's reads (`Store.operations_page`, `decision_groups`, `open_decisions`, `recent_decisions`)."""

    def _held(self, now: datetime) -> Clause:
        return (
            "(lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL AND lease_expires_at > ?)",
            [self.dialect.stamp(now)],
        )

    def _urgency(self, urgency: Urgency) -> dict[str, Clause]:
        """Each of the first three ranks as a condition on a row (`report.ownership`'s rules, in SQL)."""
        held, held_params = self._held(urgency.now)
        awaiting: Clause = ("awaiting.operation_id IS NOT NULL", [])  # joined in `_FROM`
        late: list[str] = []
        late_params: list[Any] = []
        for name, ttl in sorted(urgency.ttl.items()):
            late.append("(contract_name = ? AND next_poll_at <= ?)")
            late_params += [name, self.dialect.stamp(urgency.now - ttl)]
        overdue = (
            f"(phase = 'active' AND NOT {held} AND ({' OR '.join(late) or '1 = 0'}))",
            [*held_params, *late_params],
        )
        gone = sorted(urgency.gone)[:MAX_GONE]
        holder = f"CASE WHEN {held} THEN lease_owner ELSE watcher END"
        orphaned = (
            f"(phase = 'active' AND {holder} IN ({marks(len(gone))}))" if gone else "(1 = 0)",
            [*held_params, *gone] if gone else [],
        )
        return {"awaiting": awaiting, "overdue": overdue, "orphaned": orphaned}

    def _filters(self, query: OperationsQuery) -> Clause:
        where = ["unreadable IS NULL"]
        params: list[Any] = []
        if query.search:
            where.append("(lower(operations.operation_id) LIKE ? ESCAPE '\\' OR lower(job_id) LIKE ? ESCAPE '\\')")
            params += [like_pattern(query.search)] * 2
        for column, value in (
            ("contract_name", query.contract),
            ("phase", query.phase),
            (self.dialect.record_reason, query.reason),
        ):
            if value is not None:
                # No stored value holds a NUL, and PostgreSQL refuses one in a parameter: it matches nothing.
                where.append("1 = 0" if "\x00" in value else f"{column} = ?")
                params.extend([] if "\x00" in value else [value])
        return " AND ".join(where), params

    def operations_page(self, query: OperationsQuery, urgency: Urgency) -> OperationsPage:
        ranks = self._urgency(urgency)
        where, params = self._filters(query)
        flags = ", ".join(f"CASE WHEN {sql} THEN 1 ELSE 0 END AS f_{key}" for key, (sql, _) in ranks.items())
        flag_params = [p for _, ps in ranks.values() for p in ps]
        rank = " ".join(f"WHEN f_{key} = 1 THEN {n}" for n, key in enumerate(ranks))
        shown = f"WHERE f_{query.show} = 1" if query.show in ranks else ""
        totals = ", ".join(["(SELECT COUNT(*) FROM ranked)", *(f"(SELECT SUM(f_{key}) FROM ranked)" for key in ranks)])
        # One pass over the rows (`operations_console`, never a record): each row's flags once, then the counts and
        # this page's ids from them; then only this page's records.
        found_ids = self._rows(
            f"WITH ranked AS (SELECT operations.operation_id AS id, {flags},"
            " CASE WHEN phase = 'active' THEN 0 ELSE 1 END AS ended,"
            " CASE WHEN phase = 'active' THEN next_poll_at END AS due, updated_at AS at"
            f" FROM {_FROM} WHERE {where})"
            f" SELECT id, {totals} FROM ranked {shown}"
            f" ORDER BY CASE {rank} WHEN ended = 0 THEN {len(ranks)} ELSE {len(ranks) + 1} END, ended, due, at DESC, id"
            " LIMIT ? OFFSET ?",
            [*flag_params, *params, max(query.limit, 0), max(query.offset, 0)],
        )
        if found_ids:
            numbers = [int(n or 0) for n in found_ids[0][1:]]
        else:  # past the last page, or nothing shown: the counts alone
            counted = ", ".join(f"SUM(CASE WHEN {sql} THEN 1 ELSE 0 END)" for sql, _ in ranks.values())
            row = self._row(f"SELECT COUNT(*), {counted} FROM {_FROM} WHERE {where}", [*flag_params, *params])
            numbers = [int(n or 0) for n in (row or (0,) * (len(ranks) + 1))]
        counts = dict(zip(("all", *ranks), numbers, strict=True))
        ids = [str(found[0]) for found in found_ids]
        order = {operation_id: n for n, operation_id in enumerate(ids)}
        rows = (
            self._rows(f"SELECT {STORED_COLUMNS} FROM operations WHERE operation_id IN ({marks(len(ids))})", ids)
            if ids
            else []
        )
        decoded = [stored_from_row(row, self.dialect.moment) for row in rows]
        found = tuple(sorted((s for s in decoded if isinstance(s, Stored)), key=lambda s: order[s.record.operation_id]))
        # Rows no claim has set aside yet but whose record cannot be read are named with those set aside.
        broken = [u for u in decoded if isinstance(u, UnreadableRow)]
        aside = self.unreadable_rows() if query.offset == 0 else []
        return OperationsPage(
            rows=found,
            awaiting=self._open_of([s.record.operation_id for s in found]),
            matched=counts.get(query.show, counts["all"]),
            counts=counts,
            unreadable=tuple(aside + [u for u in broken if u.operation_id not in {a.operation_id for a in aside}]),
        )

    def _open_of(self, operation_ids: Sequence[str]) -> dict[str, str]:
        """Each operation's open decision (the newest, were there more), served by `decisions_open`."""
        found: dict[str, str] = {}
        for chunk in chunks(list(operation_ids)):
            for operation_id, decision_id in self._rows(
                f"SELECT operation_id, decision_id FROM decisions WHERE status = 'open'"
                f" AND operation_id IN ({marks(len(chunk))}) ORDER BY created_at, decision_id",
                chunk,
            ):
                found[str(operation_id)] = str(decision_id)
        return found

    def active_owners(self) -> list[str]:
        """The distinct owners of active operations (the lease holder's or the last watcher's): the few processes
        whose liveness ranks a page (`Urgency.gone`)."""
        rows = self._rows(
            "SELECT lease_owner FROM operations WHERE phase = 'active' AND lease_owner IS NOT NULL"
            " UNION SELECT watcher FROM operations WHERE phase = 'active' AND watcher IS NOT NULL"
        )
        return sorted(str(owner) for (owner,) in rows)

    def active_contracts(self) -> dict[str, str]:
        """Each contract name with active operations -> the text of its newest one (its lease TTL ranks overdue,
        as `fleet_counts` counts it)."""
        found: dict[str, str] = {}
        for (name,) in self._rows("SELECT DISTINCT contract_name FROM operations WHERE phase = 'active'"):
            # The newest one's id from `operations_console`, then its one contract text: no sort of texts.
            newest = self._row(
                "SELECT contract FROM operations WHERE operation_id = (SELECT operation_id FROM operations"
                " WHERE contract_name = ? AND phase = 'active' ORDER BY created_at DESC, operation_id DESC LIMIT 1)",
                (name,),
            )
            if newest is not None:
                found[str(name)] = str(newest[0])
        return found

    def contract_names(self) -> list[str]:
        return [str(name) for (name,) in self._rows("SELECT DISTINCT contract_name FROM operations ORDER BY 1")]

    # -- decisions -------------------------------------------------------------------------------------

    def decision_groups(self) -> list[DecisionGroup]:
        rows = self._rows(
            "SELECT reason, COUNT(*) FROM decisions WHERE status = 'open' GROUP BY reason ORDER BY reason"
        )
        return [DecisionGroup(str(reason), int(n)) for reason, n in rows]

    def open_decisions(self, reason: str | None = None, *, offset: int = 0, limit: int = 20) -> list[StoredDecision]:
        """Open decisions oldest first (one reason's, or all), a page at a time."""
        query = f"SELECT {DECISION_COLUMNS} FROM decisions WHERE status = 'open'"
        params: list[Any] = []
        if reason is not None:
            query += " AND reason = ?"
            params.append(reason)
        rows = self._rows(
            query + " ORDER BY created_at, decision_id LIMIT ? OFFSET ?", [*params, max(limit, 0), max(offset, 0)]
        )
        return [decision_from_row(row, self.dialect.moment) for row in rows]

    def recent_decisions(self, limit: int) -> list[StoredDecision]:
        """The last `limit` decisions answered (decided, refused or expired), newest first."""
        rows = self._rows(
            f"SELECT {DECISION_COLUMNS} FROM decisions WHERE status <> 'open'"
            " ORDER BY CASE WHEN decided_at IS NULL THEN 1 ELSE 0 END, decided_at DESC, decision_id DESC LIMIT ?",
            (limit,),
        )
        return [decision_from_row(row, self.dialect.moment) for row in rows]
