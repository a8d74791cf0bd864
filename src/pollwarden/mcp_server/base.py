"""What every part of the MCP server shares: its limits, the error an agent gets, and the per-call context."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from ..engine.changes import ChangeRefused, TakenOver
from ..errors import PollwardenError
from ..events.base import NewEvent
from ..report.progress import Progress
from ..store.roles import AuditLog

log = logging.getLogger("pollwarden.mcp")

MAX_WAIT_SECONDS = 300
"""The hard cap of one `wait_operation` that reports progress: long enough to save an agent many turns."""

MAX_WAIT_WITHOUT_PROGRESS = 45.0
"""The cap of a `wait_operation` whose caller sent no progress token: agent hosts cut off a silent tool call at
about 60 s (they reset that timer on `notifications/progress` only), so such a wait answers well before."""

HEARTBEAT_SECONDS = 10.0
"""The longest silence between two progress notifications of one call, kept below the 15 s hosts tolerate."""

HEARTBEAT_ENV = "POLLWARDEN_MCP_HEARTBEAT_SECONDS"
ANSWER_MARGIN_SECONDS = 5.0
"""What a wait without progress may take beyond its cap to finish what it started: it answers within 50 s."""

WAIT_WITHOUT_PROGRESS_ENV = "POLLWARDEN_MCP_WAIT_WITHOUT_PROGRESS_SECONDS"
"""Overrides of the two constants above, read from the server's environment when it starts (tests shorten them;
values above the constants are refused, so an override can only make the server answer sooner)."""

RESULT_TEXT_CAP = 64 * 1024
"""Characters of a fetched result returned to the agent; the sha256 and byte count cover the whole body."""

APPROVAL_POLL_SECONDS = 0.2
MAX_EXTENSION_MINUTES = 24 * 60
MAX_EXTENSION_CHECKS = 1000
MAX_REASON_CHARS = 500
MAX_BODY_CHARS = 64 * 1024
"""The largest `submit_job` body, as compact JSON: a job's parameters, not its data."""
MAX_ARGUMENT_CHARS = 4096

UNREADABLE_TO_AGENT = (
    "its record in the state store cannot be read, so no worker polls it and nothing can be done with it; a person"
    " must repair it (`pollwarden status` names it, and why). Nothing was sent"
)
"""What an agent is told of an operation whose row cannot be decoded: the row's own text is nobody's to hand on."""
"""Any string argument longer than this is refused before a tool sees it: none needs more (a job id is at most 512
characters, a reason is kept to 500), and a huge one must never be walked, logged or audited."""

T = TypeVar("T")


class Peer(Protocol):
    """What a request's context says about the client: the SDK's `Context` and `ServerRequestContext` both."""

    @property
    def session(self) -> Any: ...

    @property
    def protocol_version(self) -> str | None: ...


def client_of(ctx: Peer) -> dict[str, Any] | None:
    """The client's name and version and the protocol, for the session's first audit record; None if unknown."""
    try:
        params = ctx.session.client_params
        info = params.client_info.model_dump(mode="json", exclude_none=True) if params is not None else None
        return {"info": info, "protocol_version": ctx.protocol_version}
    except Exception:
        return None


class ToolFailure(PollwardenError):
    """A reply the agent gets as an error: a machine code, a sentence, and what to do next."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra

    def to_json(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.extra}


def busy(exc: ChangeRefused) -> ToolFailure:
    """An operation change the engine could not make (`engine.changes`: held elsewhere, or taken over), in the
    agent's words: nothing was written, and trying again shortly may work."""
    if isinstance(exc, TakenOver):
        return ToolFailure("busy", f"operation {exc.operation_id} was taken over; try again shortly")
    return ToolFailure("busy", f"operation {exc.operation_id} is busy in another process; try again shortly")


def clean_text(text: str, limit: int) -> str:
    # Cut first: the mapping keeps length, so the output is the same and a huge text is never walked.
    return "".join(ch if ch.isprintable() else " " for ch in text[:limit]).strip()


def check_arguments(arguments: Mapping[str, object]) -> None:
    """The bounds every argument of every tool keeps, checked before the tool runs and before anything is audited."""
    for name, value in arguments.items():
        if isinstance(value, str) and len(value) > MAX_ARGUMENT_CHARS:
            raise ToolFailure(
                "invalid_argument",
                f"{name} is {len(value)} characters long; at most {MAX_ARGUMENT_CHARS} are accepted. Nothing was done",
            )
        if isinstance(value, float) and math.isnan(value):
            raise ToolFailure("invalid_argument", f"{name} is NaN, which is not a number; nothing was done")


class ProgressSink(Protocol):
    """Where a call's progress goes when its caller sent a progress token (`reporting.Reporter`)."""

    def step(self, progress: Progress) -> None: ...

    def prime(self, progress: Progress) -> None: ...

    def awaiting(self, text: str | None) -> None: ...


@dataclass
class CallContext:
    """Per tool call: who is calling (for the session log), whether the caller went away, and how to tell it."""

    cancelled: threading.Event
    notify: Callable[[str], None] | None = None
    progress: ProgressSink | None = None
    """Set when the caller sent a progress token: every controller step is reported to it (`Broker.advance`)."""
    answer_by: float | None = None
    """A `time.monotonic()` the call must answer by (a wait without progress): no poll whose request could run
    past it is started, and no approval is waited for within ANSWER_MARGIN_SECONDS of it, the time the approved poll
    has (the grant stays open for the next call)."""
    polls_started: int = 0
    """Polls this call has begun (approved or not): only a later one is held back for `answer_by`."""


def recorded_after(store: AuditLog, log_id: str, event: NewEvent, now: datetime, what: str) -> None:
    """The session's record of what already happened (committed in the operation's log, or sent): one that cannot
    be written is logged for the operator (`what` names it), never turned into the call's failure or a second
    call."""
    try:
        store.append(log_id, event, now)
    except Exception:
        log.exception("the session record of %s could not be written", what)
