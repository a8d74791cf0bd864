"""The stdio wire: the SDK's transport, with a stdin that answers every line the SDK would drop.

The SDK's own reader turns a line it cannot validate into an exception on its read stream, which the session
drops: the request behind it (a lone surrogate in an argument, a cut-off line) then waits forever. Here every
line is checked first, in the worker thread that reads it; a bad one is answered at once with a JSON-RPC error
(-32700 parse error, -32600 invalid request) carrying the request's id when it can be read, `null` otherwise, and
only lines the SDK will accept reach it. Invalid UTF-8 is refused rather than served with U+FFFD in it: an
argument changed in transit is not the one the agent sent.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any, BinaryIO

import anyio
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError, jsonrpc_message_adapter
from pydantic import ValidationError

from .base import log
from .tasks import IDENTIFIER, legacy_tasks_capability

Send = Callable[[SessionMessage], Coroutine[Any, Any, None]]

_NOT_JSON = (
    "parse error: the line is not JSON text in UTF-8 (a lone surrogate such as \\ud800 is not a Unicode character,"
    " and neither is an invalid byte); nothing was done. Send the request again as valid JSON"
)
_NOT_A_REQUEST = (
    "invalid request: the line is JSON but not a JSON-RPC 2.0 message this server reads; nothing was done. Send a"
    ' request object with "jsonrpc": "2.0", an id, a method and its params'
)


_UNPARSED = {"json_invalid", "string_unicode"}
"""Errors about the text itself (not JSON, or a lone surrogate in it), not about the message it spells."""


def refusal(raw: bytes) -> JSONRPCError | None:
    """The answer to a line the SDK would drop, or None when the SDK will read it."""
    try:
        text = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return _error(PARSE_ERROR, _NOT_JSON, raw.decode("utf-8", "replace"))
    try:
        jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValidationError as exc:
        unparsed = any(e["type"] in _UNPARSED for e in exc.errors(include_url=False, include_input=False))
        return _error(PARSE_ERROR if unparsed else INVALID_REQUEST, _NOT_JSON if unparsed else _NOT_A_REQUEST, text)
    except Exception:  # a lone surrogate can fail before validation proper (encoding the text for the parser)
        return _error(PARSE_ERROR, _NOT_JSON, text)
    return None


def _error(code: int, message: str, text: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=_request_id(text), error=ErrorData(code=code, message=message))


def _request_id(text: str) -> int | str | None:
    """The id of a request, read leniently (Python's parser takes a lone surrogate); None when it cannot be read,
    as JSON-RPC asks. An id that UTF-8 cannot carry would break the writer, so it is not read either."""
    try:
        message: Any = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or "method" not in message:
        return None  # a notification or a response has no request waiting for this answer
    value = message.get("id")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return None
        return value
    return None


class _Unowned(io.TextIOWrapper):
    """stdin's buffer is not this wrapper's to close (the SDK's own wrapper detaches likewise)."""

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.detach()


class AnsweringStdin(anyio.AsyncFile[str]):
    """The stdin the SDK's reader iterates, over stdin's bytes: each line is read and checked on a worker thread,
    a bad one answered through the SDK's own write stream (which keeps every frame on stdout whole)."""

    def __init__(self, source: BinaryIO) -> None:
        super().__init__(_Unowned(source, encoding="utf-8", errors="surrogatepass"))
        self._source = source
        self._send: Send | None = None
        self._ready = anyio.Event()

    def answer_with(self, send: Send | None) -> None:
        """Where refusals go; None when the server is going away and a refusal has nowhere to go."""
        self._send = send
        self._ready.set()

    async def readline(self) -> str:
        while True:
            raw, answer = await anyio.to_thread.run_sync(self._checked_line)
            if answer is None:
                # b"" at the end of input, when the client went away. A line the check took is UTF-8; "replace" only
                # keeps a surprise from ending the SDK's reader, and so the server.
                return raw.decode("utf-8", "replace")
            log.warning("refused a line that is not a JSON-RPC message (code %s)", answer.error.code)
            await self._ready.wait()
            if self._send is None:
                return ""
            try:
                await self._send(SessionMessage(answer))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return ""  # the writer is gone, so is the session

    def _checked_line(self) -> tuple[bytes, JSONRPCError | None]:
        while True:
            raw = self._source.readline()
            if raw and not raw.strip():
                continue  # no request on a blank line, so nothing to answer
            return raw, refusal(raw) if raw else None


async def run_stdio(server: MCPServer[Any]) -> None:
    """`MCPServer.run_stdio_async` with our stdin; stdout stays the SDK's (claimed and diverted while serving)."""
    await run_streams(server, sys.stdin.buffer, None)


async def run_streams(server: MCPServer[Any], source: BinaryIO, sink: BinaryIO | None) -> None:
    """One MCP session over `source` (lines in) and `sink` (lines out; None: the process's stdout, which the SDK
    claims): the stdio server's, and the broker's over each agent's socket connection."""
    stdin = AnsweringStdin(source)
    stdout = None if sink is None else anyio.wrap_file(_Unowned(sink, encoding="utf-8", write_through=True))
    try:
        async with stdio_server(stdin=stdin, stdout=stdout) as (read_stream, write_stream):
            stdin.answer_with(write_stream.send)
            # The SDK's own stdio runner reads this attribute too; MCPServer has no public accessor for it.
            lowlevel = server._lowlevel_server
            options = lowlevel.create_initialization_options()
            if IDENTIFIER in (options.capabilities.extensions or {}):  # tasks.py: what a 2025-11-25 wire keeps
                options.capabilities.tasks = legacy_tasks_capability()
            await lowlevel.run(read_stream, write_stream, options)
    finally:
        stdin.answer_with(None)
