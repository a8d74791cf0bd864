"""What a transport is asked and what it answers: the `Request`, the `Answer` seam and the `Transport` seam, the
`WireError` every failure on the wire becomes, and the caps every path keeps (`http11`, `wire`, `wire_select`)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Protocol

from ..core.observe import FailureKind
from ..errors import EXIT_ESCALATED, PollwardenError
from .resolve import AddressGuard

__all__ = [
    "MAX_HEADERS",
    "MAX_HEADER_BYTES",
    "MAX_LINE",
    "READ_CHUNK",
    "Answer",
    "Request",
    "Transport",
    "WireError",
]

MAX_HEADERS = 100
"""`http.client` refuses a 101st line after the status line with HTTPException, counting the blank line that
ends the head: an answer may carry 99 headers. `wire_select` counts the same way."""

MAX_HEADER_BYTES = 64 * 1024
MAX_LINE = 65536
"""The longest status, header, chunk-size or trailer line, as `http.client` allows."""
READ_CHUNK = 64 * 1024


class WireError(PollwardenError):
    """A failure already classified: `kind` says whether the request may have reached the provider.

    Caught inside the client (it becomes a `TransportFailure`);
    it is about the provider's answer, so its exit code is a stop's (4)."""

    exit_code = EXIT_ESCALATED

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class Request:
    """What a transport is asked to send; `deadline` is the `time.monotonic()` by which the last byte is in."""

    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None
    deadline: float
    reuse: bool = False
    """May go over a kept-alive connection (status polls only: a read whose repetition costs one counted poll).
    Anything else (a submission, a cancel, a download) always gets a fresh connection and `Connection: close`,
    so a failure before its answer can be a clear "not sent" (connect) rather than a delivery-unknown one."""
    body_cap: int | None = None
    """The most body bytes the reader will keep: a transport that reads the whole answer before handing it back
    (`wire_select`) stops one byte past it, which the reader takes for a body over its cap."""
    guard: AddressGuard | None = None
    """Which addresses the request may connect to (a result download): None for the contract's own requests."""
    trust: ssl.SSLContext | None = None
    """What verifies an https peer: the contract's own CA bundle for its origin ([tls] ca_file,
    `pollwarden.transport.trust`), None for the system's store."""


class Answer(Protocol):
    """The head of an answer and its raw (still content-encoded) body; `read` returns b"" at the end."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> tuple[tuple[str, str], ...]: ...

    def read(self, size: int) -> bytes: ...

    def close(self) -> None: ...


class Transport(Protocol):
    """Sends one request; raises `WireError` for anything that is not an answer."""

    def open(self, request: Request) -> Answer: ...

    def close(self) -> None: ...
