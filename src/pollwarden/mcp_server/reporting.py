"""`notifications/progress` for one tool call: one per step of the controller, and a heartbeat between steps.

Agent hosts reset their tool-call timer on each progress notification, so a long `wait_operation` stays alive
only while it reports. Every notification describes the operation through `pollwarden.report.progress.Progress` (the
one description every interface shows): progress = seconds since the operation was created, total = seconds from
creation to its deadline, message = `Progress.message`. The spec wants the value to grow with every notification,
so it is kept strictly increasing here even when two are computed within the same millisecond.

The tool body runs on a worker thread and reports its steps (`Reporter.step`); the server's event loop sends
them, and sends a heartbeat whenever the call has been quiet for `heartbeat_seconds` — while the worker sleeps
until the next check, waits for a person's approval, or waits on a slow provider alike.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

import anyio
import anyio.from_thread

from ..report.progress import Progress
from .base import HEARTBEAT_ENV, HEARTBEAT_SECONDS, MAX_WAIT_WITHOUT_PROGRESS, WAIT_WITHOUT_PROGRESS_ENV, log

STEP = 0.001
"""The smallest increase between two notifications (values are rounded to milliseconds)."""


@dataclass(frozen=True)
class Note:
    """One `notifications/progress`: its value, total and message."""

    progress: float
    total: float
    message: str


Send = Callable[[float, float, str], Awaitable[None]]
"""`send(progress, total, message)`: the SDK's `report_progress` for this request (the message already clean)."""


class Reporter:
    """The progress of one call whose caller sent a progress token.

    The worker thread reports steps (`step`); the event loop sends every note (`emit`, `heartbeats`) under one
    lock, so notes leave in the order their values were made and the values only grow on the wire."""

    def __init__(self, send: Send, clock: Callable[[], datetime], *, heartbeat_seconds: float) -> None:
        self._send = send
        self._clock = clock
        self.heartbeat_seconds = heartbeat_seconds
        self._lock = threading.Lock()
        self._sending = anyio.Lock()
        self._last: Progress | None = None
        self._value = -STEP
        self._noted_at = time.monotonic()
        self._awaiting: str | None = None

    def awaiting(self, text: str | None) -> None:
        """While set, every note says this (who is awaited and what they run) instead of the operation's state."""
        with self._lock:
            self._awaiting = text

    def step(self, progress: Progress) -> None:
        """From the worker thread, after a step of the controller (a poll, or a look that found nothing due).
        Never raises: a client that went away ends the call on its own."""
        try:
            anyio.from_thread.run(self.emit, progress)
        except Exception:
            log.debug("a progress notification could not be sent", exc_info=True)

    def prime(self, progress: Progress) -> None:
        """What heartbeats describe until the first step is reported (a first poll waiting on a person)."""
        with self._lock:
            if self._last is None:
                self._last = progress

    async def emit(self, progress: Progress | None) -> None:
        """Send the note for `progress`, or (None: a heartbeat) the last progress read at the present moment."""
        async with self._sending:
            note = self.note(progress)
            if note is not None:
                await self._send(note.progress, note.total, note.message)

    async def heartbeats(self) -> None:
        """Runs beside the tool call until cancelled: a note whenever the call has been quiet for the heartbeat,
        whatever the worker waits on (the next check, a person's approval, a slow provider)."""
        while True:
            await anyio.sleep(self.until_heartbeat())
            if self.until_heartbeat() <= 0:
                await self.emit(None)
                self._touch()  # nothing to describe yet still counts as a beat, or this loop would spin

    def note(self, progress: Progress | None) -> Note | None:
        """The next note's values, or None while there is nothing to describe yet."""
        with self._lock:
            if progress is not None:
                self._last = progress
            shown = self._last
            if shown is None:
                return None
            now = self._clock()
            value = round(max(shown.elapsed(now), self._value + STEP), 3)
            self._value = value
            self._noted_at = time.monotonic()
            message = self._awaiting if self._awaiting is not None else shown.message(now)
            return Note(value, max(shown.total(), value), message)

    def _touch(self) -> None:
        with self._lock:
            self._noted_at = max(self._noted_at, time.monotonic())

    def until_heartbeat(self) -> float:
        """Seconds until the call will have been quiet for `heartbeat_seconds` (0 when it already has)."""
        with self._lock:
            return max(0.0, self._noted_at + self.heartbeat_seconds - time.monotonic())


def timing(environ: Mapping[str, str]) -> tuple[float, float]:
    """(heartbeat seconds, wait cap without progress) from the server's environment: each may only be shortened."""
    return (
        _shorter(environ, HEARTBEAT_ENV, HEARTBEAT_SECONDS),
        _shorter(environ, WAIT_WITHOUT_PROGRESS_ENV, MAX_WAIT_WITHOUT_PROGRESS),
    )


def _shorter(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value <= default:  # NaN fails too
        log.warning("%s=%r ignored: give seconds above 0 and at most %g", name, raw[:40], default)
        return default
    return value
