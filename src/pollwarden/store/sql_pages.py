"""The console's pages, read in the database for SQLite and PostgreSQL: a page of operations in the order a person
needs them (`paging.URGENCY`), filtered and searched, with the counts of each filter; open decisions by reason.

Each page reads only its own rows' records. One grouped pass counts the filtered rows by their flags and owner (the
counts of every filter and the size of each class of `URGENCY`); then each class the page overlaps is one statement
sorted within the class with a LIMIT, so no statement sorts the whole fleet (bench/console.py;
tests/store/test_console_ranking.py holds the one statement this replaced as the oracle of the order)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .common import DECISION_COLUMNS, STORED_COLUMNS, chunks, decision_from_row, marks, stored_from_row
from .paging import URGENCY, DecisionGroup, OperationsPage, OperationsQuery, Urgency
from .records import Stored, StoredDecision, UnreadableRow
from .sql_reads import Reads

MAX_GONE = 1000
"""Gone owners a page ranks by: each is a parameter once in a class's statement, far below both databases'
limits. More than this many dead watch processes at once is a fleet to restart, not to read row by row."""

Clause = tuple[str, list[Any]]
"""A piece of SQL and its parameters, in placeholder order."""

_FROM = (
    "operations LEFT JOIN (SELECT DISTINCT operation_id FROM decisions WHERE status = 'open') AS awaiting"
    " ON awaiting.operation_id = operations.operation_id"
)
"""Every operation with its open decision's mark: one join (a hash join on PostgreSQL) rather than a lookup per
row, which a database whose statistics are not yet gathered may plan as a scan of the decisions per row."""

_ORDER = (
    "CASE WHEN phase = 'active' THEN 0 ELSE 1 END, CASE WHEN phase = 'active' THEN next_poll_at END,"
    " updated_at DESC, operations.operation_id"
)
"""The order within one class of `URGENCY`: active before ended, active ones by next due, then newest first."""

_HINTS = ("awaiting.operation_id IS NOT NULL", "phase = 'active'", "phase = 'active'", "phase = 'active'")
"""What each class of `URGENCY` implies, said so that the database can use an index for it (overdue and orphaned
operations are active); the ended class says so itself."""


def _when(sql: str, *, on: bool = True) -> str:
    """A flag's condition as 1 or 0: a NULL inside it (an active row with no owner at all) counts as not flagged,
    both where the flags are counted and where a class is read."""
    return f"(CASE WHEN {sql} THEN 1 ELSE 0 END) = {1 if on else 0}"


def _classes(
    query: OperationsQuery, keys: list[str], groups: Sequence[tuple[Any, ...]], gone: set[str]
) -> tuple[list[int], dict[str, int]]:
    """From `Pages._groups`: each `SHOWS` count (an operation both awaiting and overdue counts in both) and the size
    of each class of `URGENCY` (an operation is in the first whose flag it has; `keys` the flags in that order)
    among those `query.show` keeps. An active row whose owner is `gone` is orphaned, as `_urgency` says in SQL."""
    counts = dict.fromkeys(("all", *keys), 0)
    sizes = [0] * len(URGENCY)
    for awaiting, overdue, live, holder, number in groups:
        n = int(number)
        marked = {"awaiting": int(awaiting) == 1, "overdue": int(overdue) == 1}
        marked["orphaned"] = int(live) == 1 and holder is not None and str(holder) in gone
        on = {key for key in keys if marked[key]}
        counts["all"] += n
        for key in on:
            counts[key] += n
        if query.show in keys and query.show not in on:
            continue
        rank = next((r for r, key in enumerate(keys) if key in on), len(keys) if int(live) else len(keys) + 1)
        sizes[rank] += n
    return sizes, counts


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

    def _holder(self, now: datetime) -> Clause:
        """Who answers for a row: the lease holder while its lease runs, else its last watcher."""
        held, held_params = self._held(now)
        return f"CASE WHEN {held} THEN lease_owner ELSE watcher END", held_params

    def _urgency(self, urgency: Urgency, gone: Sequence[str]) -> dict[str, Clause]:
        """Each of the first three ranks as a condition on a row (`report.ownership`'s rules, in SQL); `gone`: the
        owners `urgency.gone` found gone among those of the rows counted."""
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
        holder, holder_params = self._holder(urgency.now)
        orphaned = (
            f"(phase = 'active' AND {holder} IN ({marks(len(gone))}))" if gone else "(1 = 0)",
            [*holder_params, *gone] if gone else [],
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
        where, params = self._filters(query)
        groups = self._groups(urgency, (where, params))
        # The owners of the rows counted, asked once each: a few processes, read in the same pass as the counts.
        holders = {str(holder) for *_, holder, _ in groups if holder is not None}
        gone = sorted(holder for holder in holders if urgency.gone(holder))[:MAX_GONE]
        flags = self._urgency(urgency, gone)
        sizes, counts = _classes(query, list(flags), groups, set(gone))
        # The page is a window over the classes in `URGENCY` order: each class it overlaps is read on its own,
        # sorted within the class (`_ORDER`) with a LIMIT, so no statement sorts the whole fleet.
        ids: list[str] = []
        start, end = max(query.offset, 0), max(query.offset, 0) + max(query.limit, 0)
        first = 0
        for rank, size in enumerate(sizes):
            low, high = max(start, first), min(end, first + size)
            if low < high:
                ids += self._class_ids(rank, flags, query, (where, params), offset=low - first, limit=high - low)
            first += size
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

    def _groups(self, urgency: Urgency, filtered: Clause) -> list[tuple[Any, ...]]:
        """One grouped pass over the filtered rows: how many have each combination of awaiting, overdue, active
        and owner (`_classes` makes the orphaned flag of the owner, and the counts, from it)."""
        where, params = filtered
        flags = self._urgency(urgency, [])
        holder, holder_params = self._holder(urgency.now)
        cases = [f"CASE WHEN {flags[key][0]} THEN 1 ELSE 0 END" for key in ("awaiting", "overdue")]  # `_when`'s
        rows = self._rows(
            f"SELECT {', '.join(cases)}, CASE WHEN phase = 'active' THEN 1 ELSE 0 END, {holder}, COUNT(*)"
            f" FROM {_FROM} WHERE {where} GROUP BY 1, 2, 3, 4",
            [*flags["awaiting"][1], *flags["overdue"][1], *holder_params, *params],
        )
        return [tuple(row) for row in rows]

    def _class_ids(
        self, rank: int, flags: dict[str, Clause], query: OperationsQuery, filtered: Clause, *, offset: int, limit: int
    ) -> list[str]:
        """This page's ids of one class of `URGENCY`: rows with none of the earlier classes' flags and with its own
        (active or ended for the last two), and the shown flag; the flags' conditions are the ones `_classes`
        counted with, so the windows add up."""
        where, params = filtered
        keys = list(flags)
        wanted = [(key, False) for key in keys[:rank]] + [(key, True) for key in keys[rank : rank + 1]]
        if query.show in flags and query.show not in keys[: rank + 1]:
            wanted.append((query.show, True))
        conditions = [_when(flags[key][0], on=on) for key, on in wanted]
        condition_params = [p for key, _ in wanted for p in flags[key][1]]
        conditions.append(_HINTS[rank] if rank < len(_HINTS) else "phase <> 'active'")
        found = self._rows(
            f"SELECT operations.operation_id FROM {_FROM} WHERE {where} AND {' AND '.join(conditions)}"
            f" ORDER BY {_ORDER} LIMIT ? OFFSET ?",
            [*params, *condition_params, limit, offset],
        )
        return [str(operation_id) for (operation_id,) in found]

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
