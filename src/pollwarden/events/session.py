"""An agent session's own log (@agent/<id>): the session, its watches, its calls and the grants that allow them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .base import AuditEvent, event
from .words import (
    Scene,
    principal,
    said,
)

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

    def line(self, scene: Scene) -> str:
        who = (
            f", agent {principal(self.agent)}"
            if self.agent
            else f", isolation {said(self.isolation)}"
            if self.isolation
            else ""
        )
        return (
            f"{scene.at} agent session {said(self.session)} started ({said(self.server)}), client"
            f" {said(self.client)}{who}"
        )


@event
class WatchStarted(AuditEvent):
    KIND = "watch_started"
    operation: str | None = None
    job: str | None = None
    contract: str | None = None

    def line(self, scene: Scene) -> str:
        return (
            f"{scene.at} the agent started operation {said(self.operation)} on job {said(self.job)}"
            f" ({said(self.contract)})"
        )


@event
class WatchRejoined(WatchStarted):
    """The agent asked to watch a job that already had an operation: it got that one back, never a fresh budget."""

    KIND = "watch_rejoined"

    def line(self, scene: Scene) -> str:
        return (
            f"{scene.at} the agent asked again for job {said(self.job)} and got operation {said(self.operation)} back,"
            f" budget kept"
        )


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

    def line(self, scene: Scene) -> str:
        return (
            f"{scene.at} call {said(self.call)}: {said(self.purpose)} for {said(self.operation)}"
            f" (approval {said(self.approval)},"
            f" checks {said(self.status_requests_used)}/{said(self.max_status_requests)})"
            + (f" by agent {principal(self.agent)}" if self.agent else "")
        )


@event
class CallResult(AuditEvent):
    KIND = "call_result"
    call: int | None = None
    operation: str | None = None
    outcome: str | None = None

    def line(self, scene: Scene) -> str:
        return f"{scene.at} call {said(self.call)}: {self.outcome or 'done'}"


@event
class CallDenied(AuditEvent):
    KIND = "call_denied"
    operation: str | None = None
    why: str | None = None
    grant_id: str | None = None

    def line(self, scene: Scene) -> str:
        return f"{scene.at} call for {said(self.operation)} denied: {said(self.why)}"


@dataclass(frozen=True, kw_only=True)
class GrantRequested(AuditEvent):
    """The payload is the grant's own JSON (`Grant.to_json`)."""

    grant_id: str | None = None
    kind: str | None = None
    scope: str | None = None

    @staticmethod
    def of_kind(kind: str) -> type[GrantRequested]:
        """The kind of event that asks for a grant of this kind ("session" or "call": the code makes no other)."""
        return _REQUESTED[kind]

    def line(self, scene: Scene) -> str:
        return f"{scene.at} {self.KIND.split('_')[0]} approval {said(self.grant_id)} requested for {said(self.scope)}"


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
        return _ANSWERED[status]

    def line(self, scene: Scene) -> str:
        if isinstance(self, ApprovalRefused) and self.peer:  # the broker refused a command, no grant was answered
            return (
                f"{scene.at} {said(self.command)} {said(self.subject)} refused to {principal(self.peer)}:"
                f" {said(self.why)}; nothing changed"
            )
        return f"{scene.at} approval {said(self.grant_id)} {self.KIND.removeprefix('approval_')} by {said(self.by)}"


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

    def line(self, scene: Scene) -> str:
        # In the operation's own log the payload names no operation: the log is the operation.
        operation = self.operation or scene.operation or "an operation"
        line = f"{scene.at} the agent asked for more time for {operation}"
        return f"{line}: {self.reason}" if self.reason else line


@event
class TaskCancelled(AuditEvent):
    """tasks/cancel: the server stopped waiting for the task; the operation itself was left as it was."""

    KIND = "task_cancelled"
    operation: str | None = None

    def line(self, scene: Scene) -> str:
        return (
            f"{scene.at} the agent cancelled its task on {said(self.operation)}: the server stopped waiting, the job"
            f" goes on"
        )


@event
class CancelRequested(AuditEvent):
    """An agent asked a person to cancel the job (request_cancel, tasks/cancel); it cancels nothing itself."""

    KIND = "cancel_requested"
    operation: str | None = None
    decision_id: str | None = None
    reason: str | None = None
    requested_by: str | None = None
    added: bool | None = None

    def line(self, scene: Scene) -> str:
        operation = self.operation or scene.operation or "an operation"
        line = (
            f"{scene.at} the agent asked a person to cancel the job of {operation} (decision {said(self.decision_id)})"
        )
        return f"{line}: {self.reason}" if self.reason else line


# -- the broker's own log (@broker): who connected, and what it refused them -------------------------------


@event
class BrokerStarted(AuditEvent):
    KIND = "broker_started"
    user: str | None = None
    pid: int | None = None
    agents: str | None = None
    approvers: str | None = None
    contracts: tuple[Mapping[str, Any], ...] = ()

    def line(self, scene: Scene) -> str:
        who = f"agents {said(self.agents)}, approvers {said(self.approvers)}"
        return f"{scene.at} broker started as {said(self.user)} (pid {said(self.pid)}): {who}"


@event
class ConnectionRefused(AuditEvent):
    """A connection from a user on neither list, or an agent asking for a person's command or a person for MCP."""

    KIND = "connection_refused"
    peer: Mapping[str, Any] | None = None
    mode: str | None = None
    why: str | None = None

    def line(self, scene: Scene) -> str:
        who = principal(self.peer) if self.peer else "?"
        return f"{scene.at} {said(self.mode)} connection of {who} refused: {said(self.why)}"


@event
class PersonCommand(AuditEvent):
    """An approver's command run by the broker, with the kernel's word on who asked and how it ended."""

    KIND = "person_command"
    peer: Mapping[str, Any] | None = None
    command: str | None = None
    subject: str | None = None
    exit: int | None = None

    def line(self, scene: Scene) -> str:
        who = principal(self.peer) if self.peer else "?"
        return (
            f"{scene.at} {who} ran {said(self.command)} {said(self.subject)} through the broker (exit"
            f" {said(self.exit)})"
        )
