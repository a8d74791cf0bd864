"""The reads of operation rows, written once for SQLite and PostgreSQL: one operation, many, a whole listing, the
operations of jobs, and what the fleet counts. Each row is decoded strictly (`common.stored_from_row`): a reader
never fails for one row whose record cannot be read. A lookup of many skips it; a listing names it apart
(`Listing.unreadable`); a lookup of one by name says so (`UnreadableRecord`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from .base import ContractCounts, DecisionCount, HolderCount, Listing, Stored, UnreadableRecord, UnreadableRow
from .common import STORED_COLUMNS, Dialect, Row, chunks, marks, stored_from_row
from .sql_leases import DUE_ORDER, PACED, Leases


def _names(where: str) -> str:
    """A `names` table of the distinct contract names of the operations `where` holds, one index probe each (the
    least name after the last: neither database skips through an index by itself), never a read of every row:
    `operations_job` or `operations_newest_active` lead with the name. A few names, so a few probes."""
    return (
        f"WITH RECURSIVE names(name) AS (SELECT MIN(contract_name) FROM operations WHERE {where}"
        f" UNION ALL SELECT (SELECT MIN(contract_name) FROM operations WHERE {where} AND contract_name > names.name)"
        " FROM names WHERE names.name IS NOT NULL)"
    )


def next_due_query(dialect: Dialect, column: str, *, free: bool, skipping: int) -> str:
    """One of `next_due`'s two reads (`column`: next_poll_at, or paced_until for the paced rows), each in its own
    index (parameters: with `free`, the time the lease must be free by; the `skipping` contract names)."""
    unpaced = column == "next_poll_at"
    paced = "paced_until IS NULL" if unpaced else "paced_until IS NOT NULL"
    table = f"operations{dialect.indexed_by(DUE_ORDER if unpaced else PACED)}"
    query = f"SELECT MIN({column}) FROM {table} WHERE phase = 'active' AND {paced} AND unreadable IS NULL"
    if free:
        query += " AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= ?)"
    if skipping:
        query += f" AND contract_name NOT IN ({marks(skipping)})"
    return query


class Reads(Leases):
    """Operation rows as the interfaces read them (the store's writes build on this: `sql.py`)."""

    def get(self, operation_id: str) -> Stored | None:
        row = self._row(f"SELECT {STORED_COLUMNS} FROM operations WHERE operation_id = ?", (operation_id,))
        if row is None:
            return None
        found = stored_from_row(row, self.dialect.moment)
        if isinstance(found, UnreadableRow):
            raise UnreadableRecord(found, self.path)
        return found

    def get_many(self, operation_ids: Sequence[str]) -> dict[str, Stored]:
        found: dict[str, Stored] = {}
        for chunk in chunks(sorted(set(operation_ids))):
            rows = self._rows(
                f"SELECT {STORED_COLUMNS} FROM operations WHERE operation_id IN ({marks(len(chunk))})", chunk
            )
            found.update((s.record.operation_id, s) for s in self._readable(rows))
        return found

    def all(self) -> list[Stored]:
        return list(self.listing().operations)

    def listing(self) -> Listing:
        # operation_id breaks ties of created_at: a listing should not shuffle.
        rows = self._rows(f"SELECT {STORED_COLUMNS} FROM operations ORDER BY created_at, operation_id")
        decoded = [stored_from_row(row, self.dialect.moment) for row in rows]
        return Listing(
            tuple(one for one in decoded if isinstance(one, Stored)),
            tuple(one for one in decoded if isinstance(one, UnreadableRow)),
        )

    def _readable(self, rows: Sequence[Row]) -> list[Stored]:
        """The rows (in `STORED_COLUMNS` order) whose record can be read; the others are skipped: a reader that
        lists or looks up many never fails for one row (`listing` and `status` name them)."""
        return [one for one in (stored_from_row(row, self.dialect.moment) for row in rows) if isinstance(one, Stored)]

    def unreadable_rows(self) -> list[UnreadableRow]:
        rows = self._rows(
            "SELECT operation_id, unreadable, contract_name FROM operations WHERE unreadable IS NOT NULL"
            " ORDER BY operation_id"
        )
        return [UnreadableRow(str(op), str(why), str(name)) for op, why, name in rows]

    def find_job(self, contract_name: str, job_id: str) -> list[Stored]:
        return self.find_jobs(contract_name, [job_id]).get(job_id, [])

    def find_jobs(self, contract_name: str, job_ids: Sequence[str]) -> dict[str, list[Stored]]:
        """Every operation of these jobs under one contract, newest first per job (served by `operations_job`)."""
        found: dict[str, list[Stored]] = {}
        for chunk in chunks(sorted(set(job_ids))):
            rows = self._rows(
                f"SELECT {STORED_COLUMNS} FROM operations WHERE contract_name = ?"
                f" AND job_id IN ({marks(len(chunk))}) ORDER BY created_at DESC, operation_id DESC",
                (contract_name, *chunk),
            )
            for stored in self._readable(rows):
                found.setdefault(stored.record.job_id, []).append(stored)
        return found

    def next_due(self, free_at: datetime | None = None, *, skip: Collection[str] = ()) -> datetime | None:
        """The earliest next_poll_at among active operations, leased or not; with `free_at`, among those a claim
        then could take. A worker whose lane found nothing to claim asks the latter: the due operations it
        could not claim are in flight in its other lane, and waking for them would spin until they are recorded.
        `skip`: contract names the claim passes over (their operations would wake it for nothing, too). An operation
        paced to a later slot counts at its slot (`paced_until`, never before its next_poll_at): two queries, each
        served by its own index, rather than one over every active row."""
        found: list[datetime] = []
        passed_over = sorted(skip)
        for column in ("next_poll_at", "paced_until"):
            query = next_due_query(self.dialect, column, free=free_at is not None, skipping=len(passed_over))
            params: list[Any] = [] if free_at is None else [self.dialect.stamp(free_at)]
            params.extend(passed_over)
            row = self._row(query, params) if params else self._row(query)
            if row is not None and row[0] is not None:
                found.append(self.dialect.moment(row[0]))
        return min(found, default=None)

    def active_contracts(self) -> dict[str, str]:
        """Each contract name with active operations -> the text of its newest one (its lease TTL ranks overdue,
        as `fleet_counts` counts it)."""
        # One statement that never reads the table whole: the names (`_names`, over `operations_newest_active`),
        # then each one's newest active operation read backwards from the same index, and its one contract text.
        rows = self._rows(
            _names("phase = 'active'") + " SELECT name, (SELECT contract FROM operations WHERE phase = 'active'"
            " AND contract_name = names.name ORDER BY created_at DESC, operation_id DESC LIMIT 1) FROM names"
            " WHERE name IS NOT NULL"
        )
        return {str(name): str(text) for name, text in rows if text is not None}

    def contract_names(self) -> list[str]:
        rows = self._rows(f"{_names('1 = 1')} SELECT name FROM names WHERE name IS NOT NULL ORDER BY name")
        return [str(name) for (name,) in rows]

    def fleet_counts(
        self, now: datetime, ttl_of: Callable[[str], timedelta], *, pressure: bool = True
    ) -> list[ContractCounts]:
        at = self.dialect.stamp(now)
        counts: dict[str, ContractCounts] = {}
        # Rate limited: the record's count of consecutive rate-limited answers is not 0. Read as text, not as JSON:
        # parsing 10,000 records per scrape cost 200-400 ms; every record is written by `record_text` (json.dumps,
        # its default separators), so the zero reads exactly so (tests/e2e/test_metrics_cli.py counts both kinds).
        # Even as text it reads every active record (most of this statement's time, 25-30 ms at 10,000 on
        # PostgreSQL): without `pressure` (the console's table shows neither) the statement reads the index only.
        not_limited = '%"rate_limited_consecutive": 0,%'  # a parameter: no statement holds a literal "%"
        limited, used = (
            (
                "SUM(CASE WHEN record NOT LIKE ? THEN 1 ELSE 0 END)",
                "MAX(CAST(status_requests_used AS real) / CASE"
                " WHEN max_status_requests > 0 THEN max_status_requests ELSE 1 END)",
            )
            if pressure
            else ("0", "0")
        )
        # Overdue: due longer ago than the lease TTL of the contract's newest active operation (a contract's versions
        # rarely differ in timeout), with no lease running; each contract's cutoff in the same statement.
        cutoffs = [
            (name, self.dialect.stamp(now - ttl_of(text))) for name, text in sorted(self.active_contracts().items())
        ]
        cutoff = f"CASE contract_name {' '.join(['WHEN ? THEN ?'] * len(cutoffs))} END" if cutoffs else "NULL"
        overdue = (
            f"SUM(CASE WHEN next_poll_at <= {cutoff} AND (lease_owner IS NULL OR lease_expires_at IS NULL"
            " OR lease_expires_at <= ?) THEN 1 ELSE 0 END)"
        )
        rows = self._rows(
            "SELECT contract_name, COUNT(*), SUM(CASE WHEN next_poll_at <= ? THEN 1 ELSE 0 END),"
            f" MIN(CASE WHEN next_poll_at <= ? THEN next_poll_at END), {limited}, {used}, {overdue}"
            " FROM operations WHERE phase = 'active' AND unreadable IS NULL GROUP BY contract_name",
            [at, at, *([not_limited] if pressure else []), *(p for pair in cutoffs for p in pair), at],
        )
        for name, active, due, oldest, rate_limited, used, late in rows:
            oldest_due = None if oldest is None else self.dialect.moment(oldest)
            counts[str(name)] = ContractCounts(
                str(name),
                int(active),
                int(due or 0),
                oldest_due=oldest_due,
                rate_limited=int(rate_limited or 0),
                budget_used=min(1.0, float(used or 0.0)),
                overdue=int(late or 0),
            )
        for name, aside in self._rows(
            "SELECT contract_name, COUNT(*) FROM operations WHERE unreadable IS NOT NULL GROUP BY contract_name"
        ):
            known = counts.get(str(name), ContractCounts(str(name)))
            counts[str(name)] = replace(known, unreadable=int(aside))
        for name, open_count in self._rows(
            "SELECT o.contract_name, COUNT(*) FROM decisions d JOIN operations o ON o.operation_id = d.operation_id"
            " WHERE d.status = 'open' GROUP BY o.contract_name"
        ):
            known = counts.get(str(name), ContractCounts(str(name)))
            counts[str(name)] = replace(known, open_decisions=int(open_count))
        return [counts[name] for name in sorted(counts)]

    def open_decision_counts(self) -> list[DecisionCount]:
        reason, topic = (self.dialect.json_field.format(column="d.request", key=key) for key in ("reason", "topic"))
        rows = self._rows(
            f"SELECT o.contract_name, COALESCE({reason}, {topic}) AS why, COUNT(*), MIN(d.created_at) FROM decisions d"
            " JOIN operations o ON o.operation_id = d.operation_id WHERE d.status = 'open'"
            " GROUP BY o.contract_name, why ORDER BY o.contract_name, why"
        )
        return [
            DecisionCount(
                str(name), str(why or "unknown"), int(n), None if first is None else self.dialect.moment(first)
            )
            for name, why, n, first in rows
        ]

    def active_holders(self, now: datetime) -> list[HolderCount]:
        rows = self._rows(
            "SELECT contract_name, CASE WHEN lease_owner IS NOT NULL AND lease_expires_at > ? THEN lease_owner"
            " ELSE watcher END AS holder, COUNT(*) FROM operations WHERE phase = 'active' AND unreadable IS NULL"
            " GROUP BY contract_name, holder",
            (self.dialect.stamp(now),),
        )
        return [HolderCount(str(name), None if who is None else str(who), int(n)) for name, who, n in rows]
