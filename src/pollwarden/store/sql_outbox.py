"""The outbox's transaction bodies, for SQLite and PostgreSQL (schema 7).

What a commit announces to the world outside is written in that very commit, so a crash never loses it and no
committing thread waits for a receiver: `_queue_webhook` puts a decision request's webhook in the outbox beside
the request (every writer of a decision request goes through `_insert_decision`, so none can forget it), and
`_seal_commit` queues each signed head for the store's witness, one row per witness that a newer head replaces
(the newest is all a witness needs). The delivery loops (`pollwarden.home.outbox`) claim what is due with a lease,
fenced by owner and token like an operation's, and write back what came of each attempt.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..audit import Head
from ..core.escalation import DecisionRequest
from .base import Attempted, DeliveryLease, OutboxCount, OutboxEntry
from .common import HEAD_COLUMNS, OUTBOX_COLUMNS, Tx, chunks, dead_holders, holders_query, marks, outbox_from_row
from .delivery import BELL, WEBHOOK, WITNESS, queued_by, webhook_delivery, witness_delivery
from .trail import AuditTrail

_PENDING = "pending"
_FAILED = "failed"


class Outbox(AuditTrail):
    """Deliveries queued with the commits that announce them, and the delivery loops' claims of them."""

    # -- queued in the writer's transaction ------------------------------------------------------------------

    def _queue_webhook(self, tx: Tx, request: DecisionRequest) -> None:
        """The request's webhook, in the transaction that writes the request; due at once."""
        delivery = webhook_delivery(request.decision_id)
        now = self.dialect.now
        tx.execute(
            "INSERT INTO outbox (delivery_id, kind, subject, operation_id, status, created_at, next_attempt_at,"
            f" queued_by) VALUES (?, ?, ?, ?, ?, {now}, {now}, ?) ON CONFLICT (delivery_id) DO NOTHING",
            (delivery, WEBHOOK, request.decision_id, request.operation_id, _PENDING, queued_by()),
        )
        tx.queued.append(delivery)

    def _seal_commit(self, tx: Tx) -> None:
        """The head, signed as before, and queued for the witness in the same transaction: a newer head replaces
        the one waiting, and one still being tried keeps its schedule (a witness that is down is not asked again
        with every commit)."""
        super()._seal_commit(tx)
        if tx.head is None or self.witness is None or tx.witnessed:
            return
        tx.witnessed = True
        now = self.dialect.now
        tx.execute(
            "INSERT INTO outbox (delivery_id, kind, subject, head, status, created_at, next_attempt_at, queued_by)"
            f" VALUES (?, ?, ?, ?, ?, {now}, {now}, ?) ON CONFLICT (delivery_id) DO UPDATE"
            " SET head = excluded.head, queued_by = excluded.queued_by"
            " WHERE outbox.head IS NULL OR outbox.head < excluded.head",
            (witness_delivery(self.witness.key), WITNESS, self.witness.key, tx.head.counter, _PENDING, queued_by()),
        )

    def _committed(self, tx: Tx) -> None:
        super()._committed(tx)
        if tx.queued:
            BELL.ring()

    # -- the delivery loops' side ----------------------------------------------------------------------------

    def next_delivery(self, witness: str | None) -> datetime | None:
        row = self._row(
            "SELECT MIN(next_attempt_at) FROM outbox WHERE status = ? AND (kind = ? OR subject = ?)",
            (_PENDING, WEBHOOK, witness),
        )
        return None if row is None or row[0] is None else self.dialect.moment(row[0])

    def claim_deliveries(
        self,
        owner: str,
        now: datetime,
        ttl: timedelta,
        limit: int,
        *,
        witness: str | None,
        every: bool = False,
        skip: Sequence[str] = (),
    ) -> list[tuple[DeliveryLease, OutboxEntry]]:
        if limit <= 0:
            return []
        at = self.dialect.stamp(now)
        due = "" if every else " AND next_attempt_at <= ?"
        skipped = f" AND delivery_id NOT IN ({marks(len(skip))})" if skip else ""
        select = (
            f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE status = ?{due}{skipped} AND (kind = ? OR subject = ?)"
            f" AND {{lease}} ORDER BY next_attempt_at, delivery_id LIMIT ?{self.dialect.lock_due}"
        )
        params: list[Any] = [_PENDING, *([] if every else [at]), *skip, WEBHOOK, witness]
        with self._tx() as tx:
            free = "(lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= ?)"
            rows = list(tx.execute(select.format(lease=free), [*params, at, limit]).fetchall())
            if len(rows) < limit:  # a holder that died on this host cannot be sending: not waited out
                holders = holders_query("outbox", "status = ? AND (kind = ? OR subject = ?)")
                for chunk in chunks(dead_holders(tx, holders, (_PENDING, WEBHOOK, witness), owner, now)):
                    # Unexpired only: a dead holder's expired rows are free ones, read above.
                    held = f"lease_owner IN ({marks(len(chunk))}) AND lease_expires_at > ?"
                    more = [*params, *chunk, at, limit - len(rows)]
                    rows += tx.execute(select.format(lease=held), more).fetchall()
                    if len(rows) >= limit:
                        break
            if not rows:
                return []
            ids = [str(row[0]) for row in rows]
            expires = now + ttl
            tx.execute(
                "UPDATE outbox SET lease_owner = ?, lease_token = lease_token + 1, lease_expires_at = ?"
                f" WHERE delivery_id IN ({marks(len(ids))})",
                (owner, self.dialect.stamp(expires), *ids),
            )
        claimed = []
        for row in rows:
            entry = outbox_from_row(row, self.dialect.moment)
            lease = DeliveryLease(entry.delivery_id, owner, int(row[14]) + 1, expires, entry.operation_id)
            claimed.append((lease, entry))
        return claimed

    def finish_delivery(self, lease: DeliveryLease, attempted: Attempted, now: datetime) -> bool:
        stamp = self.dialect.stamp
        fence = " WHERE delivery_id = ? AND lease_token = ? AND lease_owner = ?"
        held = (lease.delivery_id, lease.token, lease.owner)
        release = "lease_owner = NULL, lease_expires_at = NULL"
        with self._tx() as tx:
            if attempted.delivered:
                # A witness took its head: done, unless a newer head was queued meanwhile (then it goes next).
                gone = tx.execute("DELETE FROM outbox" + fence + " AND (head IS NULL OR head <= ?)",
                                  (*held, attempted.head or 0)).rowcount  # fmt: skip
                changed = gone == 1 or (
                    tx.execute(
                        f"UPDATE outbox SET {release}, attempts = 0, last_status = NULL, last_error = NULL,"
                        " next_attempt_at = ?" + fence,
                        (stamp(attempted.retry_at or now), *held),
                    ).rowcount
                    == 1
                )
            else:
                status = _PENDING if attempted.retry_at is not None else _FAILED
                changed = (
                    tx.execute(
                        f"UPDATE outbox SET {release}, status = ?, attempts = ?, last_status = ?, last_error = ?,"
                        " next_attempt_at = ?" + fence,
                        (status, attempted.attempts, attempted.status, attempted.error,
                         stamp(attempted.retry_at or now), *held),
                    ).rowcount
                    == 1
                )  # fmt: skip
            if changed and attempted.event is not None and lease.operation_id is not None:
                self._append(tx, lease.operation_id, attempted.event, now)
        return changed

    def outbox(self, *, queued_by: str | None = None) -> list[OutboxEntry]:
        where, params = ("", ()) if queued_by is None else (" WHERE queued_by = ?", (queued_by,))
        rows = self._rows(f"SELECT {OUTBOX_COLUMNS} FROM outbox{where} ORDER BY created_at, delivery_id", params)
        return [outbox_from_row(row, self.dialect.moment) for row in rows]

    def outbox_counts(self) -> list[OutboxCount]:
        rows = self._rows(
            "SELECT kind, CASE WHEN status = ? THEN status WHEN attempts > 0 THEN 'retrying' ELSE status END AS state,"
            " COUNT(*), MIN(created_at) FROM outbox GROUP BY kind, state ORDER BY kind, state",
            (_FAILED,),
        )
        moment = self.dialect.moment
        return [OutboxCount(str(k), str(s), int(n), None if o is None else moment(o)) for k, s, n, o in rows]

    def audit_head(self, counter: int) -> Head | None:
        row = self._row(f"SELECT {HEAD_COLUMNS} FROM audit_heads WHERE counter = ?", (counter,))
        return None if row is None else Head.from_row(tuple(row))
