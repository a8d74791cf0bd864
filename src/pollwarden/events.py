"""The audit log's event kinds, one frozen dataclass each, and the registry `EVENT_TYPES` (kind -> class).

Here rather than in `audit/`: an event describes an operation (its record, observation, decision), not the
sealing, and `audit/` loads the crypto. This module needs only `core`, so the engine, the story and the
tests build and read events without a store.

Producers build an event and hand the store `event.new_event()`, the `(kind, payload)` tuple it has always
taken. Readers call `parse(kind, data)`: `from_json` is tolerant, because records written by older versions
must still render. A field that is missing or of the wrong type becomes None (or the type's empty value),
and keys no field names are kept in `extra`, so `to_json` gives back what was read.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any, ClassVar, Self, TypeVar, dataclass_transform

from .core.admission import created_event
from .core.codec import record_to_json
from .core.contract_result import JSONValue
from .core.decide import Decision
from .core.durations import format_rfc3339
from .core.escalation import DecisionRequest, Option
from .core.observe import Observation
from .core.reasons import Phase
from .core.record import OperationRecord
from .core.schedule import Rejection

Payload = dict[str, Any]
"""A JSON object as the audit log stores it: its values are whatever a provider or a person sent."""


@dataclass(frozen=True, kw_only=True)
class AuditEvent:
    KIND: ClassVar[str] = ""

    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Keys of the payload that no field names: older shapes, or detail carried along (a record summary)."""

    def to_json(self) -> Payload:
        out: Payload = dict(self.extra)
        for name in _coercers(type(self)):
            out[name] = _plain(getattr(self, name))
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        coercers = _coercers(cls)
        values: dict[str, Any] = {name: coerce(data.get(name)) for name, coerce in coercers.items()}
        return cls(**values, extra={k: v for k, v in data.items() if k not in coercers})

    def new_event(self) -> tuple[str, Payload]:
        """What the store's write/append takes (`NewEvent`)."""
        return self.KIND, self.to_json()


def _plain(value: object) -> object:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return dict(value)
    return value


Coerce = Callable[[object], object]
_COERCERS: dict[type[AuditEvent], dict[str, Coerce]] = {}


def _coercers(cls: type[AuditEvent]) -> dict[str, Coerce]:
    """Field name -> its `_coerce`, in field order; the type hints are resolved and taken apart once per class
    (the annotations are strings here), not on each of the several events every poll writes."""
    found = _COERCERS.get(cls)
    if found is None:
        resolved = typing.get_type_hints(cls)
        found = {f.name: _coerce_to(resolved[f.name]) for f in fields(cls) if f.name != "extra"}
        _COERCERS[cls] = found
    return found


def _coerce_to(hint: object) -> Coerce:
    """For one hint: `value` if it has one of the hinted types, else None when the hint allows it, else the
    empty value."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    origins = tuple(typing.get_origin(option) or option for option in options)
    nullable = types.NoneType in options
    empty: dict[object, Callable[[], object]] = {
        str: str,
        int: int,
        float: float,
        bool: bool,
        tuple: tuple,
        Mapping: dict,
    }
    make_empty = empty.get(origins[0])

    def coerce(value: object) -> object:
        for origin in origins:
            if origin is tuple and isinstance(value, list | tuple):
                return tuple(v for v in value if isinstance(v, Mapping))  # tuples here only hold JSON objects
            if origin is Mapping and isinstance(value, Mapping):
                return value
            if origin is float and isinstance(value, int | float) and not isinstance(value, bool):
                return float(value)
            if origin is int and isinstance(value, bool):
                continue
            if isinstance(origin, type) and origin not in (tuple, Mapping) and isinstance(value, origin):
                return value
        if nullable or make_empty is None:
            return None
        return make_empty()

    return coerce


EVENT_TYPES: dict[str, type[AuditEvent]] = {}
"""Every kind the log holds, to its class: the story's table and `parse` look kinds up here."""


E = TypeVar("E", bound=type[AuditEvent])


@dataclass_transform(frozen_default=True, kw_only_default=True)
def event(cls: E) -> E:
    """A frozen, keyword-only dataclass for one kind, entered in `EVENT_TYPES` under its `KIND`."""
    dataclass(frozen=True, kw_only=True)(cls)  # a dataclass decorator returns the class it was given
    if not cls.KIND or cls.KIND in EVENT_TYPES:
        raise TypeError(f"{cls.__name__}: KIND {cls.KIND!r} is empty or already taken")
    EVENT_TYPES[cls.KIND] = cls
    return cls


def parse(kind: str, data: Mapping[str, Any]) -> AuditEvent | None:
    """The typed event of a stored record; None for a kind this version does not know."""
    cls = EVENT_TYPES.get(kind)
    return None if cls is None else cls.from_json(data)


# -- an operation is created, polled and stopped --------------------------------------------------------


@event
class Created(AuditEvent):
    KIND = "created"
    operation: str | None = None
    job: str | None = None
    contract: str | None = None
    deadline_at: str | None = None
    max_status_requests: int | None = None
    max_transport_failures: int | None = None

    @classmethod
    def of(cls, record: OperationRecord, created_by: str) -> Created:
        """The one shape of `created`, whichever interface made the operation (admission builds it)."""
        return cls.from_json(created_event(record, created_by))


@event
class Reserved(AuditEvent):
    """A status request counted (and committed) before it is sent."""

    KIND = "reserved"
    request_no: int | None = None
    max_status_requests: int | None = None
    deadline_at: str | None = None
    lease_token: int | None = None

    @classmethod
    def of(cls, reserved: OperationRecord, lease_token: int) -> Reserved:
        return cls(
            request_no=reserved.status_requests_used,
            max_status_requests=reserved.plan.max_status_requests,
            deadline_at=format_rfc3339(reserved.deadline_at),
            lease_token=lease_token,
        )


@event
class Observed(AuditEvent):
    """What one HTTP exchange proved; the fields the story tells, the rest of the observation in `extra`."""

    KIND = "observed"
    sent_at: str | None = None
    http_status: int | None = None
    state: str | None = None
    retry_after_header: str | None = None
    detail: str | None = None

    @classmethod
    def of(cls, observation: Observation, sent_at: datetime) -> Observed:
        return cls.from_json({"sent_at": format_rfc3339(sent_at), **observation.to_json()})


@event
class DecisionEvent(AuditEvent):
    """One decision of the core with everything `why` needs to replay it (`inputs`)."""

    KIND = "decision"
    action: str | None = None
    rule: str | None = None
    reason: str | None = None
    next_poll_at: str | None = None
    delay_source: str | None = None
    detail: str | None = None
    request_no: int | None = None
    max_status_requests: int | None = None
    deadline_at: str | None = None
    state: str | None = None
    http_status: int | None = None
    inputs: Mapping[str, Any] | None = None

    @classmethod
    def of(
        cls,
        before: OperationRecord,
        observation: Observation | None,
        decision: Decision,
        now: datetime,
        u: float | None = None,
    ) -> DecisionEvent:
        """Built once for both paths: after a poll (`observation` and the jitter draw `u`), or a halt (None)."""
        inputs: Payload = {"record": record_to_json(before)}
        if observation is not None:
            inputs["observation"] = observation.to_json()
        inputs["now"] = now.isoformat()
        if observation is not None:
            inputs["u"] = u
        return cls.from_json(
            {
                **decision.to_json(),
                "request_no": before.status_requests_used,
                "max_status_requests": before.plan.max_status_requests,
                "deadline_at": format_rfc3339(before.deadline_at),
                "state": observation.state if observation is not None else before.last_state,
                "http_status": observation.http_status if observation is not None else before.last_http_status,
                "inputs": inputs,
            }
        )


@event
class GuidanceRejected(AuditEvent):
    KIND = "guidance_rejected"
    source: str | None = None
    value: str | None = None
    why: str | None = None

    @classmethod
    def of(cls, rejection: Rejection) -> GuidanceRejected:
        return cls(source=rejection.source, value=rejection.value, why=rejection.why)


@event
class SucceededEvent(AuditEvent):
    KIND = "succeeded"
    result: JSONValue = None
    state: str | None = None


@dataclass(frozen=True, kw_only=True)
class StopEvent(AuditEvent):
    reason: str | None = None
    detail: str | None = None
    summary: Mapping[str, Any] | None = None


@event
class JobEnded(StopEvent):
    KIND = "job_ended"


@event
class Escalated(StopEvent):
    KIND = "escalated"


def outcome_events(record: OperationRecord) -> list[AuditEvent]:
    """The outcome a decision left, if it ended the waiting: succeeded, job_ended or escalated."""
    if record.phase is Phase.SUCCEEDED:
        return [SucceededEvent(result=record.result, state=record.last_state)]
    if record.phase is Phase.STOPPED and record.reason is not None:
        stop = JobEnded if record.reason.job_ended else Escalated
        return [stop(reason=record.reason.value, detail=record.detail, summary=record.summary())]
    return []


def poll_events(
    before: OperationRecord, observation: Observation, decision: Decision, now: datetime, u: float, *, sent_at: datetime
) -> list[AuditEvent]:
    """What one poll leaves in the trail: the observation, the decision with its inputs, and the outcome."""
    return [
        Observed.of(observation, sent_at),
        DecisionEvent.of(before, observation, decision, now, u),
        *(GuidanceRejected.of(r) for r in decision.rejections),
        *outcome_events(decision.record),
    ]


@event
class LeaseLost(AuditEvent):
    KIND = "lease_lost"
    owner: str | None = None
    token: int | None = None


@event
class RequestWithheld(AuditEvent):
    """A reservation committed so late that the lease would lapse before the bounded request could end: the
    request counted, nothing sent, the lease given back (another owner could otherwise take it mid-request)."""

    KIND = "request_withheld"
    request_no: int | None = None
    why: str | None = None


@event
class LeaseTakenOver(AuditEvent):
    KIND = "lease_taken_over"
    previous_owner: str | None = None
    owner: str | None = None
    token: int | None = None


@event
class ResumeRefused(AuditEvent):
    KIND = "resume_refused"
    why: str | None = None


@event
class LimitsNarrowed(AuditEvent):
    """A resume asked for less; the narrowed record's summary is the payload."""

    KIND = "limits_narrowed"
    deadline_at: str | None = None
    max_status_requests: int | None = None

    @classmethod
    def of(cls, narrowed: OperationRecord) -> LimitsNarrowed:
        return cls.from_json(narrowed.summary())


@event
class WatchInterrupted(AuditEvent):
    """A watch stopped before its operation was final (a cancel, a signal, a progress callback that raised):
    nothing is lost, the lease is given back, and the operation waits, active, with the deadline and budget it
    had, for a later watch of the same operation id. `by` is the interface ("cli", "python api"), `why` what
    stopped it ("cancelled", "SIGINT", "on_progress raised ValueError": never an exception's text)."""

    KIND = "interrupted"
    by: str | None = None
    why: str | None = None
    resumable: bool = False
    operation: str | None = None
    deadline_at: str | None = None
    status_requests_used: int | None = None
    max_status_requests: int | None = None

    @classmethod
    def of(cls, record: OperationRecord, *, by: str, why: str) -> WatchInterrupted:
        return cls(
            by=by,
            why=why,
            resumable=not record.is_final,
            operation=record.operation_id,
            deadline_at=format_rfc3339(record.deadline_at),
            status_requests_used=record.status_requests_used,
            max_status_requests=record.plan.max_status_requests,
        )


@event
class Paced(AuditEvent):
    KIND = "paced"
    provider: str | None = None
    until: str | None = None


# -- a person decides -------------------------------------------------------------------------------------


@event
class DecisionRequested(AuditEvent):
    """The payload is the request's own JSON (`DecisionRequest.to_json`)."""

    KIND = "decision_requested"
    decision_id: str | None = None
    reason: str | None = None
    topic: str | None = None
    """What is asked: "stop" (absent in records older than the cancel request) or "cancel_request"."""
    options: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, kw_only=True)
class AnswerEvent(AuditEvent):
    decision_id: str | None = None
    by: str | None = None
    note: str | None = None
    reason: str | None = None

    @classmethod
    def of(cls, request: DecisionRequest, *, by: str, note: str | None) -> Self:
        return cls(decision_id=request.decision_id, by=by, note=note, reason=request.why)


@event
class Refused(AnswerEvent):
    KIND = "refused"


@event
class DecisionExpired(AnswerEvent):
    KIND = "decision_expired"


@dataclass(frozen=True, kw_only=True)
class ChosenEvent(AnswerEvent):
    option: int | None = None
    kind: str | None = None
    label: str | None = None

    @classmethod
    def chose(cls, request: DecisionRequest, option: Option, *, by: str, note: str | None) -> Self:
        answer = cls.of(request, by=by, note=note)
        return replace(answer, option=option.number, kind=option.kind.value, label=option.label)


@event
class Decided(ChosenEvent):
    KIND = "decided"


@event
class Inspected(ChosenEvent):
    KIND = "inspected"


@event
class Extended(ChosenEvent):
    """The new limits an extension gave, with the choice that gave them."""

    KIND = "extended"
    delay_source: str | None = None
    deadline_at: str | None = None
    max_status_requests: int | None = None
    max_transport_failures: int | None = None
    next_poll_at: str | None = None
    effect: str | None = None

    @classmethod
    def after(cls, chosen: ChosenEvent, extended: OperationRecord, effect: str | None) -> Extended:
        return cls.from_json(
            {
                **chosen.to_json(),
                "delay_source": "manual_extension",
                "deadline_at": format_rfc3339(extended.deadline_at),
                "max_status_requests": extended.plan.max_status_requests,
                "max_transport_failures": extended.plan.max_transport_failures,
                "next_poll_at": format_rfc3339(extended.next_poll_at),
                "effect": effect,
            }
        )


@dataclass(frozen=True, kw_only=True)
class DeliveryEvent(AuditEvent):
    decision_id: str | None = None
    ok: bool = False
    attempts: int | None = None
    status: int | None = None
    error: str | None = None


@event
class Notified(DeliveryEvent):
    KIND = "notified"


@event
class NotifyFailed(DeliveryEvent):
    KIND = "notify_failed"


@event
class ActionEvent(AuditEvent):
    """An action beside polling (cancel, fetch_result, resubmit) and how it went; its own detail in `extra`."""

    KIND = "action"
    action: str | None = None
    ok: bool = False
    by: str | None = None
    detail: str | None = None
    decision_id: str | None = None


# -- submissions ----------------------------------------------------------------------------------------


@event
class SubmissionIntent(AuditEvent):
    """Recorded before the submission is sent (R34)."""

    KIND = "submission_intent"
    fingerprint: str | None = None
    method: str | None = None
    url: str | None = None
    idempotent: bool = False
    created_by: str | None = None
    """Who submits, as a `created` event names its creator ("cli", "agent session ...")."""


@event
class Submitted(AuditEvent):
    """The provider accepted the submission; the new record's summary and the answer's facts."""

    KIND = "submitted"
    job: str | None = None
    contract: str | None = None
    deadline_at: str | None = None
    max_status_requests: int | None = None

    @classmethod
    def of(cls, record: OperationRecord, *, http_status: int, resent: bool) -> Submitted:
        return cls.from_json(
            {
                **record.summary(),
                "request_fingerprint": record.request_fingerprint,
                "http_status": http_status,
                "status_location": record.status_location,
                "resent_with_same_token": resent,
            }
        )


@dataclass(frozen=True, kw_only=True)
class SubmissionMarked(AuditEvent):
    """A submission that did not end in an accepted job; the kind's suffix is the state the store keeps."""

    failure: str | None = None
    detail: str | None = None
    http_status: int | None = None

    @property
    def state(self) -> str:
        """What `Store.mark_submission(operation_id, state, payload, at)` takes; it logs `submission_<state>`."""
        return self.KIND.removeprefix("submission_")


@event
class SubmissionUnknown(SubmissionMarked):
    KIND = "submission_unknown"


@event
class SubmissionNotSent(SubmissionMarked):
    KIND = "submission_not_sent"


@event
class SubmissionRejected(SubmissionMarked):
    KIND = "submission_rejected"


@event
class SubmissionDuplicate(SubmissionMarked):
    """The provider answered with a job another operation already watches (a provider that deduplicates)."""

    KIND = "submission_duplicate"
    watched_by: str | None = None


# -- an agent session's own log (@agent/<id>) -------------------------------------------------------------


@event
class SessionStarted(AuditEvent):
    KIND = "session_started"
    session: str | None = None
    server: str | None = None
    client: Mapping[str, Any] | str | None = None


@event
class WatchStarted(AuditEvent):
    KIND = "watch_started"
    operation: str | None = None
    job: str | None = None
    contract: str | None = None


@event
class WatchRejoined(WatchStarted):
    """The agent asked to watch a job that already had an operation: it got that one back, never a fresh budget."""

    KIND = "watch_rejoined"


@event
class CallIntent(AuditEvent):
    KIND = "call_intent"
    call: int | None = None
    purpose: str | None = None
    operation: str | None = None
    approval: str | None = None
    status_requests_used: int | None = None
    max_status_requests: int | None = None


@event
class CallResult(AuditEvent):
    KIND = "call_result"
    call: int | None = None
    operation: str | None = None
    outcome: str | None = None


@event
class CallDenied(AuditEvent):
    KIND = "call_denied"
    operation: str | None = None
    why: str | None = None
    grant_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class GrantRequested(AuditEvent):
    """The payload is the grant's own JSON (`Grant.to_json`)."""

    grant_id: str | None = None
    kind: str | None = None
    scope: str | None = None


@event
class SessionApprovalRequested(GrantRequested):
    KIND = "session_approval_requested"


@event
class CallApprovalRequested(GrantRequested):
    KIND = "call_approval_requested"


@dataclass(frozen=True, kw_only=True)
class GrantAnswered(AuditEvent):
    grant_id: str | None = None
    by: str | None = None
    note: str | None = None


@event
class ApprovalApproved(GrantAnswered):
    KIND = "approval_approved"


@event
class ApprovalRefused(GrantAnswered):
    KIND = "approval_refused"


@event
class ApprovalRevoked(GrantAnswered):
    KIND = "approval_revoked"


@event
class ApprovalExpired(GrantAnswered):
    KIND = "approval_expired"


@event
class ExtensionRequested(AuditEvent):
    """An agent asked a person for more; in the operation's log the operation is the log itself."""

    KIND = "extension_requested"
    operation: str | None = None
    reason: str | None = None


@event
class CancelRequested(AuditEvent):
    """An agent asked a person to cancel the job (request_cancel, tasks/cancel); it cancels nothing itself."""

    KIND = "cancel_requested"
    operation: str | None = None
    decision_id: str | None = None
    reason: str | None = None
    requested_by: str | None = None
    added: bool | None = None
