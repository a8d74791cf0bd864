"""A person decides: the decision requests a stop raises, their answers, their delivery, and actions beside polling."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Self

from ..core.durations import format_rfc3339
from ..core.escalation import DecisionRequest, Option
from ..core.record import OperationRecord
from .base import AuditEvent, event
from .words import (
    Scene,
    clock_text,
    count_words,
    said,
    wait_words,
)

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
    provider_error: str | None = None
    """The provider's own error text, when its answer carried one (absent in records before issue 28)."""

    def line(self, scene: Scene) -> str:
        labels = ", ".join(said(o.get("label")) for o in self.options)
        about = "an agent's cancel request" if self.topic == "cancel_request" else said(self.reason)
        error = f"; the provider said: {said(self.provider_error)}" if self.provider_error else ""
        return f"{scene.at} asked for a decision {said(self.decision_id)} ({about}): {labels}{error}"


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

    def line(self, scene: Scene) -> str:
        return f"{scene.at} {said(self.by)} refused {said(self.decision_id)}; the operation stays stopped"


@event
class DecisionExpired(AnswerEvent):
    KIND = "decision_expired"

    def line(self, scene: Scene) -> str:
        return f"{scene.at} decision {said(self.decision_id)} expired: the operation had moved on"


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

    def line(self, scene: Scene) -> str:
        note = f" ({self.note})" if self.note else ""
        return (
            f"{scene.at} {said(self.by)} chose [{said(self.option)}] {said(self.label)} on"
            f" {said(self.decision_id)}{note}"
        )


@event
class Inspected(ChosenEvent):
    KIND = "inspected"

    def line(self, scene: Scene) -> str:
        return f"{scene.at} {said(self.by)} opened the provider console for {said(self.decision_id)}"


@event
class Extended(ChosenEvent):
    """The new limits an extension (or a check with the credential configured now) gave, with the choice that gave
    them; `delay_source` says which."""

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
                "delay_source": extended.delay_source.value,
                "deadline_at": format_rfc3339(extended.deadline_at),
                "max_status_requests": extended.plan.max_status_requests,
                "max_transport_failures": extended.plan.max_transport_failures,
                "next_poll_at": format_rfc3339(extended.next_poll_at),
                "effect": effect,
            }
        )

    def line(self, scene: Scene) -> str:
        limits = f"deadline {clock_text(self.deadline_at)}, budget {count_words(self.max_status_requests, 'check')}"
        if self.delay_source == "credential_recheck":
            return (
                f"{scene.at} one check with the credential configured now is due {clock_text(self.next_poll_at)}:"
                f" {limits}"
            )
        return f"{scene.at} extended: {limits}, {wait_words(self.next_poll_at, self.delay_source)}"


@dataclass(frozen=True, kw_only=True)
class DeliveryEvent(AuditEvent):
    decision_id: str | None = None
    ok: bool = False
    attempts: int | None = None
    status: int | None = None
    error: str | None = None

    @staticmethod
    def of(decision_id: str, *, ok: bool, attempts: int, status: int | None, error: str | None) -> DeliveryEvent:
        """What a webhook's delivery leaves in the operation's log: `notified`, or `notify_failed` with the error."""
        kind = Notified if ok else NotifyFailed
        return kind(decision_id=decision_id, ok=ok, attempts=attempts, status=status, error=error)

    def line(self, scene: Scene) -> str:
        state = "sent" if self.ok else f"FAILED ({said(self.error)})"
        return f"{scene.at} webhook for {said(self.decision_id)} {state} after {count_words(self.attempts, 'attempt')}"


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

    def line(self, scene: Scene) -> str:
        state = "done" if self.ok else "FAILED"
        return f"{scene.at} action {said(self.action)} {state}" + (f" by {self.by}" if self.by else "")
