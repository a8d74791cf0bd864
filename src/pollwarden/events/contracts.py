"""An installed contract version's own log (@contract/<digest>): who installed it, and what it may do."""

from __future__ import annotations

from .base import AuditEvent, event
from .words import (
    Scene,
    said,
)


@event
class ContractInstalled(AuditEvent):
    """An operator installed a contract version: from then on workers and resumes may run operations that carry
    exactly this text. What it does with a credential is recorded as words (never a value)."""

    KIND = "contract_installed"
    name: str | None = None
    digest: str | None = None
    by: str | None = None
    """The person (or the interface acting for the home's owner: a watch, the Python API, an MCP server)."""
    via: str | None = None
    """How: "pollwarden contracts install", "watch --contract", "python api", "mcp server", ..."""
    source: str | None = None
    """What the installer named: a file's path or a shipped contract's name."""
    origin: str | None = None
    """Where its status requests, and any credential, go."""
    account: str | None = None
    """The credential context in words: which variable or command, sent how (`Contract.account`)."""

    def line(self, scene: Scene) -> str:
        return (
            f"{scene.at} {said(self.by)} installed contract {said(self.name)} version {said(self.digest)[:12]}"
            f" ({said(self.via)}, from"
            f" {said(self.source)}): its requests and credential ({said(self.account)}) go to {said(self.origin)}"
        )


@event
class ContractRefused(AuditEvent):
    """On an operation's log: something was asked to run it (a decision's cancel, a fetch, a resume) and refused,
    because the contract it carries is not an installed version. Nothing of that contract was used."""

    KIND = "contract_refused"
    digest: str | None = None
    by: str | None = None
    """What refused it: "decide", "fetch-result", "cancel", "console", ..."""

    def line(self, scene: Scene) -> str:
        return (
            f"{scene.at} {said(self.by)} refused to run this operation: its contract"
            f" (version {said(self.digest)[:12]}) is not"
            " installed; nothing of it was used"
        )
