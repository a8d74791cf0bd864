"""Escalation as a decision request: bounded, priced options per stop reason, applied purely (R29–R34, R41–R43).

A stop is handed to a person with the context of R31 and a short menu that never says "continue?". Each
option states what it costs (more time, more requests) and what it makes possible; applying one returns a
new record, and only a person's approval reaches this code. Options expire when the operation moves on:
a request is tied to the stop it describes by `stop_marker`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from ..errors import PollwardenError
from .contract.parse import Contract
from .durations import format_duration, format_moment, format_rfc3339
from .reasons import Phase, StopReason
from .record import OperationRecord, provider_error_text, provider_error_value
from .words import checks_of, plural, span_words, stop_title


class OptionKind(StrEnum):
    EXTEND = "extend"
    PAUSE = "pause"
    CANCEL = "cancel"
    INSPECT = "inspect"
    CLOSE = "close"
    RESUBMIT = "resubmit"
    KEEP = "keep"
    """Keep watching an active operation within its limits: the answer "no" to an agent's cancel request."""
    RECHECK = "recheck"
    """One status request with the credential configured now, after a refusal: a changed credential, never the
    same request approved again blindly (R27, R30). Chosen again after each refusal, never a loop."""


RECHECK_LABEL = "check once with the credential configured now"


class Topic(StrEnum):
    """What a decision request asks: what to do after a stop, or whether to cancel a job an agent wants cancelled."""

    STOP = "stop"
    CANCEL = "cancel_request"


_RETRYABLE = (OptionKind.EXTEND, OptionKind.CANCEL, OptionKind.INSPECT, OptionKind.CLOSE)
_LOOK_ONLY = (OptionKind.INSPECT, OptionKind.CLOSE)

ALLOWED: dict[StopReason, tuple[OptionKind, ...]] = {
    StopReason.DEADLINE_EXCEEDED: _RETRYABLE,
    StopReason.REQUEST_BUDGET_EXHAUSTED: _RETRYABLE,
    StopReason.RATE_LIMITED: (OptionKind.EXTEND, OptionKind.INSPECT, OptionKind.CLOSE),
    StopReason.PROVIDER_FAILURE: (OptionKind.EXTEND, OptionKind.INSPECT, OptionKind.CLOSE),
    StopReason.AMBIGUOUS_DELIVERY: (OptionKind.EXTEND, OptionKind.INSPECT, OptionKind.CLOSE),
    # A person may allow one bounded look later while someone checks what changed at the provider.
    StopReason.UNKNOWN_STATE: (OptionKind.PAUSE, OptionKind.CANCEL, OptionKind.INSPECT, OptionKind.CLOSE),
    # The same request with the same credential is never approved again (R27, R30): a person who has changed the
    # credential (or its quota) may have it checked once, read again where it is sent; refused, it stops again.
    StopReason.AUTHORIZATION_DENIED: (OptionKind.RECHECK, OptionKind.INSPECT, OptionKind.CLOSE),
    StopReason.INVALID_RESPONSE: (OptionKind.CANCEL, OptionKind.INSPECT, OptionKind.CLOSE),
    StopReason.RESULT_INVALID: _LOOK_ONLY,
    StopReason.CONTRADICTORY_STATUS: (OptionKind.CANCEL, OptionKind.INSPECT, OptionKind.CLOSE),
    StopReason.INTEGRATION_FAILURE: _LOOK_ONLY,
    # Waiting longer cannot make a result useful again (R33).
    StopReason.USEFULNESS_WINDOW_CLOSED: (OptionKind.CANCEL, OptionKind.CLOSE),
    # Someone approves or acts at the provider; then more waiting can succeed.
    StopReason.JOB_NEEDS_ACTION: _RETRYABLE,
    StopReason.JOB_FAILED: (OptionKind.RESUBMIT, OptionKind.INSPECT, OptionKind.CLOSE),
    StopReason.JOB_CANCELLED: (OptionKind.RESUBMIT, OptionKind.CLOSE),
    StopReason.JOB_EXPIRED: (OptionKind.RESUBMIT, OptionKind.CLOSE),
}

CANCEL_REQUEST: dict[Phase, tuple[OptionKind, ...]] = {
    # The job still runs: a person cancels it (and the watch stops), or the watch goes on within its limits.
    Phase.ACTIVE: (OptionKind.CANCEL, OptionKind.KEEP),
    # Stopped: a person cancels the job at the provider, or leaves the stop as it is.
    Phase.STOPPED: (OptionKind.CANCEL, OptionKind.CLOSE),
}
"""An agent's cancel request (R32): what a person may answer, by the operation's phase. A succeeded operation has
nothing to cancel; a stopped one only where its stop's own options (`ALLOWED`) include a cancel."""

_TRANSPORT_REASONS = frozenset({StopReason.PROVIDER_FAILURE, StopReason.AMBIGUOUS_DELIVERY})


class DecisionError(PollwardenError, ValueError):
    """A decision that cannot be applied; the message says why and what is still possible."""


@dataclass(frozen=True)
class Option:
    number: int
    kind: OptionKind
    label: str
    effect: str
    extra_time: timedelta | None = None
    extra_checks: int | None = None
    extra_transport_failures: int | None = None
    url: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "kind": self.kind.value,
            "label": self.label,
            "effect": self.effect,
            "extra_time": format_duration(self.extra_time) if self.extra_time is not None else None,
            "extra_checks": self.extra_checks,
            "extra_transport_failures": self.extra_transport_failures,
            "url": self.url,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Option:
        from .durations import parse_duration

        return cls(
            number=int(data["number"]),
            kind=OptionKind(data["kind"]),
            label=data["label"],
            effect=data["effect"],
            extra_time=parse_duration(data["extra_time"]) if data.get("extra_time") else None,
            extra_checks=data.get("extra_checks"),
            extra_transport_failures=data.get("extra_transport_failures"),
            url=data.get("url"),
        )


@dataclass(frozen=True)
class DecisionRequest:
    decision_id: str
    operation_id: str
    job_id: str
    reason: StopReason | None
    """Why the operation stopped; None for a question about an active operation (an agent's cancel request)."""
    detail: str
    last_state: str | None
    started_at: datetime
    created_at: datetime
    requests_used: int
    requests_max: int
    transport_used: int
    transport_max: int
    last_http_status: int | None
    last_observed_at: datetime | None
    deadline_at: datetime
    useful_until: datetime | None
    stop_marker: str
    options: tuple[Option, ...] = field(default=())
    requested_by: str | None = None
    request_reason: str | None = None
    topic: Topic = Topic.STOP
    provider_error: str | None = None
    """The provider's own error message when the job ended there ("health check failed: 3/5 pods ..."): what a
    person needs most, on the request itself so every list and card shows it."""
    announce: bool = field(default=False, compare=False)
    """Whether the contract names a webhook to tell of it: the store then queues that delivery in the transaction
    that writes the request (the outbox), whoever wrote it. Set by the builders below from the contract; not part
    of the request's JSON (a request read back is never written again)."""

    @property
    def elapsed(self) -> timedelta:
        return self.created_at - self.started_at

    def option(self, number: int) -> Option:
        for option in self.options:
            if option.number == number:
                return option
        choices = ", ".join(f"{o.number} ({o.kind.value})" for o in self.options)
        raise DecisionError(f"decision {self.decision_id} has no option {number}; choose one of {choices}")

    def to_json(self) -> dict[str, Any]:
        return {
            "decision_id": self.decision_id,
            "operation": self.operation_id,
            "job": self.job_id,
            "reason": self.reason.value if self.reason else None,
            "topic": self.topic.value,
            "detail": self.detail,
            "last_state": self.last_state,
            "started_at": format_rfc3339(self.started_at),
            "created_at": format_rfc3339(self.created_at),
            "elapsed": format_duration(self.elapsed),
            "status_requests_used": self.requests_used,
            "max_status_requests": self.requests_max,
            "transport_failures_used": self.transport_used,
            "max_transport_failures": self.transport_max,
            "last_http_status": self.last_http_status,
            "last_observed_at": format_rfc3339(self.last_observed_at) if self.last_observed_at else None,
            "deadline_at": format_rfc3339(self.deadline_at),
            "useful_until": format_rfc3339(self.useful_until) if self.useful_until else None,
            "stop_marker": self.stop_marker,
            "options": [o.to_json() for o in self.options],
            "requested_by": self.requested_by,
            "request_reason": self.request_reason,
            "provider_error": provider_error_value(self.provider_error),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DecisionRequest:
        def dt(key: str) -> datetime | None:
            value = data.get(key)
            return None if value is None else datetime.fromisoformat(value.replace("Z", "+00:00"))

        def req(key: str) -> datetime:
            value = dt(key)
            assert value is not None, key
            return value

        return cls(
            decision_id=data["decision_id"],
            operation_id=data["operation"],
            job_id=data["job"],
            reason=StopReason(data["reason"]) if data.get("reason") else None,
            detail=data["detail"],
            last_state=data.get("last_state"),
            started_at=req("started_at"),
            created_at=req("created_at"),
            requests_used=int(data["status_requests_used"]),
            requests_max=int(data["max_status_requests"]),
            transport_used=int(data["transport_failures_used"]),
            transport_max=int(data["max_transport_failures"]),
            last_http_status=data.get("last_http_status"),
            last_observed_at=dt("last_observed_at"),
            deadline_at=req("deadline_at"),
            useful_until=dt("useful_until"),
            stop_marker=data["stop_marker"],
            options=tuple(Option.from_json(o) for o in data["options"]),
            requested_by=data.get("requested_by"),
            request_reason=data.get("request_reason"),
            topic=Topic(data.get("topic") or Topic.STOP.value),
            provider_error=provider_error_text(data.get("provider_error")),
        )

    @property
    def why(self) -> str:
        """The one-word cause a list shows: the stop reason, or what an active operation's question is about."""
        return self.reason.value if self.reason else self.topic.value

    def render(self) -> str:
        """The message of R31: everything needed for a decision, no secret, in one look."""
        last_http = "none"
        if self.last_observed_at is not None:
            status = self.last_http_status if self.last_http_status is not None else "no response"
            last_http = f"{status} at {format_moment(self.last_observed_at)}"
        lines = [
            stop_title(self.reason, cancel_request=self.topic is Topic.CANCEL),
            f"Decision: {self.decision_id}",
            f"Operation: {self.operation_id}",
            f"Provider job: {self.job_id}",
            f"Last state: {self.last_state or 'never seen'}",
        ]
        if self.provider_error:
            lines.append(f"Provider error: {self.provider_error}")
        lines += [
            f"Elapsed time: {span_words(self.elapsed)}",
            f"Checks used: {checks_of(self.requests_used, self.requests_max)}",
            f"Last HTTP result: {last_http}",
            f"Stopped because: {self.reason.value}" if self.reason else "Still running: checked within its limits",
        ]
        if self.requested_by:
            lines.append(f"Requested by: {self.requested_by}: {self.request_reason or ''}".rstrip(": "))
        lines.append("Safe options: " + ", ".join(o.label for o in self.options))
        lines.extend(f"  [{o.number}] {o.label}: {o.effect}" for o in self.options)
        return "\n".join(lines)


def stop_marker(record: OperationRecord) -> str:
    """Identifies one stop: a decision about it is void once the operation has been resumed or stopped again."""
    finished = record.finished_at.isoformat() if record.finished_at else "-"
    return f"{record.phase.value}:{record.reason.value if record.reason else '-'}:{finished}"


def build_request(
    record: OperationRecord,
    contract: Contract | None,
    now: datetime,
    *,
    decision_id: str,
    can_resubmit: bool = False,
    requested: tuple[timedelta, int, str, str] | None = None,
) -> DecisionRequest:
    """The decision request for a stopped operation; `requested` is an agent's (time, checks, reason, who).

    `contract` None: the operation's stored contract must not be used (it is not installed), so only the options
    that need nothing of it are offered (close): no console link, cancel URL or webhook of an untrusted text."""
    if record.phase is not Phase.STOPPED or record.reason is None:
        raise DecisionError(f"operation {record.operation_id} is not stopped; there is nothing to decide")
    if contract is None:
        return _request_about(record, None, now, decision_id, (Option(1, OptionKind.CLOSE, *_close_words()),))
    kinds = ALLOWED[record.reason]
    extra_time, extra_checks = contract.escalation.extend, contract.escalation.extend_checks
    requested_by = request_reason = None
    if requested is not None:
        extra_time, extra_checks, request_reason, requested_by = requested
        kinds = tuple(k for k in kinds if k in (OptionKind.EXTEND, OptionKind.PAUSE, OptionKind.CLOSE))
    options: list[Option] = []
    for kind in kinds:
        option = _option(kind, len(options) + 1, record, contract, now, extra_time, extra_checks, can_resubmit)
        if option is not None:
            options.append(option)
    request = _request_about(record, contract, now, decision_id, tuple(options))
    return replace(request, requested_by=requested_by, request_reason=request_reason)


def build_cancel_request(
    record: OperationRecord,
    contract: Contract,
    now: datetime,
    *,
    decision_id: str,
    reason: str,
    requested_by: str,
) -> DecisionRequest:
    """An agent's cancel request as a question for a person, with the options of `CANCEL_REQUEST`; raises
    DecisionError (saying why) where nothing can be cancelled."""
    if contract.cancel is None:
        raise DecisionError(
            f"contract {contract.name!r} documents no cancel action ([cancel]): nothing can be cancelled there"
        )
    kinds = CANCEL_REQUEST.get(record.phase)
    if kinds is None:
        raise DecisionError(f"operation {record.operation_id} {record.phase.value}: there is nothing to cancel")
    if record.reason is not None and OptionKind.CANCEL not in ALLOWED[record.reason]:
        raise DecisionError(
            f"operation {record.operation_id} stopped for {record.reason.value}, which allows no cancel (the"
            " provider ended the job, or another request to it would not be sound)"
        )
    options: list[Option] = []
    for kind in kinds:
        option = _option(kind, len(options) + 1, record, contract, now, timedelta(0), 0, False)
        if option is not None:
            options.append(option)
    request = _request_about(record, contract, now, decision_id, tuple(options))
    return replace(request, requested_by=requested_by, request_reason=reason, topic=Topic.CANCEL)


def _request_about(
    record: OperationRecord, contract: Contract | None, now: datetime, decision_id: str, options: tuple[Option, ...]
) -> DecisionRequest:
    """The context of R31 for any decision about `record`, whatever its phase, told on the contract's webhook (none
    without a contract: an untrusted text's webhook is never posted to)."""
    return DecisionRequest(
        decision_id=decision_id,
        operation_id=record.operation_id,
        job_id=record.job_id,
        reason=record.reason,
        detail=record.detail or "",
        last_state=record.last_state,
        started_at=record.created_at,
        created_at=now,
        requests_used=record.status_requests_used,
        requests_max=record.plan.max_status_requests,
        transport_used=record.transport_failures_used,
        transport_max=record.plan.max_transport_failures,
        last_http_status=record.last_http_status,
        last_observed_at=record.last_observed_at,
        deadline_at=record.deadline_at,
        useful_until=record.plan.useful_until,
        stop_marker=stop_marker(record),
        options=options,
        provider_error=record.provider_error,
        announce=contract is not None and contract.escalation.webhook_url is not None,
    )


def _option(
    kind: OptionKind,
    number: int,
    record: OperationRecord,
    contract: Contract,
    now: datetime,
    extra_time: timedelta,
    extra_checks: int,
    can_resubmit: bool,
) -> Option | None:
    if kind is OptionKind.EXTEND:
        reason = record.reason
        transport = record.plan.max_transport_failures if reason in _TRANSPORT_REASONS else None
        label = f"extend by {format_duration(extra_time)} with {plural(extra_checks, 'additional check')}"
        if transport:
            label += f" and {plural(transport, 'more transport failure')}"
        new_deadline = max(now, record.deadline_at) + extra_time
        effect = (
            f"waits until {format_rfc3339(new_deadline)} at most; the provider sees at most"
            f" {plural(extra_checks, 'more check')} ({record.status_requests_used + extra_checks} in all)"
        )
        if record.plan.useful_until is not None and new_deadline > record.plan.useful_until:
            effect += f"; note the result stops being useful at {format_rfc3339(record.plan.useful_until)}"
        return Option(number, kind, label, effect, extra_time, extra_checks, transport)
    if kind is OptionKind.PAUSE:
        pause = contract.escalation.pause
        label = f"pause {format_duration(pause)}, then check once"
        effect = (
            f"no request for {format_duration(pause)} while someone looks at the provider; then exactly one"
            f" check; an unknown state again stops again"
        )
        return Option(number, kind, label, effect, pause, 1, None)
    if kind is OptionKind.CANCEL:
        if contract.cancel is None:
            return None  # offered only when the contract documents a cancel action (R32)
        cancel_url = contract.cancel.url_for(record.job_id)
        effect = f"sends {contract.cancel.method} {cancel_url} once"
        if record.phase is Phase.ACTIVE:
            effect += "; the watch stops (no more checks)"
            return Option(number, kind, "cancel at provider and stop watching", effect, url=cancel_url)
        return Option(number, kind, "cancel at provider", effect, url=cancel_url)
    if kind is OptionKind.RECHECK:
        return Option(number, kind, RECHECK_LABEL, _recheck_effect(record))
    if kind is OptionKind.KEEP:
        effect = (
            f"nothing is sent; the watch goes on until {format_rfc3339(record.deadline_at)} with at most"
            f" {plural(record.plan.max_status_requests, 'check')} in all"
        )
        return Option(number, kind, "keep watching", effect)
    if kind is OptionKind.INSPECT:
        console = contract.console_url_for(record.job_id)
        if console is None:
            return None
        return Option(number, kind, "inspect provider console", f"opens {console}; decides nothing", url=console)
    if kind is OptionKind.RESUBMIT:
        if not can_resubmit:
            return None  # only with a stored submission and provider idempotency (R34)
        return Option(
            number, kind, "resubmit the job", "sends the stored submission again as a new job, with a new operation"
        )
    return Option(number, kind, *_close_words())


def _close_words() -> tuple[str, str]:
    return "close", "accepts the stop as final; nothing more is sent"


def apply_extension(record: OperationRecord, option: Option, now: datetime) -> OperationRecord:
    """A person's extension: new limits counted from what was already used, never a reset (R20, R41)."""
    if option.kind not in (OptionKind.EXTEND, OptionKind.PAUSE):
        raise DecisionError(f"option {option.number} ({option.kind.value}) does not extend waiting")
    if record.phase is not Phase.STOPPED:
        raise DecisionError(f"operation {record.operation_id} is {record.phase.value}; there is nothing to extend")
    assert option.extra_time is not None and option.extra_checks is not None
    plan = record.plan
    if option.kind is OptionKind.PAUSE:
        next_poll = now + option.extra_time
        deadline = next_poll + contract_margin(record)
    else:
        next_poll = now
        if record.reason is StopReason.RATE_LIMITED:
            next_poll = now + plan.schedule.max_delay
        deadline = max(now, plan.deadline_at) + option.extra_time
    transport_max = plan.max_transport_failures
    if option.extra_transport_failures:
        transport_max = record.transport_failures_used + option.extra_transport_failures
    new_plan = replace(
        plan,
        deadline_at=deadline,
        max_status_requests=record.status_requests_used + option.extra_checks,
        max_transport_failures=transport_max,
    )
    return record.extended(new_plan, next_poll)


def _recheck_effect(record: OperationRecord) -> str:
    used, most = record.status_requests_used, record.plan.max_status_requests
    counted = f"of {most}" if used < most else f"of {most}: the budget grows by one for it"
    margin = format_duration(contract_margin(record))
    return (
        f"sends one check with the credential configured now, read again by whoever sends it (`pollwarden"
        f" decide` itself where the credential is configured, else the next watch of the operation); it is check"
        f" {used + 1} {counted}, and a deadline less than {margin} away moves to {margin} after the decision"
        f" so it can be sent; the answer decides what follows, and a refusal stops the operation again with a new"
        f" decision"
    )


def apply_recheck(record: OperationRecord, option: Option, now: datetime) -> OperationRecord:
    """A person's one check with the credential configured now (`OptionKind.RECHECK`): the operation is due at once
    with room for exactly that request, counted (one more in the budget only when it is spent), and a deadline that
    leaves time to send it. Nothing else widens: a refusal stops it again, and only a new decision checks again."""
    if option.kind is not OptionKind.RECHECK:
        raise DecisionError(f"option {option.number} ({option.kind.value}) is not a check with a new credential")
    if record.phase is not Phase.STOPPED or record.reason is not StopReason.AUTHORIZATION_DENIED:
        state = f"{record.phase.value}{', ' + record.reason.value if record.reason else ''}"
        raise DecisionError(f"operation {record.operation_id} is {state}, not refused; there is nothing to check again")
    plan = record.plan
    new_plan = replace(
        plan,
        deadline_at=max(plan.deadline_at, now + contract_margin(record)),
        max_status_requests=max(plan.max_status_requests, record.status_requests_used + 1),
    )
    return record.rechecking(new_plan, now)


def contract_margin(record: OperationRecord) -> timedelta:
    """Time after a pause for its one check to be sent and answered."""
    return max(timedelta(minutes=1), record.plan.schedule.max_delay)
