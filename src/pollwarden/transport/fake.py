"""The seam for tests: `FakeTransport` answers from a function, as `httpx.MockTransport` does."""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .messages import Answer, Request

__all__ = ["FakeTransport", "Reply"]


@dataclass(frozen=True)
class Reply:
    """A scripted answer for `FakeTransport`; `body` is sent as it is (encode it yourself to test decoding)."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


class _ReplyAnswer:
    def __init__(self, reply: Reply) -> None:
        self.status = reply.status
        self.headers = tuple(reply.headers.items())
        self._body = io.BytesIO(reply.body)

    def read(self, size: int) -> bytes:
        return self._body.read(size)

    def close(self) -> None:
        self._body.close()


class FakeTransport:
    """Answers from a function, like `httpx.MockTransport`; the function may raise `WireError` to fail a request."""

    def __init__(self, handler: Callable[[Request], Reply]) -> None:
        self._handler = handler
        self.requests: list[Request] = []

    def open(self, request: Request) -> Answer:
        self.requests.append(request)
        return _ReplyAnswer(self._handler(request))

    def close(self) -> None:
        """Nothing to release."""
