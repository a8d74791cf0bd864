"""An operation is created (or submitted), polled, stopped; its lease is taken, lost or given back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..core.admission import created_event
from ..core.codec import record_to_json
from ..core.contract.result import JSONValue, counts_text, result_text
from ..core.decide import Decision
from ..core.durations import format_rfc3339
from ..core.learnt_first import FirstCheck
from ..core.observe import Observation
from ..core.reasons import Phase
from ..core.record import OperationRecord
from ..core.schedule import Rejection
from .base import AuditEvent, NewEvent, Payload, event
from .words import (
    JOB_ENDED_REASONS,
    Scene,
    clock_text,
    count_words,
    counts_of,
    observed_words,
    reason_words,
    said,
    wait_words,
)

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
    placed: Mapping[str, Any] | None = None
    """The first check's placement by the learnt history, when a model was handed in (`core.learnt_first`)."""
    inputs: Mapping[str, Any] | None = None
    """What placed it, for `why` to replay; absent in an older version's event."""

    @classmethod
    def of(cls, record: OperationRecord, created_by: str) -> Created:
        """The one shape of `created`, whichever interface made the operation (admission builds it)."""
        return cls.from_json(created_event(record, created_by))

    def line(self, scene: Scene) -> str:
        return (
            f"{scene.at} watching job {said(self.job)} ({said(self.contract)}),"
            f" deadline {clock_text(self.deadline_at)},"
            f" budget {count_words(self.max_status_requests, 'check')},"
            f" {count_words(self.max_transport_failures, 'transport failure')}"
        ) + first_check_words(self.placed)


def first_check_words(placed: Mapping[str, Any] | None) -> str:
    """A creating event's learnt first check in words ("; first check in 42s: learnt from ..."), else nothing."""
    detail = None if placed is None else placed.get("detail")
    return f"; {detail}" if isinstance(detail, str) and detail else ""


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
        return cls.from_json(cls.payload(reserved, lease_token))

    @staticmethod
    def payload(reserved: OperationRecord, lease_token: int) -> Payload:
        """The stored shape, built without the typed event (`of` is this, parsed): the poll path writes it."""
        return {
            "request_no": reserved.status_requests_used,
            "max_status_requests": reserved.plan.max_status_requests,
            "deadline_at": format_rfc3339(reserved.deadline_at),
            "lease_token": lease_token,
        }

    def line(self, scene: Scene) -> None:
        """The decision line already tells this; `story --json` has it."""
        return None


@event
class Observed(AuditEvent):
    """What one HTTP exchange proved; the fields the story tells, the rest of the observation in `extra`."""

    KIND = "observed"
    sent_at: str | None = None
    http_status: int | None = None
    state: str | None = None
    retry_after_header: str | None = None
    detail: str | None = None
    provider_error: str | None = None
    """The provider's own error message, as compact JSON text when it was an object."""

    @classmethod
    def of(cls, observation: Observation, sent_at: datetime) -> Observed:
        return cls.from_json(cls.payload(observation.to_json(), sent_at))

    @staticmethod
    def payload(seen: Payload, sent_at: datetime) -> Payload:
        """`seen` is the observation's JSON (`Observation.to_json`), built once for this and the decision."""
        return {"sent_at": format_rfc3339(sent_at), **seen}

    def line(self, scene: Scene) -> None:
        """The decision line already tells this; `story --json` has it."""
        return None


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
        seen = observation.to_json() if observation is not None else None
        return cls.from_json(cls.payload(before, seen, decision, now, u))

    @staticmethod
    def payload(
        before: OperationRecord, seen: Payload | None, decision: Decision, now: datetime, u: float | None
    ) -> Payload:
        """The stored shape, which `of` parses: the poll path writes this directly, since coercing every field
        of values the core just typed, then copying them back out, was a third of building a poll's trail.
        `seen` is the observation's JSON (`Observation.to_json`), None for a halt; `Observed` shows the same."""
        inputs: Payload = {"record": record_to_json(before)}
        if seen is not None:
            inputs["observation"] = seen
        inputs["now"] = now.isoformat()
        if seen is not None:
            inputs["u"] = u
        if decision.learnt is not None:  # the model the decision was given: `why` replays with it
            inputs["learnt"] = decision.learnt.to_json()
        return {
            **decision.to_json(),
            "request_no": before.status_requests_used,
            "max_status_requests": before.plan.max_status_requests,
            "deadline_at": format_rfc3339(before.deadline_at),
            "state": seen["state"] if seen is not None else before.last_state,
            "http_status": seen["http_status"] if seen is not None else before.last_http_status,
            "inputs": inputs,
        }

    def _learnt_words(self) -> str | None:
        """The learnt part of the detail, as `core.learnt.Learnt.words` wrote it (after its "next check in 42s: ")."""
        detail = self.detail or ""
        at = detail.find("learnt from ")
        return None if at < 0 else detail[at:].split("; ")[0]

    def line(self, scene: Scene) -> str:
        head = observed_words(scene.observed) if scene.observed is not None else None
        if self.action == "wait":
            learnt = self._learnt_words() if self.delay_source == "learnt" else None
            if learnt is not None:  # what the history said: "learnt from 312 ended jobs of exports (p5 ...) ..."
                return f"{scene.at} {said(head)}, {wait_words(self.next_poll_at, self.delay_source)}: {learnt}"
            return f"{scene.at} {said(head)}, {wait_words(self.next_poll_at, self.delay_source)}"
        if self.action == "succeed":
            return f"{scene.at} {said(head)}, result validated, succeeded"
        prefix = f"{scene.at} {head}, " if head else f"{scene.at} "
        if self.reason in JOB_ENDED_REASONS:
            error = scene.observed.provider_error if scene.observed is not None else None
            return f"{prefix}{reason_words(self.reason)}, stopped" + (f"; the provider said: {error}" if error else "")
        if head is None and self.rule not in (None, self.reason):  # a stop of its own rule, with no answer to tell it
            return f"{prefix}{reason_words(self.reason)} ({said(self.rule)}), escalated: {said(self.detail)}"
        return f"{prefix}{reason_words(self.reason)}, escalated"


@event
class GuidanceRejected(AuditEvent):
    KIND = "guidance_rejected"
    source: str | None = None
    value: str | None = None
    why: str | None = None

    @classmethod
    def of(cls, rejection: Rejection) -> GuidanceRejected:
        return cls(source=rejection.source, value=rejection.value, why=rejection.why)

    def line(self, scene: Scene) -> str:
        value = "?" if self.value is None else repr(self.value)
        return f"{scene.at}   rejected {said(self.source)} {value}: {said(self.why)}"


@event
class SucceededEvent(AuditEvent):
    KIND = "succeeded"
    result: JSONValue = None
    state: str | None = None
    counts: Mapping[str, Any] | None = None
    """What part of the job the result covers, as the provider counted it (`[fields].counts`), when it did."""

    def line(self, scene: Scene) -> str | None:
        """The decision line tells the success; the provider's counts, when it gave them, say what the result covers."""
        told = counts_text(counts_of(self.counts))
        return None if told is None else f"{scene.at}   the result covers: {told}"


@dataclass(frozen=True, kw_only=True)
class StopEvent(AuditEvent):
    reason: str | None = None
    detail: str | None = None
    summary: Mapping[str, Any] | None = None


@event
class JobEnded(StopEvent):
    KIND = "job_ended"

    def line(self, scene: Scene) -> str | None:
        """The decision line tells the ending; a partial result kept with it (what finished first) is told here."""
        summary = self.summary or {}
        result = summary.get("result")
        if result is None:
            return None
        told = counts_text(counts_of(summary.get("counts")))
        covers = f" ({told})" if told else ""
        return f"{scene.at}   kept the finished part as a partial result: {said(result_text(result))[:300]}{covers}"


@event
class Escalated(StopEvent):
    KIND = "escalated"

    def line(self, scene: Scene) -> None:
        """The decision line already tells this; `story --json` has it."""
        return None


def outcome_events(record: OperationRecord) -> list[AuditEvent]:
    """The outcome a decision left, if it ended the waiting: succeeded, job_ended or escalated."""
    if record.phase is Phase.SUCCEEDED:
        counts = None if record.counts is None else dict(record.counts)
        return [SucceededEvent(result=record.result, state=record.last_state, counts=counts)]
    if record.phase is Phase.STOPPED and record.reason is not None:
        stop = JobEnded if record.reason.job_ended else Escalated
        return [stop(reason=record.reason.value, detail=record.detail, summary=record.summary())]
    return []


def poll_events(
    before: OperationRecord, observation: Observation, decision: Decision, now: datetime, u: float, *, sent_at: datetime
) -> list[NewEvent]:
    """What one poll leaves in the trail: the observation, the decision with its inputs, and the outcome. The
    first two are prepared in their stored shapes (`Observed.of`, `DecisionEvent.of` parse the same), not
    typed field by field, since a poll writes them and nothing reads them back on the way."""
    seen = observation.to_json()
    return [
        Observed.prepared(Observed.payload(seen, sent_at)),
        DecisionEvent.prepared(DecisionEvent.payload(before, seen, decision, now, u)),
        *(GuidanceRejected.of(r) for r in decision.rejections),
        *outcome_events(decision.record),
    ]


@event
class RecordUnreadable(AuditEvent):
    """A claim met the operation's row holding a record it could not decode, and set the row aside (the store's
    `unreadable` mark): no claim takes it again until a person repairs it (docs/design.md, "Unreadable rows")."""

    KIND = "record_unreadable"
    why: str | None = None

    def line(self, scene: Scene) -> str:
        return (
            f"{scene.at} its record could not be read ({said(self.why)}): set aside, no claim takes it until it is"
            f" repaired"
        )


@event
class LeaseLost(AuditEvent):
    KIND = "lease_lost"
    owner: str | None = None
    token: int | None = None

    def line(self, scene: Scene) -> str:
        return f"{scene.at} lost the lease (token {said(self.token)}); the response was discarded"


@event
class RequestWithheld(AuditEvent):
    """A reservation committed so late that the lease would lapse before the bounded request could end: the
    request counted, nothing sent, the lease given back (another owner could otherwise take it mid-request)."""

    KIND = "request_withheld"
    request_no: int | None = None
    why: str | None = None

    def line(self, scene: Scene) -> str:
        return f"{scene.at} did not send request {said(self.request_no)} (counted): {said(self.why)}"


@event
class LeaseTakenOver(AuditEvent):
    KIND = "lease_taken_over"
    previous_owner: str | None = None
    owner: str | None = None
    token: int | None = None

    def line(self, scene: Scene) -> str:
        return f"{scene.at} took over the operation from {said(self.previous_owner)} (lease {said(self.token)})"


@event
class ResumeRefused(AuditEvent):
    KIND = "resume_refused"
    why: str | None = None

    def line(self, scene: Scene) -> str:
        return f"{scene.at} refused a resume: {said(self.why)}"


@event
class LimitsNarrowed(AuditEvent):
    """A resume asked for less; the narrowed record's summary is the payload."""

    KIND = "limits_narrowed"
    deadline_at: str | None = None
    max_status_requests: int | None = None

    @classmethod
    def of(cls, narrowed: OperationRecord) -> LimitsNarrowed:
        return cls.from_json(narrowed.summary())

    def line(self, scene: Scene) -> str:
        return (
            f"{scene.at} limits narrowed: deadline {clock_text(self.deadline_at)}, budget"
            f" {said(self.max_status_requests)}"
        )


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

    def line(self, scene: Scene) -> str:
        line = f"{scene.at} watch interrupted by {said(self.by)} ({said(self.why)})"
        if not self.resumable:
            return line
        return (
            f"{line}; resume operation {said(self.operation or scene.operation)}:"
            f" deadline {clock_text(self.deadline_at)},"
            f" checks {said(self.status_requests_used)}/{said(self.max_status_requests)} used, kept"
        )


@event
class Paced(AuditEvent):
    KIND = "paced"
    provider: str | None = None
    until: str | None = None

    def line(self, scene: Scene) -> str:
        return (
            f"{scene.at} paced by the fleet's cap for {said(self.provider)}: next check not before"
            f" {clock_text(self.until)}"
        )


@event
class WokenByPush(AuditEvent):
    """A signed push from the provider made the operation due (issue 27): which delivery, which event type, and
    when the check it causes is due. Never the push's body: the status request that follows decides."""

    KIND = "woken_by_push"
    delivery: str | None = None
    event_type: str | None = None
    due_at: str | None = None

    def line(self, scene: Scene) -> str:
        what = f", {said(self.event_type)}" if self.event_type else ""
        return (
            f"{scene.at} woken by provider push (delivery {said(self.delivery)}{what}): check due"
            f" {clock_text(self.due_at)}"
        )


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

    def line(self, scene: Scene) -> str:
        return f"{scene.at} recorded a submission {said(self.fingerprint)[:19]}… before sending it"


@event
class Submitted(AuditEvent):
    """The provider accepted the submission; the new record's summary and the answer's facts."""

    KIND = "submitted"
    job: str | None = None
    contract: str | None = None
    deadline_at: str | None = None
    max_status_requests: int | None = None
    placed: Mapping[str, Any] | None = None
    """As `Created.placed`: the first check's placement by the learnt history."""
    inputs: Mapping[str, Any] | None = None

    @classmethod
    def of(
        cls, record: OperationRecord, *, http_status: int, resent: bool, first: FirstCheck | None = None
    ) -> Submitted:
        return cls.from_json(
            {
                **record.summary(),
                "request_fingerprint": record.request_fingerprint,
                "http_status": http_status,
                "status_location": record.status_location,
                "resent_with_same_token": resent,
                **({} if first is None else first.event_fields()),
            }
        )

    def line(self, scene: Scene) -> str:
        return (
            f"{scene.at} submitted job {said(self.job)} ({said(self.contract)}),"
            f" deadline {clock_text(self.deadline_at)},"
            f" budget {said(self.max_status_requests)}"
        ) + first_check_words(self.placed)


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

    def line(self, scene: Scene) -> str:
        why = self.detail or (f"HTTP {self.http_status}" if self.http_status is not None else None)
        return f"{scene.at} submission {self.state.replace('_', ' ')}" + (f": {why}" if why else "")


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
