"""The wire side of the agents measure: `pollwarden mcp` over stdio with the SDK's ClientSession, every JSON-RPC
message in both directions recorded with its time, and the figures a transcript gives (silences, requests).

The recorder sits between the SDK's stdio transport and its ClientSession (two pumps over in-memory streams), so
it records every message that crossed the pipe, as the transport parsed it, whichever helper (call_tool, a raw
request) sent it.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
from mcp.client.stdio import get_default_environment
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter

from mcp import ClientSession, StdioServerParameters, stdio_client

SENT, RECEIVED = "client->server", "server->client"
SDK_OWN = frozenset({"initialize", "tools/list"})


@dataclass(frozen=True)
class Message:
    """One JSON-RPC message as it crossed the pipe, `at` seconds after the session began."""

    at: float
    direction: str
    body: dict[str, Any]

    @property
    def kind(self) -> str:
        if "method" in self.body:
            return "request" if "id" in self.body else "notification"
        return "response" if "result" in self.body else "error"

    @property
    def method(self) -> str | None:
        method = self.body.get("method")
        return method if isinstance(method, str) else None

    def to_json(self) -> dict[str, Any]:
        return {"t": round(self.at, 3), "dir": self.direction, "kind": self.kind, "message": self.body}


@dataclass
class Recorder:
    began: float = field(default_factory=time.monotonic)
    messages: list[Message] = field(default_factory=list)

    def note(self, direction: str, message: object) -> None:
        if not isinstance(message, SessionMessage):  # the transport hands exceptions up the read stream
            body: dict[str, Any] = {"transport_error": type(message).__name__}
        else:
            body = jsonrpc_message_adapter.dump_python(message.message, mode="json", by_alias=True, exclude_none=True)
        self.messages.append(Message(time.monotonic() - self.began, direction, body))

    def now(self) -> float:
        return time.monotonic() - self.began

    def last_from_server(self) -> float:
        return max((m.at for m in self.messages if m.direction == RECEIVED), default=0.0)

    def requests(self, since: float = 0.0) -> list[Message]:
        """What the client asked, but `initialize` and `tools/list`: the SDK's ClientSession makes those once a
        session by itself (it lists the tools to validate the first call's result), whatever the host does."""
        return [
            m
            for m in self.messages
            if m.direction == SENT and m.kind == "request" and m.at >= since and m.method not in SDK_OWN
        ]

    def exchange(self, request: Message) -> list[Message]:
        """The request, every server message until its answer (one call at a time per host), and the answer."""
        seen = [request]
        for message in self.messages:
            if message.at < request.at or message.direction != RECEIVED:
                continue
            seen.append(message)
            if message.kind in ("response", "error") and message.body.get("id") == request.body.get("id"):
                break
        return seen

    def longest_silence(self, since: float = 0.0) -> tuple[float, str]:
        """The longest time inside one request without any message from the server, and which request."""
        longest, which = 0.0, ""
        for request in self.requests(since):
            times = [m.at for m in self.exchange(request)]
            gap = max((b - a for a, b in itertools.pairwise(times)), default=0.0)
            if gap > longest:
                longest, which = gap, _label(request)
        return longest, which

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as out:
            for message in self.messages:
                out.write(json.dumps(message.to_json(), sort_keys=True) + "\n")


def _label(request: Message) -> str:
    params = request.body.get("params")
    name = params.get("name") if isinstance(params, Mapping) else None
    return f"{request.method} {name}" if name else str(request.method)


T = TypeVar("T")

Spawn = Callable[[list[str], dict[str, str]], list[str]]
"""The interpreter's arguments that run `pollwarden ARGS` in an environment: `-m pollwarden ARGS` by default; the
smoke test passes tests/prefork.py's, whose server is forked from an interpreter that has already imported it."""


def fresh(args: list[str], env: dict[str, str]) -> list[str]:
    return ["-m", "pollwarden", *args]


async def _pump(source: ReadStream[T], sink: WriteStream[T], recorder: Recorder, direction: str) -> None:
    async with sink:
        async for message in source:
            recorder.note(direction, message)
            await sink.send(message)


@asynccontextmanager
async def recorded_session(
    contracts: Path, home: Path, stderr: Path, *, env: Mapping[str, str], spawn: Spawn = fresh
) -> AsyncIterator[tuple[ClientSession, Recorder]]:
    """`python -m pollwarden mcp` in a subprocess (with `env` added to the SDK's safe defaults), initialized."""
    environment = get_default_environment() | dict(env)
    args = spawn(["mcp", "--contracts", str(contracts), "--home", str(home)], environment)
    params = StdioServerParameters(command=sys.executable, args=args, env=environment)
    recorder = Recorder()
    with stderr.open("w", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), anyio.create_task_group() as pumps:
            to_session, session_reads = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            session_writes, from_session = anyio.create_memory_object_stream[SessionMessage](0)
            pumps.start_soon(_pump, read, to_session, recorder, RECEIVED)
            pumps.start_soon(_pump, from_session, write, recorder, SENT)
            async with ClientSession(session_reads, session_writes) as session:
                recorder.began = time.monotonic()
                await session.initialize()
                yield session, recorder
            pumps.cancel_scope.cancel()


async def raw(session: ClientSession, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """One JSON-RPC request as written (a task-augmented tools/call, tasks/*: the SDK client has no helper)."""
    return await session._dispatcher.send_raw_request(method, params, {})
