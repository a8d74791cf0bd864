"""What every part of the MCP server shares: its limits, the error an agent gets, and the per-call context."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import PollwardenError

log = logging.getLogger("pollwarden.mcp")

MAX_WAIT_SECONDS = 300
"""The hard cap of one `wait_operation`: long enough to save an agent many turns, short enough for any client."""

RESULT_TEXT_CAP = 64 * 1024
"""Characters of a fetched result returned to the agent; the sha256 and byte count cover the whole body."""

APPROVAL_POLL_SECONDS = 0.2
MAX_EXTENSION_MINUTES = 24 * 60
MAX_EXTENSION_CHECKS = 1000
MAX_REASON_CHARS = 500
MAX_JOB_ID_CHARS = 512

T = TypeVar("T")


class ToolFailure(PollwardenError):
    """A reply the agent gets as an error: a machine code, a sentence, and what to do next."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra

    def to_json(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.extra}


def clean_text(text: str, limit: int) -> str:
    return "".join(ch if ch.isprintable() else " " for ch in text)[:limit].strip()


@dataclass
class CallContext:
    """Per tool call: who is calling (for the session log) and whether the caller went away."""

    cancelled: threading.Event
    notify: Callable[[str], None] | None = None
