"""What a waiter is told after every step: one value, built in one place, for every interface that shows it.

The Python API's `on_progress`, the MCP server's `notifications/progress` and task status, and the terminal's
live line all describe the same thing (the job's last state, the checks used of those allowed, when the next
check is due and why, the deadline), so they read it from `Progress` instead of each picking fields off a
record. It holds no provider data beyond the state name the contract already lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ..core.durations import format_duration, format_rfc3339
from ..core.reasons import DelaySource, Phase, StopReason
from ..core.words import checks_used, delay_words

if TYPE_CHECKING:
    from ..core.record import OperationRecord
    from ..engine import StepResult

__all__ = ["Progress", "progress_of", "progress_of_record"]


@dataclass(frozen=True)
class Progress:
    """One operation after one step. `polled` says whether this step sent a status request."""

    operation_id: str
    job_id: str
    phase: Phase
    state: str | None
    """The job's last state as the contract names it (None until the first answer)."""
    checks_used: int
    checks_allowed: int
    next_check_at: datetime | None
    """None once the operation is final (succeeded or stopped): there is nothing left to wait for."""
    delay_source: DelaySource | None
    deadline_at: datetime
    created_at: datetime
    reason: StopReason | None
    polled: bool
    busy: bool = False
    """Another owner holds the lease (a worker, another watch): it is polling, this waiter is not."""

    @property
    def final(self) -> bool:
        return self.phase is not Phase.ACTIVE

    def seconds_to_next_check(self, now: datetime) -> float | None:
        return None if self.next_check_at is None else _seconds(self.next_check_at - now)

    def seconds_to_deadline(self, now: datetime) -> float:
        return _seconds(self.deadline_at - now)

    def elapsed(self, now: datetime) -> float:
        """Seconds since the operation was created: grows with every step and every heartbeat."""
        return _seconds(now - self.created_at)

    def total(self) -> float:
        """Seconds from creation to the deadline: the most `elapsed` can reach before the watch stops."""
        return _seconds(self.deadline_at - self.created_at)

    def message(self, now: datetime) -> str:
        """One line a person or an agent can read: `running · checks 3/20 · next check in 12s (provider's
        Retry-After) · deadline in 9m30s`."""
        state = self.state or "not yet seen"
        checks = checks_used(self.checks_used, self.checks_allowed)
        if self.final:
            ended = self.phase.value if self.reason is None else f"{self.phase.value} ({self.reason.value})"
            return f"{state} · {checks} · {ended}"
        parts = [state, checks]
        if self.busy:
            parts.append("another owner is polling")
        elif self.next_check_at is not None:
            why = f" ({delay_words(self.delay_source)})" if self.delay_source else ""
            parts.append(f"next check in {_left(self.next_check_at, now)}{why}")
        parts.append(f"deadline in {_left(self.deadline_at, now)}")
        return " · ".join(parts)

    def to_json(self, now: datetime) -> dict[str, object]:
        return {
            "operation_id": self.operation_id,
            "phase": self.phase.value,
            "state": self.state,
            "checks_used": self.checks_used,
            "checks_allowed": self.checks_allowed,
            "next_check_at": None if self.next_check_at is None else format_rfc3339(self.next_check_at),
            "seconds_to_next_check": self.seconds_to_next_check(now),
            "delay_source": None if self.delay_source is None else self.delay_source.value,
            "deadline_at": format_rfc3339(self.deadline_at),
            "seconds_to_deadline": self.seconds_to_deadline(now),
            "reason": None if self.reason is None else self.reason.value,
            "polled": self.polled,
            "message": self.message(now),
        }


def progress_of(result: StepResult) -> Progress:
    """The progress a step's result shows; the one place a StepResult is read for a waiter."""
    from ..engine import Busy, NotYet, Polled

    if isinstance(result, Polled):
        record = result.decision.record
        return _of(record, record.due_at, polled=True)
    if isinstance(result, NotYet):
        return _of(result.record, result.until, polled=False)
    if isinstance(result, Busy):
        return _of(result.record, result.retry_at, polled=False, busy=True)
    return _of(result.record, result.record.due_at, polled=False)


def progress_of_record(record: OperationRecord, *, polled: bool = False) -> Progress:
    """The progress a stored record shows, for a waiter that did not step it (a task's status, a heartbeat)."""
    return _of(record, record.due_at, polled=polled)


def _of(record: OperationRecord, next_check: datetime, *, polled: bool, busy: bool = False) -> Progress:
    final = record.is_final
    return Progress(
        operation_id=record.operation_id,
        job_id=record.job_id,
        phase=record.phase,
        state=record.last_state,
        checks_used=record.status_requests_used,
        checks_allowed=record.plan.max_status_requests,
        next_check_at=None if final else next_check,
        delay_source=None if final else record.delay_source,
        deadline_at=record.deadline_at,
        created_at=record.created_at,
        reason=record.reason,
        polled=polled,
        busy=busy and not final,
    )


def _seconds(delta: timedelta) -> float:
    return round(max(0.0, delta.total_seconds()), 3)


def _left(moment: datetime, now: datetime) -> str:
    seconds = (moment - now).total_seconds()
    if 0 < seconds < 1:  # whole seconds read "0ms" for a sub-second wait
        return "under 1s"
    return format_duration(timedelta(seconds=max(0, round(seconds))))
