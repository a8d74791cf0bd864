"""A real MCP client over stdio: `python -m pollwarden mcp` in a subprocess, driven by the SDK's ClientSession."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from mcp.client.stdio import get_default_environment
from mcp.shared.dispatcher import ProgressFnT
from mcp.types import TextContent

from mcp import ClientSession, StdioServerParameters, stdio_client
from pollwarden.home.operating import open_store
from tests.conftest import Ran, run_cli, write_contract
from tests.prefork import spawn_args

INSTRUMENTED = str(Path(__file__).resolve().parents[1] / "instrumented_cli.py")

SECRET_ENV = "PW_AGENT_TEST_TOKEN"
TOOLS = {
    "start_watch",
    "submit_job",
    "check_operation",
    "wait_operation",
    "get_decision",
    "request_extension",
    "request_cancel",
    "fetch_result",
    "list_operations",
}


def agent_contract(
    directory: Path,
    base_url: str,
    *,
    name: str = "exports",
    approval: str = "none",
    agent: str = "",
    **options: Any,
) -> Path:
    """The shared test contract, renamed, with a top-level `approval` and an optional `[agent]` table."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.toml"
    write_contract(path, base_url, extra=agent, **options)
    text = path.read_text(encoding="utf-8").replace('name = "exports"', f'name = "{name}"', 1)
    path.write_text(f'approval = "{approval}"\n' + text, encoding="utf-8")
    return path


@dataclass(frozen=True)
class Note:
    """One `notifications/progress` as the client received it, with when (monotonic seconds)."""

    at: float
    progress: float
    total: float | None
    message: str | None


@dataclass(frozen=True)
class Reply:
    ok: bool
    data: dict[str, Any]
    text: str

    @property
    def error(self) -> str | None:
        value = self.data.get("error")
        return None if self.ok or value is None else str(value)


@dataclass
class Agent:
    """What an agent does: call tools and read the replies. Every reply is kept for leak checks."""

    session: ClientSession
    replies: list[tuple[str, dict[str, Any], Reply]] = field(default_factory=list)

    async def call(self, tool: str, **arguments: Any) -> Reply:
        return await self.call_reporting(tool, None, **arguments)

    async def call_reporting(self, tool: str, notes: list[Note] | None, **arguments: Any) -> Reply:
        """A call that sends a progress token when `notes` is a list: each notification is appended to it."""

        async def keep(progress: float, total: float | None, message: str | None) -> None:
            assert notes is not None
            notes.append(Note(time.monotonic(), progress, total, message))

        callback: ProgressFnT | None = keep if notes is not None else None
        result = await self.session.call_tool(tool, arguments, progress_callback=callback)
        text = "".join(block.text for block in result.content if isinstance(block, TextContent))
        data: dict[str, Any]
        if isinstance(result.structured_content, dict):
            data = result.structured_content
        else:
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = {"text": text}
            data = parsed if isinstance(parsed, dict) else {"value": parsed}
        reply = Reply(not result.is_error, data, text)
        self.replies.append((tool, arguments, reply))
        return reply

    async def raw(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One JSON-RPC request as written, its result as received: for what the SDK client has no helper for
        (a task-augmented tools/call, whose CreateTaskResult its call_tool would refuse; tasks/*)."""
        return await self.session._dispatcher.send_raw_request(method, params, {})


@asynccontextmanager
async def mcp_agent(
    contracts: Path, home: Path, stderr: Path, *, env: dict[str, str] | None = None, instrumented: bool = False
) -> AsyncIterator[Agent]:
    """The server gets `env` (the secret); this test process never sets it in its own environment.
    `instrumented`: the server is tests/instrumented_cli.py's, with the instruments `env` asks for."""
    args = ["mcp", "--contracts", str(contracts), "--home", str(home)]
    # For a zygote that starts in the environment the SDK gives the server (its safe defaults under ours) and
    # has imported what `pollwarden mcp` imports first.
    spawn = (
        [INSTRUMENTED, *args]
        if instrumented
        else spawn_args(args, get_default_environment() | (env or {}), servers=("mcp_server",))
    )
    params = StdioServerParameters(command=sys.executable, args=spawn, env=env or {})
    with stderr.open("w", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield Agent(session)


async def cli(*args: str, home: Path) -> Ran:
    """A person at another terminal, while the agent's tool call is still waiting."""
    return await anyio.to_thread.run_sync(lambda: run_cli(*args, home=home))


async def pending_grant(home: Path, *, kind: str, scope: str | None = None, timeout: float = 60.0) -> dict[str, Any]:
    """Wait until the store holds the pending grant an agent's call is waiting on (read directly: fast)."""
    with anyio.fail_after(timeout):
        while True:
            store = open_store(home, keys="none")
            try:
                grants = store.grants(kind=kind, status="pending")
            finally:
                store.close()
            for grant in grants:
                if scope is None or grant.scope == scope:
                    return grant.to_json()
            await anyio.sleep(0.05)


def run(body: Callable[[], Awaitable[None]]) -> None:
    """Run an async test body on asyncio (the SDK's stdio client spawns the server from there)."""
    anyio.run(body)
