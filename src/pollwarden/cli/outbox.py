"""`pollwarden outbox [--deliver]`: the deliveries waiting to go out, and sending them now
(`pollwarden.home.outbox`)."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from ..core.durations import format_rfc3339
from ..core.words import plural
from ..home.directory import resolve_home
from ..home.operating import configured_witness
from ..home.outbox import Courier, Delivered
from ..shown import shown
from ..store.base import OutboxEntry
from ..store.delivery import WEBHOOK
from ..store.owner import parse_owner, process_owner
from .common import EXIT_OK, _open_store


def cmd_outbox(args: argparse.Namespace) -> int:
    # Listing needs no key; delivering does: a webhook's outcome is sealed into its operation's log.
    store = _open_store(args.home, keys="write" if args.deliver else "none")
    try:
        configured = store.witness or configured_witness(resolve_home(args.home))  # a lister's store holds none
        witness = None if configured is None else configured.key
        done = Courier(store, owner=process_owner("outbox")).deliver_due(every=True) if args.deliver else []
        left = store.outbox()
        now = store.db_now()
    finally:
        store.close()
    if args.json:
        waiting = [entry.to_json() for entry in left]
        attempted = [_result_json(d) for d in done]
        print(json.dumps({"attempted": attempted, "outbox": waiting} if args.deliver else waiting))
        return EXIT_OK
    for one in done:
        print(_result_line(one, witness))
    if not left:
        print("the outbox is empty: nothing waits to be delivered")
    for entry in left:
        print(_entry_line(entry, witness, now))
    return EXIT_OK


def _what(entry: OutboxEntry, witness: str | None) -> str:
    if entry.kind == WEBHOOK:
        return f"webhook for decision {shown(entry.subject)} (operation {shown(entry.operation_id)})"
    whose = "this home's witness" if entry.subject == witness else f"witness {shown(entry.subject[:12])}"
    return f"head #{entry.head} for {whose}"


def _entry_line(entry: OutboxEntry, witness: str | None, now: datetime) -> str:
    what = _what(entry, witness)
    last = f" (last: {shown(entry.last_error)})" if entry.last_error else ""
    if entry.status == "failed":
        return f"{what}: given up after {plural(entry.attempts, 'attempt')}{last}; its story says so"
    if entry.lease_owner is not None and entry.lease_expires_at is not None and entry.lease_expires_at > now:
        return f"{what}: being delivered by {parse_owner(entry.lease_owner).describe()}"
    tried = f"{plural(entry.attempts, 'attempt')} failed{last}" if entry.attempts else "not tried yet"
    when = "now" if entry.next_attempt_at <= now else f"at {format_rfc3339(entry.next_attempt_at)}"
    return f"{what}: pending since {format_rfc3339(entry.created_at)}, {tried}; next attempt {when}"


def _result_line(done: Delivered, witness: str | None) -> str:
    what = _what(done.entry, witness)
    made = done.attempted
    if made is None:
        return f"not attempted: {what}: the store failed ({shown(done.problem)}); it stays in the outbox"
    if made.delivered:
        return f"delivered: {what}"
    if made.retry_at is None:
        return f"given up: {what}: {shown(made.error)}; recorded in the operation's story"
    return f"not delivered: {what}: {shown(made.error)}; next attempt at {format_rfc3339(made.retry_at)}"


def _result_json(done: Delivered) -> dict[str, Any]:
    made = done.attempted
    outcome = "failed" if made is None else "delivered" if made.delivered else "retry" if made.retry_at else "given_up"
    return {
        "delivery_id": done.entry.delivery_id,
        "kind": done.entry.kind,
        "outcome": outcome,
        "attempts": None if made is None else made.attempts,
        "status": None if made is None else made.status,
        "error": done.problem if made is None else made.error,
        "retry_at": None if made is None or made.retry_at is None else made.retry_at.isoformat(),
    }
