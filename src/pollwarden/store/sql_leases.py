"""The lease bodies of the SQL store, for SQLite and PostgreSQL: a claim of one operation, of many at once (the
Python API's watches that are due together), the fleet's claim of whatever is due, and the taking of leases
they share. A lease is taken only in a transaction that holds the operation's row locked (SQLite: the file's
one write lock; PostgreSQL: FOR UPDATE, in id order), so each new token is the one read plus one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from .. import events as ev
from ..events.base import NewEvent
from .base import ClaimAnswer, Claimed, ClaimOf, Lease, Stored, StoreError, UnreadableRow
from .common import (
    STORED_COLUMNS,
    Dialect,
    Tx,
    chunks,
    dead_holders,
    holders_query,
    lease_held,
    marks,
    stored_from_row,
    taken_over,
)
from .sql_outbox import Outbox

MARKED = "set aside: "
"""How the `unreadable` column's text begins: a row read back with it was set aside by a claim already."""

PROBE_EVERY = timedelta(seconds=1)
"""How often a fleet claim that found work enough among the free rows still looks for dead holders' leases: their
operations wait at most this long rather than a lease's TTL, and a claimer on a long due backlog pays the read of
its holders (every due row's lease, in due order) once a second, not once a batch."""

DUE_ORDER = "operations_due_order"
"""The index of active rows in claim order (schema 4), which every read of due rows names (`Dialect.indexed_by`)."""
PACED = "operations_paced"
"""The index of paced rows (schema 11), by the slot they wait for."""

DUE = "phase = 'active' AND next_poll_at <= ? AND (paced_until IS NULL OR paced_until <= ?) AND unreadable IS NULL"
"""What the fleet claims (parameters: now, now): an operation paced to a later slot (`paced_until`) is due, but
not claimed before its slot."""


def claim_due_query(dialect: Dialect, skipping: int = 0, *, of_holders: int = 0) -> str:
    """The fleet claim's SELECT (parameters: now, now, now, the `skipping` contract names passed over, limit). Its
    ORDER BY is the order of the partial index `operations_due_order` (schema 4), so the database reads the first
    `limit` due rows and stops instead of sorting the whole backlog; tests/store/test_claim_plan.py fails if
    either backend's plan sorts. `of_holders`: the rows held by that many named owners instead of the free ones
    (parameters: now, now, the owners, now, the names passed over, limit)."""
    passed_over = f" AND contract_name NOT IN ({marks(skipping)})" if skipping else ""
    lease = (
        # Unexpired only: a dead holder's expired leases are free rows, read by the other branch (read by both, one
        # row would be claimed twice in one transaction).
        f"lease_owner IN ({marks(of_holders)}) AND lease_expires_at > ?"
        if of_holders
        else "(lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= ?)"
    )
    return (
        f"SELECT {STORED_COLUMNS} FROM operations{dialect.indexed_by(DUE_ORDER)} WHERE {DUE} AND {lease}{passed_over}"
        f" ORDER BY next_poll_at, operation_id LIMIT ?{dialect.lock_due}"
    )


def dead_holders_query(dialect: Dialect) -> str:
    """The fleet claim's read of holders (`holders_query`; parameters: now, now, the claimer, now): of due rows
    only, in due order, since only their rows are claimed. It runs on nearly every claim of a lightly loaded
    worker (free rows fall short), and over every active row it cost more than the claim (`bench.probe_bench`)."""
    return holders_query(f"operations{dialect.indexed_by(DUE_ORDER)}", DUE)


class Leases(Outbox):
    """Claims: one operation's, many named operations' at once, and the fleet's of whatever is due.

    A row whose record cannot be read is never leased: the claim that meets it marks it (`unreadable`, with why),
    appends `record_unreadable` to its log, and goes on with the others; from then on the fleet claim skips it, so
    it costs one claim, once. The rows this store set aside wait in `take_set_aside` for the worker to log."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._set_aside: deque[UnreadableRow] = deque()
        self._probe_after: datetime | None = None

    def take_set_aside(self) -> list[UnreadableRow]:
        taken: list[UnreadableRow] = []
        while self._set_aside:
            try:
                taken.append(self._set_aside.popleft())  # another thread of a shared store may take it first
            except IndexError:
                break
        return taken

    def _set_rows_aside(self, tx: Tx, rows: Sequence[UnreadableRow], now: datetime) -> None:
        """Mark each row unreadable and say so in its log, in the claim's transaction; a row already marked (a named
        claim meets marked rows too) is left as it is. The logs are locked together, in the one global order."""
        fresh = [row for row in rows if not row.why.startswith(MARKED)]
        if not fresh:
            return
        self._lock_logs(tx, [row.operation_id for row in fresh])
        for row in fresh:
            why = row.why[:500]
            tx.execute(
                "UPDATE operations SET unreadable = ? WHERE operation_id = ? AND unreadable IS NULL",
                (f"{MARKED}{why}", row.operation_id),
            )
            self._append(tx, row.operation_id, ev.RecordUnreadable(why=why), now)
        self._set_aside.extend(fresh)

    def claim(self, operation_id: str, owner: str, now: datetime, ttl: timedelta) -> ClaimAnswer:
        (claimed,) = self.claim_many([(operation_id, owner, ttl)], now)
        return claimed

    def claim_many(self, claims: Sequence[ClaimOf], now: datetime) -> list[ClaimAnswer]:
        """`claim` of each (operation, owner, ttl) in one transaction: the rows are read and locked in id order
        in one statement, as every batch locks them. An operation named twice is claimed by the first of its
        claimers; the later ones find it held, as they would claiming it one by one."""
        with self._tx() as tx:
            return self._claim_in(tx, claims, now, lock_logs=False)

    def _claim_in(self, tx: Tx, claims: Sequence[ClaimOf], now: datetime, *, lock_logs: bool) -> list[ClaimAnswer]:
        ids = sorted({operation_id for operation_id, _, _ in claims})
        found: dict[str, Stored | UnreadableRow] = {}
        for chunk in chunks(ids):
            rows = tx.execute(
                f"SELECT {STORED_COLUMNS} FROM operations"
                f" WHERE operation_id IN ({marks(len(chunk))}) ORDER BY operation_id{self.dialect.lock_row}",
                chunk,
            ).fetchall()
            found.update((str(row[0]), stored_from_row(row, self.dialect.moment)) for row in rows)
        taking: dict[str, tuple[Stored, str, datetime]] = {}
        for operation_id, owner, ttl in claims:
            stored = found.get(operation_id)
            if stored is None:
                raise StoreError(f"operation {operation_id} does not exist")
            if isinstance(stored, UnreadableRow):
                continue  # answered None, as a lease held elsewhere is: the caller's next read names it
            if operation_id not in taking and not lease_held(stored.lease_owner, stored.lease_expires_at, owner, now):
                taking[operation_id] = (stored, owner, now + ttl)
        unreadable = [one for one in found.values() if isinstance(one, UnreadableRow)]
        if lock_logs:
            self._lock_logs(tx, [*taking, *(row.operation_id for row in unreadable)])
        self._set_rows_aside(tx, unreadable, now)
        leases = {lease.operation_id: lease for lease in self._take_leases(tx, taking, now)}
        claimed: list[ClaimAnswer] = []
        for operation_id, owner, _ in claims:
            lease = leases.pop(operation_id, None)  # popped: the same owner naming it again finds it taken
            stored = found[operation_id]
            if lease is None or lease.owner != owner or not isinstance(stored, Stored):
                claimed.append(None)
            else:
                claimed.append((lease, stored.record))
        return claimed

    def claim_due(
        self, owner: str, now: datetime, ttl: timedelta, limit: int, *, skip: Collection[str] = ()
    ) -> list[Claimed]:
        """The fleet claim: up to `limit` due operations that are unleased or whose lease expired, earliest
        due first, none of a contract named in `skip` (one whose credential the claimer is still reading). The
        rows stay locked from the select to commit (SQLite: the one write lock; PostgreSQL: rows another claimer
        holds are skipped, not waited for), so no two claimers get one operation. The leases of holders proved
        dead are taken too, in the same order, as `claim` takes them (`lease_held`): a holder on another host, boot
        or PID namespace is never judged by its pid, and its lease runs out. They are looked for whenever the free
        rows fall short of `limit`, and otherwise once a `PROBE_EVERY`."""
        if limit <= 0:
            return []
        with self._tx() as tx:
            return self._claim_due_in(tx, owner, now, ttl, limit, lock_logs=False, skip=skip)

    def _claim_due_in(
        self,
        tx: Tx,
        owner: str,
        now: datetime,
        ttl: timedelta,
        limit: int,
        *,
        lock_logs: bool,
        skip: Collection[str] = (),
    ) -> list[Claimed]:
        """`claim_due`'s body in the caller's transaction; `lock_logs`: every claimed operation's log is locked
        with the claim, in key order, for writes that follow in the same transaction (`claim_due_then_write`)."""
        at = self.dialect.stamp(now)
        passed_over = sorted(skip)
        rows = tx.execute(claim_due_query(self.dialect, len(passed_over)), (at, at, at, *passed_over, limit)).fetchall()
        read = [stored_from_row(row, self.dialect.moment) for row in rows]
        if len(read) < limit or self._probe_after is None or now >= self._probe_after:
            self._probe_after = now + PROBE_EVERY
            read += self._of_dead_holders(tx, owner, now, limit, passed_over)
        # Earliest due first across both reads (a dead holder's rows were due before its death, so they often are).
        ordered = sorted((one for one in read if isinstance(one, Stored)), key=_due_order)[:limit]
        due = [(one.record.operation_id, one) for one in ordered]
        unreadable = [one for one in read if isinstance(one, UnreadableRow)]
        if lock_logs:
            self._lock_logs(tx, [operation_id for operation_id, _ in due] + [row.operation_id for row in unreadable])
        self._set_rows_aside(tx, unreadable, now)
        leases = self._take_leases(tx, {operation_id: (stored, owner, now + ttl) for operation_id, stored in due}, now)
        return [
            Claimed(lease, stored.record, stored.contract_text) for lease, (_, stored) in zip(leases, due, strict=True)
        ]

    def _of_dead_holders(
        self, tx: Tx, owner: str, now: datetime, limit: int, passed_over: Sequence[str]
    ) -> list[Stored | UnreadableRow]:
        """Up to `limit` due rows whose unexpired lease `claim` would take (`lease_held`: its holder is proved
        dead), locked as the free ones are. The holders are read first (`dead_holders`, as the outbox's claim does):
        the rows of live ones, in flight elsewhere, are neither locked nor read, nor can they crowd a dead
        holder's out."""
        at = self.dialect.stamp(now)
        dead = dead_holders(tx, dead_holders_query(self.dialect), (at, at), owner, now)
        read: list[Stored | UnreadableRow] = []
        for chunk in chunks(dead):
            query = claim_due_query(self.dialect, len(passed_over), of_holders=len(chunk))
            rows = tx.execute(query, (at, at, *chunk, at, *passed_over, limit - len(read))).fetchall()
            read += [stored_from_row(row, self.dialect.moment) for row in rows]
        return read

    def defer_paced(self, lease: Lease, until: datetime, event: NewEvent, now: datetime) -> bool:
        """Fenced: the operation stays due, is not claimed before `until`, and its lease is given back; `event` is
        appended only when it was not paced already (its record has not changed since it last was), so a wait
        for a provider's slot is one event however many times a claim meets it. False if the lease was lost."""
        with self._tx() as tx:
            row = tx.one(
                "SELECT paced_until FROM operations WHERE operation_id = ? AND lease_token = ? AND lease_owner = ?"
                f"{self.dialect.lock_row}",
                (lease.operation_id, lease.token, lease.owner),
            )
            if row is None:
                return False
            tx.execute(
                "UPDATE operations SET paced_until = ?, lease_owner = NULL, lease_expires_at = NULL"
                " WHERE operation_id = ?",
                (self.dialect.stamp(until), lease.operation_id),
            )
            if row[0] is None:
                self._append(tx, lease.operation_id, event, now)
            return True

    def _take_leases(self, tx: Tx, rows: Mapping[str, tuple[Stored, str, datetime]], now: datetime) -> list[Lease]:
        """The next token of each row (operation id: its row as read, the new owner, the new expiry) to its
        owner, in the caller's transaction, which holds the rows locked (so each token is the one read plus one);
        one UPDATE per owner and expiry. Taking a lease from another owner is logged, the logs locked at once."""
        if not rows:
            return []
        at = self.dialect.stamp(now)
        groups: dict[tuple[str, datetime], list[str]] = {}
        for operation_id, (_, owner, expires) in rows.items():
            groups.setdefault((owner, expires), []).append(operation_id)
        for (owner, expires), ids in groups.items():
            tx.execute(
                "UPDATE operations SET lease_owner = ?, lease_token = lease_token + 1, lease_expires_at = ?,"
                " watcher_since = CASE WHEN watcher = ? THEN watcher_since ELSE ? END, watcher = ?"
                f" WHERE operation_id IN ({marks(len(ids))})",
                (owner, self.dialect.stamp(expires), owner, at, owner, *ids),
            )
        takeovers = [
            (i, stored, owner) for i, (stored, owner, _) in rows.items() if taken_over(stored.lease_owner, owner)
        ]
        self._lock_logs(tx, [operation_id for operation_id, _, _ in takeovers])
        for operation_id, stored, owner in takeovers:
            event = ev.LeaseTakenOver(previous_owner=stored.lease_owner, owner=owner, token=stored.lease_token + 1)
            self._append(tx, operation_id, event, now)
        return [
            Lease(operation_id, owner, stored.lease_token + 1, expires)
            for operation_id, (stored, owner, expires) in rows.items()
        ]


def _due_order(stored: Stored) -> tuple[datetime, str]:
    """The fleet claim's order, `claim_due_query`'s ORDER BY."""
    return stored.record.next_poll_at, stored.record.operation_id
