"""The kinds of the store's own logs (`@audit/...`): who changed how the audit log is kept, and when. Each is
appended in the transaction that makes the change, so a verifier sees it under a signed head."""

from __future__ import annotations

from .base import AuditEvent, event
from .words import (
    Scene,
    said,
)


@event
class SigningKeyRotated(AuditEvent):
    """`pollwarden audit rotate-key`, in `@audit/keys`: heads after this one's are signed by the new key (the old
    key's signed statement is in `audit_key_rotations`)."""

    KIND = "signing_key_rotated"
    by: str | None = None
    old_key_id: str | None = None
    new_key_id: str | None = None

    def line(self, scene: Scene) -> str:
        return (
            f"{scene.at} signing key rotated by {said(self.by)}: {said(self.old_key_id)} signs this head last,"
            f" {said(self.new_key_id)} next"
        )


@event
class WitnessConfigured(AuditEvent):
    """`pollwarden audit witness DIR|URL`, in `@audit/witness`: where new heads are kept elsewhere from now on."""

    KIND = "witness_configured"
    location: str | None = None
    by: str | None = None

    def line(self, scene: Scene) -> str:
        return f"{scene.at} witness set by {said(self.by)}: new heads are kept in {said(self.location)}"


@event
class WitnessCleared(AuditEvent):
    """`pollwarden audit witness --clear`, in `@audit/witness`: no witness from now on."""

    KIND = "witness_cleared"
    by: str | None = None

    def line(self, scene: Scene) -> str:
        return f"{scene.at} witness cleared by {said(self.by)}: new heads are kept in the home only"
