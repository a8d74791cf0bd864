"""A provider's push, received: verified, remembered, and the matching operations made due now (issue 27).

Every receiver (`pollwarden hooks`, the worker's `--hooks-port`, the broker's) calls `receive`; it sends
nothing to the provider. What it may change is one thing: an active operation's next check, moved to now
(`core.push.woken`: no earlier than `[push] min_interval` after the last woken check), under a short lease, with
a `woken_by_push` event naming the delivery and the event type, never the body. Then the store's bell rings,
so the waiter of that operation, in whatever process, starts the check at once. The check is an ordinary
one: reserved in the budget, bounded by the deadline, and its answer decides.

A refused delivery (bad signature, stale, too large, malformed) changes nothing and leaves no trace in any
operation's story: the receiver counts and logs it. A replay (a delivery id seen before) is answered like
the first and changes nothing. A push naming no operation is answered exactly as one that woke one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from ..core.contract.parse import Contract
from ..core.identity import NotOneJob, canonical_job_id
from ..core.push import Ignore, Wake, read_event, woken, woken_payload
from ..core.push_signature import Refused, verify
from ..events import WokenByPush
from ..store.base import Store

PUSH_LEASE = timedelta(seconds=10)
"""The lease a wake holds: one read and one write, no request."""

ACCEPTED = 202
"""What every verified delivery is answered, woken, replayed, ignored or naming no job: no oracle."""


@dataclass(frozen=True)
class Received:
    status: int
    outcome: str
    """For the receiver's metrics and log: woken, accepted (verified, nothing to wake), replayed, ignored, or
    the refusal (bad_signature, stale, too_large, malformed, no_secret)."""
    detail: str = ""
    woken: tuple[str, ...] = ()
    """The operations made due now."""
    busy: tuple[str, ...] = ()
    """The operations whose lease was held: for `wake_one` again once their check is recorded."""
    wake: Wake | None = None
    delivery_id: str = ""


def receive(
    store: Store, contract: Contract, headers: Mapping[str, str], body: bytes, *, secret: str | None, owner: str
) -> Received:
    """One delivery for `contract` (which has a `[push]` table); `headers` keyed by lower-case name."""
    push = contract.push
    if push is None:
        raise ValueError(f"contract {contract.name} has no [push] table")
    now = store.db_now()
    verdict = verify(push, secret, headers, body, now)
    if isinstance(verdict, Refused):
        return Received(verdict.status, verdict.why.value, verdict.detail)
    event = read_event(push, headers, body)
    if isinstance(event, Ignore):
        return Received(ACCEPTED, "ignored", event.why)
    if not store.remember_push(contract.name, verdict.delivery_id, now):
        return Received(ACCEPTED, "replayed", f"delivery {verdict.delivery_id} was seen before")
    try:
        job_id = canonical_job_id(contract, event.job_id)
    except NotOneJob:
        return Received(ACCEPTED, "ignored", "the event's job id is not one of this contract's")
    wanted = Wake(job_id, event.event_type)
    done, busy = wake(store, contract, wanted, verdict.delivery_id, owner=owner)
    if done:
        store.bell().ring()
    return Received(
        ACCEPTED, "woken" if done else "accepted", "", tuple(done), tuple(busy), wanted, verdict.delivery_id
    )


def wake(store: Store, contract: Contract, event: Wake, delivery_id: str, *, owner: str) -> tuple[list[str], list[str]]:
    """Make each active operation of the job due now, as `core.push.woken` allows: the ids of those moved, and
    of those whose lease another holder had (a check in flight: its answer may predate the job's end, so the
    caller tries `wake_one` again once that holder is done)."""
    moved: list[str] = []
    busy: list[str] = []
    for stored in store.find_job(contract.name, event.job_id):
        outcome = wake_one(store, contract, stored.record.operation_id, event, delivery_id, owner=owner)
        if outcome == "moved":
            moved.append(stored.record.operation_id)
        elif outcome == "busy":
            busy.append(stored.record.operation_id)
    return moved, busy


def wake_one(store: Store, contract: Contract, operation_id: str, event: Wake, delivery_id: str, *, owner: str) -> str:
    """ "moved", "unchanged" (nothing for a push to do, or the operation is gone) or "busy" (its lease is held)."""
    push = contract.push
    assert push is not None
    stored = store.get(operation_id)
    now = store.db_now()
    if stored is None or stored.record.is_final:
        return "unchanged"
    if woken(push, stored.record, now) is None:  # a read spares a storm's later pushes a write
        # Due already, but a check in flight holds it: its answer may predate the job's end, so the push must
        # wake the operation again once that answer is recorded (the record says nothing of it until then).
        held = stored.lease_owner is not None and stored.lease_expires_at is not None and stored.lease_expires_at > now
        return "busy" if held and stored.record.due_at <= now else "unchanged"
    claimed = store.claim(operation_id, owner, now, PUSH_LEASE)
    if claimed is None:
        return "busy"
    lease, current = claimed
    change = woken(push, current, now)
    if change is None:
        store.release(lease)
        return "unchanged"
    payload = woken_payload(delivery_id, event.event_type, change.due_at)
    written = store.write(lease, change.record, [WokenByPush.from_json(payload)], now, release=True)
    return "moved" if written else "busy"
