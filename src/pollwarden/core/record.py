"""The operation record: every fact that affects authority and budgets, in one immutable value (R15).

The core returns a new record for every event; the store persists it. Lease fields are the store's
business and are deliberately not here: the core decides what to do, not who may do it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from .contract import Contract, Schedule
from .durations import format_rfc3339
from .reasons import DelaySource, Phase, StopReason

OPERATION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


@dataclass(frozen=True)
class Plan:
    """What was authorised when the operation was created; only an audited approval may widen it."""

    deadline_at: datetime
    max_status_requests: int
    max_transport_failures: int
    max_rate_limited: int
    schedule: Schedule
    not_found_grace: timedelta | None
    useful_until: datetime | None = None
    """The business deadline (R12, R33): after it the result is not worth waiting for, whatever the provider says."""


@dataclass(frozen=True)
class OperationRecord:
    operation_id: str
    job_id: str
    contract_name: str
    contract_fingerprint: str
    account: str
    request_fingerprint: str | None
    expected_terminal: tuple[str, ...]
    created_at: datetime
    plan: Plan
    next_poll_at: datetime
    delay_source: DelaySource = DelaySource.LOCAL_BACKOFF
    phase: Phase = Phase.ACTIVE
    reason: StopReason | None = None
    detail: str | None = None
    status_requests_used: int = 0
    transport_failures_used: int = 0
    rate_limited_consecutive: int = 0
    polls_completed: int = 0
    last_state: str | None = None
    last_http_status: int | None = None
    last_observed_at: datetime | None = None
    last_request_id: str | None = None
    provider_error: str | None = None
    result: str | None = None
    finished_at: datetime | None = None
    status_location: str | None = None
    """A status URL the provider returned on submission (R25); None means the contract's template."""

    @property
    def deadline_at(self) -> datetime:
        return self.plan.deadline_at

    @property
    def is_final(self) -> bool:
        return self.phase is not Phase.ACTIVE

    def evolve(self, **changes: Any) -> OperationRecord:
        return replace(self, **changes)

    def summary(self) -> dict[str, Any]:
        """The machine view shared by `status --json`, `watch --json` and the audit trail."""
        return {
            "operation": self.operation_id,
            "job": self.job_id,
            "contract": self.contract_name,
            "account": self.account,
            "phase": self.phase.value,
            "outcome": None if self.phase is Phase.ACTIVE else self.phase.value,
            "reason": self.reason.value if self.reason else None,
            "detail": self.detail,
            "last_state": self.last_state,
            "http_status": self.last_http_status,
            "last_observed_at": _t(self.last_observed_at),
            "provider_request_id": self.last_request_id,
            "status_requests_used": self.status_requests_used,
            "max_status_requests": self.plan.max_status_requests,
            "transport_failures_used": self.transport_failures_used,
            "max_transport_failures": self.plan.max_transport_failures,
            "rate_limited_consecutive": self.rate_limited_consecutive,
            "max_rate_limited": self.plan.max_rate_limited,
            "created_at": _t(self.created_at),
            "deadline_at": _t(self.plan.deadline_at),
            "useful_until": _t(self.plan.useful_until),
            "next_poll_at": None if self.is_final else _t(self.next_poll_at),
            "delay_source": self.delay_source.value,
            "result": self.result,
            "provider_error": self.provider_error,
            "finished_at": _t(self.finished_at),
        }


def _t(moment: datetime | None) -> str | None:
    return None if moment is None else format_rfc3339(moment)


def new_record(
    contract: Contract,
    *,
    operation_id: str,
    job_id: str,
    now: datetime,
    deadline: timedelta | None = None,
    max_requests: int | None = None,
    max_transport_failures: int | None = None,
    base_delay: timedelta | None = None,
    max_delay: timedelta | None = None,
    request_fingerprint: str | None = None,
    useful_for: timedelta | None = None,
    status_location: str | None = None,
) -> OperationRecord:
    """The record as it is persisted before the first poll (R15); overrides may only come from the caller."""
    if not job_id.strip():
        raise ValueError("a job id is required: an empty one would poll the collection, not a job")
    limits = contract.limits
    schedule = contract.schedule
    if base_delay is not None or max_delay is not None:
        schedule = replace(
            schedule,
            base_delay=base_delay if base_delay is not None else schedule.base_delay,
            max_delay=max_delay if max_delay is not None else schedule.max_delay,
        )
    plan = Plan(
        deadline_at=now + (deadline if deadline is not None else limits.deadline),
        max_status_requests=max_requests if max_requests is not None else limits.max_requests,
        max_transport_failures=(
            max_transport_failures if max_transport_failures is not None else limits.max_transport_failures
        ),
        max_rate_limited=limits.max_rate_limited,
        schedule=schedule,
        not_found_grace=contract.not_found_grace,
        useful_until=None if useful_for is None else now + useful_for,
    )
    return OperationRecord(
        operation_id=operation_id,
        job_id=job_id,
        contract_name=contract.name,
        contract_fingerprint=contract.fingerprint(),
        account=contract.account,
        request_fingerprint=request_fingerprint,
        expected_terminal=contract.states.terminal(),
        created_at=now,
        plan=plan,
        next_poll_at=now + schedule.first_check,
        status_location=status_location,
    )
