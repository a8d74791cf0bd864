"""The MCP layer: the SDK's `MCPServer` with the agent tools over one `Broker`, and `serve` on stdio."""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
import warnings
import weakref
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from .. import __version__
from ..core.scrub import Scrubber
from ..home.outbox import delivering_home
from .arguments import UnknownArgument, arguments_middleware
from .base import (
    ANSWER_MARGIN_SECONDS,
    HEARTBEAT_SECONDS,
    MAX_BODY_CHARS,
    MAX_WAIT_SECONDS,
    MAX_WAIT_WITHOUT_PROGRESS,
    CallContext,
    client_of,
    log,
)
from .broker import Broker
from .contracts import load_contracts
from .reporting import Reporter
from .scrub import ScrubLogs
from .tasks import Tasks, TasksExtension, task_middleware, tool_result
from .wire import run_stdio, run_streams

INSTRUCTIONS = """\
pollwarden waits on external jobs for you, within limits a person set. Start with start_watch(contract, job_id),
or submit_job(contract, body) to submit one as the contract documents and watch it (the same body twice is one
job), then call wait_operation(operation_id, max_wait_seconds) to wait here instead of looping: up to 300 s per
call when you send a progress token (the server reports progress at least every 10 s), else up to 45 s, after
which calling again is free until the next check is due. check_operation never sends a request before then.
When waiting stops, only a person can grant more: request_extension asks them, get_decision shows their answer.
To have a job cancelled, request_cancel asks a person (you never cancel yourself; the watch goes on until they
decide). fetch_result works only after a validated success, or on the finished part a job that ended left (a
stop with "partial": true says what part in "counts"). You never handle credentials: contracts are named
by `name` and the server makes every provider call.
"""


OperationId = Annotated[str, Field(description="an operation id returned by start_watch or list_operations")]
"""Tool argument types live at module level: the SDK evaluates the (string) annotations in this namespace."""


def build_server(broker: Broker) -> MCPServer[Any]:
    """The SDK's high-level `MCPServer` with the agent tools; every reply is a scrubbed JSON object."""
    tasks = Tasks(broker)  # tasks.py: task-augmented calls, watched by the server

    def validate(tool: str, arguments: dict[str, Any]) -> None:
        # The SDK's own model of the tool's parameters (what it would check next), so the two never disagree.
        registered = server._tool_manager.get_tool(tool)
        if registered is None:
            return
        unknown = sorted(set(arguments) - set(registered.parameters.get("properties", {})))
        if unknown:  # the SDK would drop it unsaid: an agent that thinks it chose a url or a header learns it did not
            raise UnknownArgument(tool, unknown[0])
        registered.fn_metadata.validate_arguments(arguments)

    async def scrub_everything(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """The protocol boundary: nothing leaves, reply or error, with a configured secret in it."""
        try:
            result = await call_next(ctx)
        except MCPError as exc:
            scrubber = broker.scrubber  # after the call: a token it read is one of the secrets now
            if scrubber.found_in(exc.error.message) or scrubber.found_in(json.dumps(exc.error.data, default=str)):
                raise MCPError(exc.error.code, scrubber.text(exc.error.message)) from None
            raise
        scrubber = broker.scrubber
        if result is None or not scrubber:
            return result
        dumped = result.model_dump(mode="json", by_alias=True) if isinstance(result, BaseModel) else dict(result)
        if not scrubber.found_in(json.dumps(dumped)):
            return result
        cleaned: dict[str, Any] = scrubber.value(dumped)
        return cleaned

    server: MCPServer[Any] = MCPServer(
        "pollwarden",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
        middleware=[scrub_everything, arguments_middleware(validate, tool_result), task_middleware(tasks)],
        extensions=[TasksExtension(tasks)],
    )
    owner = weakref.ref(broker)

    def current() -> Scrubber | None:  # asked at each log line: the tokens read so far, until the session ends
        held = owner()
        return None if held is None else held.scrubber

    for handler in logging.getLogger().handlers:
        filters = [f for f in handler.filters if isinstance(f, ScrubLogs)]
        if filters:  # a broker process builds one server a session: each session's secrets join the one filter
            filters[0].add(current)
        else:
            handler.addFilter(ScrubLogs(current))

    async def run(ctx: Context, tool: str, **arguments: Any) -> CallToolResult:
        cancelled = threading.Event()

        def notify(message: str) -> None:
            anyio.from_thread.run(ctx.info, broker.scrubber.text(message))

        reporter = _reporter(ctx, broker)
        # A call that reports no progress answers before its host would cut it, whatever it waits on (a person's
        # approval above all): what it could not finish is said in its answer, and calling again is free.
        answer_by = (
            None if reporter is not None else time.monotonic() + broker.wait_without_progress + ANSWER_MARGIN_SECONDS
        )
        call = CallContext(cancelled=cancelled, notify=notify, progress=reporter, answer_by=answer_by)
        try:
            async with anyio.create_task_group() as heartbeats:
                if reporter is not None:
                    heartbeats.start_soon(reporter.heartbeats)
                try:
                    ok, payload = await anyio.to_thread.run_sync(
                        functools.partial(broker.dispatch, tool, call, client_of(ctx), **arguments),
                        abandon_on_cancel=True,
                    )
                finally:
                    heartbeats.cancel_scope.cancel()
        except BaseException:
            cancelled.set()  # the worker thread sees it and expires any pending approval
            raise
        text = json.dumps(payload, indent=2, sort_keys=True)
        return CallToolResult(
            content=[TextContent(type="text", text=text)], structured_content=payload, is_error=not ok
        )

    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
    polls = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=False, open_world_hint=True)

    @server.tool(
        name="start_watch",
        annotations=ToolAnnotations(destructive_hint=False, open_world_hint=False),
        description="Create a bounded watch on a provider job (no provider request yet). The contract, named by its"
        " `name`, fixes the status URL and credential; deadline and max_requests may only be lower than the"
        " contract allows for agents. Returns the operation id, deadline, budget and when to look again.",
    )
    async def start_watch(
        contract: Annotated[str, Field(description="the contract's name, as list_operations shows")],
        ctx: Context,
        job_id: Annotated[
            str | None, Field(description="the provider's job id (required unless status_url is given)")
        ] = None,
        deadline: Annotated[
            str | float | None,
            Field(description="a duration like '10m' or '90s' (a number is seconds); default: the most allowed"),
        ] = None,
        max_requests: Annotated[
            int | None, Field(description="status request budget; default: the most allowed")
        ] = None,
        status_url: Annotated[
            str | None,
            Field(
                description="the status URL the provider returned (Azure Operation-Location), for a contract"
                " that accepts one; only on the contract's origin"
            ),
        ] = None,
        lag_target: Annotated[
            str | float | None,
            Field(
                description="how late, at the 95th percentile, learning that the job ended may be (a duration"
                " like '30s', a number is seconds): the contract's learnt schedule keeps it; default: the contract's"
            ),
        ] = None,
    ) -> CallToolResult:
        return await run(
            ctx,
            "start_watch",
            contract=contract,
            job_id=job_id,
            deadline=deadline,
            max_requests=max_requests,
            status_url=status_url,
            lag_target=lag_target,
        )

    @server.tool(
        name="submit_job",
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True, open_world_hint=True),
        description="Submit a job as the contract's [submit] documents (one provider request, gated like any"
        " other), then watch it: the reply is start_watch's, plus the submission's facts. The same body again"
        " finds the same operation and sends nothing. body is a JSON object of the request's fields; the"
        " credential is the server's, never yours.",
    )
    async def submit_job(
        contract: Annotated[str, Field(description="the contract's name, as list_operations shows")],
        body: Annotated[
            object,
            Field(
                description=f"the request body: a JSON object, at most {MAX_BODY_CHARS} characters as JSON",
                json_schema_extra={"type": "object"},
            ),
        ],
        ctx: Context,
        deadline: Annotated[
            str | float | None,
            Field(description="how long to watch the job, like '10m' (a number is seconds); default: the most allowed"),
        ] = None,
        max_requests: Annotated[
            int | None, Field(description="status request budget; default: the most allowed")
        ] = None,
    ) -> CallToolResult:
        return await run(ctx, "submit_job", contract=contract, body=body, deadline=deadline, max_requests=max_requests)

    @server.tool(
        name="check_operation",
        annotations=polls,
        description="Look at an operation once. If the next check is not due, answers 'not_yet' with"
        " retry_after_seconds and sends NO provider request; if due, performs exactly one check (one status request).",
    )
    async def check_operation(operation_id: OperationId, ctx: Context) -> CallToolResult:
        return await run(ctx, "check_operation", operation_id=operation_id)

    @server.tool(
        name="wait_operation",
        annotations=polls,
        description="Wait here, server-side, until the operation succeeds, stops for a decision, or"
        f" max_wait_seconds pass: at most {MAX_WAIT_SECONDS} with a progress token (progress is reported at least"
        f" every {HEARTBEAT_SECONDS:g} s), at most {MAX_WAIT_WITHOUT_PROGRESS:g} without one. Polls only when due."
        " Use this instead of a loop.",
    )
    async def wait_operation(
        operation_id: OperationId,
        max_wait_seconds: Annotated[float, Field(description=f"seconds to wait, capped at {MAX_WAIT_SECONDS}")],
        ctx: Context,
    ) -> CallToolResult:
        return await run(ctx, "wait_operation", operation_id=operation_id, max_wait_seconds=max_wait_seconds)

    @server.tool(
        name="get_decision",
        annotations=read_only,
        description="The open decision request of a stopped operation (options a person may choose) and past ones.",
    )
    async def get_decision(operation_id: OperationId, ctx: Context) -> CallToolResult:
        return await run(ctx, "get_decision", operation_id=operation_id)

    @server.tool(
        name="request_extension",
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True, open_world_hint=False),
        description="Ask a person for more waiting after a stop: extra minutes and extra status checks, with a"
        " reason. Creates a decision request; only a person can grant it (pollwarden decide or the console).",
    )
    async def request_extension(
        operation_id: OperationId,
        minutes: Annotated[int, Field(description="extra minutes of waiting")],
        checks: Annotated[int, Field(description="extra checks (status requests)")],
        reason: Annotated[str, Field(description="why more waiting is worth it, for the person deciding")],
        ctx: Context,
    ) -> CallToolResult:
        return await run(
            ctx, "request_extension", operation_id=operation_id, minutes=minutes, checks=checks, reason=reason
        )

    @server.tool(
        name="request_cancel",
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True, open_world_hint=False),
        description="Ask a person to cancel the job at the provider, with a reason. Creates (or returns the open)"
        " decision request; nothing is cancelled until a person chooses to (pollwarden decide or the console), and"
        " a running operation keeps polling within its limits until then.",
    )
    async def request_cancel(
        operation_id: OperationId,
        reason: Annotated[str, Field(description="why the job should be cancelled, for the person deciding")],
        ctx: Context,
    ) -> CallToolResult:
        return await run(ctx, "request_cancel", operation_id=operation_id, reason=reason)

    @server.tool(
        name="fetch_result",
        annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=True),
        description="Retrieve the job's result, only after a validated success or from a stop that kept the finished"
        " part of the job (partial, with the provider's counts): the body as text (capped) and the sha256 of the"
        " whole body.",
    )
    async def fetch_result_tool(operation_id: OperationId, ctx: Context) -> CallToolResult:
        return await run(ctx, "fetch_result", operation_id=operation_id)

    @server.tool(
        name="list_operations",
        annotations=read_only,
        description="The contracts served here (by name, with their agent limits and approval mode) and the"
        " operations on them.",
    )
    async def list_operations(ctx: Context) -> CallToolResult:
        return await run(ctx, "list_operations")

    return server


def _progress_token(ctx: Context) -> str | int | None:
    meta = ctx.request_context.meta
    token = meta.get("progress_token") if meta else None
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


def _reporter(ctx: Context, broker: Broker) -> Reporter | None:
    """Progress for a call that sent a progress token (`_meta.progressToken`); None for one that did not."""
    if _progress_token(ctx) is None:
        return None

    async def send(progress: float, total: float, message: str) -> None:
        await ctx.report_progress(progress, total, broker.scrubber.text(message))

    return Reporter(send, broker.clock, heartbeat_seconds=broker.heartbeat_seconds)


def serve(contracts_dir: Path, home: Path) -> int:
    """Run the stdio server until the client goes away. Returns an exit code; stdout belongs to MCP."""
    # The wait notice is an MCP log message: deprecated as of spec 2026-07-28, still shown by many clients, and
    # best effort here. The SDK's deprecation warning would only add noise to the operator's stderr.
    warnings.filterwarnings("ignore", category=MCPDeprecationWarning)
    contracts, problems = load_contracts(contracts_dir)
    broker = Broker(contracts, home, problems=problems)
    server = build_server(broker)
    log.setLevel(logging.INFO)
    for problem in problems:
        log.warning("contract not served: %s", problem)
    log.info(
        "pollwarden mcp: session %s serving %s from %s, state in %s",
        broker.session_id,
        ", ".join(f"{n} (approval {c.approval})" for n, c in sorted(contracts.items())) or "no contracts",
        contracts_dir,
        home,
    )
    # Said once at start, where the person who started it reads it; list_operations tells the agent the same.
    log.warning(
        "isolation: %s. To keep the credential and approvals from the agent, run `pollwarden broker` under a user"
        " of its own and start the agent with `pollwarden mcp --connect SOCKET` (docs/agents.md)",
        broker.isolation,
    )
    try:
        # The webhooks of the decisions its agents' calls open, and the witness's heads, go out from the outbox.
        with delivering_home(home, "mcp", environ=broker.environ):
            anyio.run(run_stdio, server)
    finally:
        broker.stopping.set()
    return 0


def serve_connection(broker: Broker, source: BinaryIO, sink: BinaryIO) -> None:
    """One agent's MCP session over a broker connection, in this thread, until the agent goes away."""
    server = build_server(broker)
    try:
        anyio.run(run_streams, server, source, sink)
    finally:
        broker.stopping.set()
