"""Which of a person's commands the broker runs, and which of them answer a decision: the broker's rules, which the
CLI's grammar (`--connect`) and the command run for a connected person (`cli.brokered`) both follow."""

from __future__ import annotations

BROKERED = frozenset(
    {"decisions", "decide", "approvals", "approve-call", "approve-session", "revoke-session", "status", "story", "why"}
)
"""A person's commands that `--connect SOCKET` hands to `pollwarden broker`, which runs them on its home as the
connected user (only an approver's decide and approve-* are carried out)."""

DECIDES = frozenset({"decide", "approve-call", "approve-session", "revoke-session"})
"""The commands that answer a decision or a request."""

BY_PERSON = DECIDES | {"decisions"}
"""Commands with a `--by` the broker fills with the person's name: `decisions close` closes decisions in bulk."""


def decides(words: list[str]) -> bool:
    """Whether a command's words answer a decision or a request (for the broker's record; `parse` is exact)."""
    return bool(words) and (words[0] in DECIDES or (words[0] == "decisions" and "close" in words[1:]))
