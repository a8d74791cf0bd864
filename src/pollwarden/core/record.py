"""The operation record: every fact that affects authority and budgets, in one immutable value (R15).

The core returns a new record for every event; the store persists it. Lease fields are the store's
business and are deliberately not here: the core decides what to do, not who may do it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Any, TypedDict, Unpack

from .contract.parse import Contract, Schedule
from .contract.result import Counts, JSONValue
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

    @property
    def latest_poll(self) -> datetime:
        """The last moment a poll may be due: the deadline, or the end of the usefulness window if that comes first.
        No wait outlasts it; a poll due then is not sent, the operation stops there (`next_step`)."""
        return self.deadline_at if self.useful_until is None else min(self.deadline_at, self.useful_until)


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
    token_refused_consecutive: int = 0
    """401s in a row to a token that can be fetched again: the first is retried at once, the second stops."""
    polls_completed: int = 0
    last_state: str | None = None
    last_http_status: int | None = None
    last_observed_at: datetime | None = None
    last_request_id: str | None = None
    provider_error: str | None = None
    result: JSONValue = None
    """The validated result: any JSON value the contract's `[result]` allows (a string for older contracts). A
    stopped record may carry one too: the finished part of a job the provider ended (`[result].partial`)."""
    counts: Counts | None = None
    """The provider's tallies when the job ended (`[fields].counts`): what part of it the result covers."""
    finished_at: datetime | None = None
    status_location: str | None = None
    """A status URL the provider returned on submission (R25); None means the contract's template."""
    pending_seen_at: datetime | None = None
    """When a check last found the job pending: with `finished_at`, the interval its duration lies in, which the
    contract's learnt schedule is estimated from (`core.learnt`)."""
    sample_key: str | None = None
    """The value `[schedule] learn_key` named for this job (the submitted body's, else the first answer's that had
    one): its sample is kept under it, and its checks are placed by that key's history (`core.learnt_inputs`)."""
    woken_at: datetime | None = None
    """When the last check a provider's push woke was due (`core.push.woken`): the next woken check comes no
    earlier than `[push] min_interval` after it, so a storm of pushes costs one request per interval."""

    @property
    def deadline_at(self) -> datetime:
        return self.plan.deadline_at

    @property
    def due_at(self) -> datetime:
        """When the next poll is due, never after the plan's last moment (`Plan.latest_poll`): every wait a driver
        or an agent is told is this. The transitions keep `next_poll_at` within it; a record stored before they
        did may not be, and is read through here."""
        return min(self.next_poll_at, self.plan.latest_poll)

    @property
    def is_final(self) -> bool:
        return self.phase is not Phase.ACTIVE

    def _with(self, **changes: Any) -> OperationRecord:
        """`dataclasses.replace` for the transitions below, about six times faster (it runs several times a
        poll): the record has no `__post_init__` and caches nothing in its `__dict__`, so the fields are copied
        and the changes set, each change still checked to name a field."""
        if not changes.keys() <= _RECORD_FIELDS:
            raise TypeError(f"not fields of OperationRecord: {sorted(changes.keys() - _RECORD_FIELDS)}")
        new = object.__new__(OperationRecord)
        values = new.__dict__
        values.update(self.__dict__)
        values.update(changes)
        return new

    # The transitions: one per thing that happens to an operation, each naming what it changes and keeping
    # every other field, so a rule cannot rebuild a record and drop or widen a limit on the way (R15, R20).

    def reserved(self) -> OperationRecord:
        """One more status request is spent; persisted before it is sent (R16)."""
        return self._with(status_requests_used=self.status_requests_used + 1)

    def observed(
        self,
        *,
        at: datetime,
        http_status: int | None,
        request_id: str | None,
        state: str | None,
        rate_limited: bool,
        token_refused: bool = False,
    ) -> OperationRecord:
        """One exchange was seen; an answer without a state keeps the last state seen, not forgets it."""
        return self._with(
            polls_completed=self.polls_completed + 1,
            last_http_status=http_status,
            last_observed_at=at,
            last_request_id=request_id,
            last_state=state if state is not None else self.last_state,
            rate_limited_consecutive=self.rate_limited_consecutive + 1 if rate_limited else 0,
            token_refused_consecutive=self.token_refused_consecutive + 1 if token_refused else 0,
        )

    def keyed(self, key: str | None) -> OperationRecord:
        """The job's kind, once known: the first key seen stays (a later answer cannot move the job to another)."""
        return self if key is None or self.sample_key is not None else self._with(sample_key=key)

    def seen_pending(self, at: datetime) -> OperationRecord:
        """A check found the job still running at `at`: its duration is longer than that."""
        return self._with(pending_seen_at=at)

    def transport_failed(self) -> OperationRecord:
        """The job state could not be learned: one more transport failure is spent (R14)."""
        return self._with(transport_failures_used=self.transport_failures_used + 1)

    def waiting(self, next_poll_at: datetime, delay_source: DelaySource) -> OperationRecord:
        """The next poll, never later than the plan's last moment (`Plan.latest_poll`): no wait outlasts a limit."""
        return self._with(next_poll_at=min(next_poll_at, self.plan.latest_poll), delay_source=delay_source)

    def woken_by_push(self, due: datetime) -> OperationRecord:
        """A provider's push made the next check due at `due` (`core.push.woken` decides when)."""
        moved = self.waiting(due, DelaySource.PROVIDER_PUSH)
        return moved._with(woken_at=moved.next_poll_at)

    def deferred(self, next_poll_at: datetime) -> OperationRecord:
        """Fleet pacing moved the poll; why it was due then (backoff, hint, Retry-After) still stands."""
        return self._with(next_poll_at=min(next_poll_at, self.plan.latest_poll))

    def succeeded(self, result: JSONValue, detail: str, at: datetime, counts: Counts | None = None) -> OperationRecord:
        return self._with(phase=Phase.SUCCEEDED, result=result, detail=detail, finished_at=at, counts=counts)

    def stopped(self, reason: StopReason, detail: str, at: datetime) -> OperationRecord:
        return self._with(phase=Phase.STOPPED, reason=reason, detail=detail, finished_at=at)

    def ended(
        self,
        reason: StopReason,
        detail: str,
        at: datetime,
        provider_error: str | None,
        *,
        result: JSONValue = None,
        counts: Counts | None = None,
    ) -> OperationRecord:
        """The provider ended the job (failed, cancelled, expired): stopped, with the provider's own error, and
        the finished part of the job and its counts when the answer carried them (a partial result)."""
        return self._with(
            phase=Phase.STOPPED,
            reason=reason,
            detail=detail,
            finished_at=at,
            provider_error=provider_error,
            result=result,
            counts=counts,
        )

    @property
    def partial(self) -> bool:
        """A stop that keeps a result: what the provider finished before it ended the job (`fetch-result` gets it)."""
        return self.phase is Phase.STOPPED and self.result is not None

    def extended(self, plan: Plan, next_poll_at: datetime) -> OperationRecord:
        """A person's approval: active again under a new plan; the budgets already spent stay spent (R41)."""
        return self._with(
            plan=plan,
            phase=Phase.ACTIVE,
            reason=None,
            detail=None,
            finished_at=None,
            next_poll_at=min(next_poll_at, plan.latest_poll),
            delay_source=DelaySource.MANUAL_EXTENSION,
            rate_limited_consecutive=0,
            token_refused_consecutive=0,
        )

    def rechecking(self, plan: Plan, at: datetime) -> OperationRecord:
        """A person's one check with the credential configured now, after a refusal: active again under `plan`,
        due at once. Its sender reads the credential again for it (`delay_source`), so a 401 to it is a refusal of
        that fresh credential: counted as the second in a row, it stops at once (one check, never two)."""
        return self.extended(plan, at)._with(delay_source=DelaySource.CREDENTIAL_RECHECK, token_refused_consecutive=1)

    def with_plan(self, plan: Plan) -> OperationRecord:
        """Only the limits change (a resume that narrows them); nothing about the polling so far, except a poll due
        after the new limits' last moment, which is then due at that moment (where `next_step` stops it)."""
        return self._with(plan=plan, next_poll_at=min(self.next_poll_at, plan.latest_poll))

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
            "provider_error": provider_error_value(self.provider_error),
            "finished_at": _t(self.finished_at),
            **({"counts": dict(self.counts)} if self.counts is not None else {}),
        }


_RECORD_FIELDS = frozenset(f.name for f in fields(OperationRecord))


def provider_error_value(text: str | None) -> JSONValue | None:
    """The provider's error as JSON output carries it: the object or list it was (`observe` keeps one as compact
    JSON text, so a person reads it in a line), else its text. An agent reading `--json` gets a value, not a
    string of escaped JSON to parse again."""
    if text is None or not text.startswith(("{", "[")):
        return text
    try:
        value = json.loads(text)
    except ValueError:  # cut at its 2,000 characters, or a message that merely starts with a bracket
        return text
    return value if isinstance(value, (dict, list)) else text


def provider_error_text(value: object) -> str | None:
    """`provider_error_value` back to the text a record keeps."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _t(moment: datetime | None) -> str | None:
    return None if moment is None else format_rfc3339(moment)


class Overrides(TypedDict, total=False):
    """What a new record may take from its caller instead of its contract (None: the contract's), and what only
    the caller knows (the request's fingerprint, a status URL the provider returned)."""

    deadline: timedelta | None
    max_requests: int | None
    max_transport_failures: int | None
    base_delay: timedelta | None
    max_delay: timedelta | None
    lag_target: timedelta | None
    request_fingerprint: str | None
    useful_for: timedelta | None
    status_location: str | None


def new_record(
    contract: Contract, *, operation_id: str, job_id: str, now: datetime, **overrides: Unpack[Overrides]
) -> OperationRecord:
    """The record as it is persisted before the first poll (R15); overrides may only come from the caller."""
    deadline, max_requests = overrides.get("deadline"), overrides.get("max_requests")
    max_transport_failures = overrides.get("max_transport_failures")
    base_delay, max_delay = overrides.get("base_delay"), overrides.get("max_delay")
    useful_for, lag_target = overrides.get("useful_for"), overrides.get("lag_target")
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
    if lag_target is not None:
        schedule = replace(schedule, lag_target=lag_target)
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
        request_fingerprint=overrides.get("request_fingerprint"),
        expected_terminal=contract.states.terminal(),
        created_at=now,
        plan=plan,
        next_poll_at=min(now + schedule.first_check, plan.latest_poll),  # admission refuses a later first check
        status_location=overrides.get("status_location"),
    )
