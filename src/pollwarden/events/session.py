"""An agent session's own log (@agent/<id>): the session, its watches, its calls and the grants that allow them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .base import AuditEvent, event

# -- an agent session's own log (@agent/<id>) -------------------------------------------------------------


@event
class SessionStarted(AuditEvent):
    KIND = "session_started"
    session: str | None = None
    server: str | None = None
    client: Mapping[str, Any] | str | None = None
    isolation: str | None = None
    agent: Mapping[str, Any] | None = None
    """The agent's uid, user name and pid as the kernel told the broker; None in same-user mode."""


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
    agent: Mapping[str, Any] | None = None


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

    @staticmethod
    def of_kind(kind: str) -> type[GrantRequested]:
        """The kind of event that asks for a grant of this kind ("session" or "call")."""
        found = _REQUESTED.get(kind)
        if found is None:
            raise ValueError(f"no grant of kind {kind!r} is asked for")
        return found


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

    @staticmethod
    def of_status(status: str) -> type[GrantAnswered]:
        """The kind of event that moves a grant to this status ("approved", "refused", "revoked", "expired")."""
        found = _ANSWERED.get(status)
        if found is None:
            raise ValueError(f"a grant cannot become {status!r}")
        return found


@event
class ApprovalApproved(GrantAnswered):
    KIND = "approval_approved"


@event
class ApprovalRefused(GrantAnswered):
    """A person refused a grant; or, in the broker's log (with `peer`), the broker refused a person's command
    (decide, approve-call, ...) to a connection that may not give it, and nothing changed."""

    KIND = "approval_refused"
    peer: Mapping[str, Any] | None = None
    command: str | None = None
    subject: str | None = None
    why: str | None = None


@event
class ApprovalRevoked(GrantAnswered):
    KIND = "approval_revoked"


@event
class ApprovalExpired(GrantAnswered):
    KIND = "approval_expired"


_REQUESTED: dict[str, type[GrantRequested]] = {"session": SessionApprovalRequested, "call": CallApprovalRequested}
_ANSWERED: dict[str, type[GrantAnswered]] = {
    "approved": ApprovalApproved,
    "refused": ApprovalRefused,
    "revoked": ApprovalRevoked,
    "expired": ApprovalExpired,
}


@event
class ExtensionRequested(AuditEvent):
    """An agent asked a person for more; in the operation's log the operation is the log itself."""

    KIND = "extension_requested"
    operation: str | None = None
    reason: str | None = None


@event
class TaskCancelled(AuditEvent):
    """tasks/cancel: the server stopped waiting for the task; the operation itself was left as it was."""

    KIND = "task_cancelled"
    operation: str | None = None


@event
class CancelRequested(AuditEvent):
    """An agent asked a person to cancel the job (request_cancel, tasks/cancel); it cancels nothing itself."""

    KIND = "cancel_requested"
    operation: str | None = None
    decision_id: str | None = None
    reason: str | None = None
    requested_by: str | None = None
    added: bool | None = None


# -- the broker's own log (@broker): who connected, and what it refused them -------------------------------


@event
class BrokerStarted(AuditEvent):
    KIND = "broker_started"
    user: str | None = None
    pid: int | None = None
    agents: str | None = None
    approvers: str | None = None
    contracts: tuple[Mapping[str, Any], ...] = ()


@event
class ConnectionRefused(AuditEvent):
    """A connection from a user on neither list, or an agent asking for a person's command or a person for MCP."""

    KIND = "connection_refused"
    peer: Mapping[str, Any] | None = None
    mode: str | None = None
    why: str | None = None


@event
class PersonCommand(AuditEvent):
    """An approver's command run by the broker, with the kernel's word on who asked and how it ended."""

    KIND = "person_command"
    peer: Mapping[str, Any] | None = None
    command: str | None = None
    subject: str | None = None
    exit: int | None = None
