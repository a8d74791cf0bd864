"""The worker's log: one JSON object per line on stderr, with the operation id, so a fleet's logs can be joined."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TextIO

from ..core.durations import format_rfc3339

_ENCODE = json.JSONEncoder(default=str).encode
"""`json.dumps(entry, default=str)` without making an encoder for each line."""


class JsonLog:
    """One JSON object per line on stderr, with the operation id, so a fleet's logs can be joined."""

    def __init__(self, stream: TextIO | None = None, *, worker: str) -> None:
        self.stream = stream or sys.stderr
        self.worker = worker
        self._lock = threading.Lock()
        self._held = threading.local()

    def __call__(self, event: str, **fields: Any) -> None:
        # RFC 3339 like every other time pollwarden writes (status, audit, MCP), so a log joins with them.
        entry = {"ts": format_rfc3339(datetime.now(UTC)), "worker": self.worker, "event": event, **fields}
        line = _ENCODE(entry) + "\n"
        held: list[str] | None = getattr(self._held, "lines", None)
        if held is not None:
            held.append(line)
            return
        self._write(line)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """The lines this thread logs inside are written together when it ends (each keeps its own time): a
        write and a flush per batch of polls instead of per poll. Nothing is held across batches."""
        lines: list[str] = []
        self._held.lines = lines
        try:
            yield
        finally:
            self._held.lines = None
            if lines:
                self._write("".join(lines))

    def _write(self, text: str) -> None:
        with self._lock:
            self.stream.write(text)
            self.stream.flush()


__all__ = ["JsonLog"]
