"""What a verified push means, decided without I/O: which job it names, whether its event type wakes, and what
it does to one operation's record (issue 27).

A push never decides an outcome: it can only move an active operation's next check earlier, to now, and no
earlier than `[push] min_interval` after the last check a push woke (`OperationRecord.woken_at`: one woken
check per operation per interval, so a storm of pushes costs a few requests; a push just after a scheduled
check still wakes at once). It never wakes an operation the provider told to wait (Retry-After,
a rate limit), nor one with no request left, and the deadline and usefulness window bound it as they bound
every wait (`OperationRecord.deferred`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from . import expr
from .contract.push import Push
from .durations import format_rfc3339
from .reasons import DelaySource
from .record import OperationRecord


@dataclass(frozen=True)
class Wake:
    job_id: str
    event_type: str | None


@dataclass(frozen=True)
class Ignore:
    why: str
    """For the receiver's log and metrics: answered 2xx, nothing changed."""


def read_event(push: Push, headers: Mapping[str, str], body: bytes) -> Wake | Ignore:
    """The job a verified event names, if its type wakes; `headers` keyed by lower-case name."""
    try:
        event = json.loads(body)
    except (ValueError, RecursionError):
        return Ignore("body is not JSON")
    event_type = _event_type(push, headers, event)
    if push.events is not None and event_type not in push.events:
        return Ignore("event type not listed in [push].events")
    found = expr.lookup(push.job_id, event)
    value = found.value if found.present else None
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        return Ignore("the event names no job at [push].job_id")
    job_id = str(value)
    if len(job_id) > 1024:
        return Ignore("the job id at [push].job_id is too long")
    return Wake(job_id, event_type)


def _event_type(push: Push, headers: Mapping[str, str], event: object) -> str | None:
    where = push.event_type
    if where is None:
        return None
    if where.startswith("header:"):
        value: object = headers.get(where.removeprefix("header:").lower())
    else:
        found = expr.lookup(where, event)
        value = found.value if found.present else None
    return value[:200] if isinstance(value, str) else None


@dataclass(frozen=True)
class Woken:
    record: OperationRecord
    """The record with its next check moved to `due_at`."""

    @property
    def due_at(self) -> datetime:
        return self.record.next_poll_at


def woken(push: Push, record: OperationRecord, now: datetime) -> Woken | None:
    """The record a push leaves, or None when it changes nothing (final, told to wait, due already, no budget)."""
    if record.is_final or record.status_requests_used >= record.plan.max_status_requests:
        return None
    if record.delay_source is DelaySource.PROVIDER_RETRY_AFTER or record.rate_limited_consecutive:
        return None  # the provider asked for this wait: a push does not override it
    due = now
    if record.woken_at is not None:
        # Counted from the last woken check, not the last answer: a push just after a scheduled check wakes at
        # once ("within 1 s of the push"), and a storm still costs one request per min_interval.
        due = max(due, record.woken_at + push.min_interval)
    if due >= record.due_at:
        return None
    return Woken(record.woken_by_push(due))


def woken_payload(delivery_id: str, event_type: str | None, due_at: datetime) -> dict[str, str | None]:
    return {"delivery": delivery_id, "event_type": event_type, "due_at": format_rfc3339(due_at)}
