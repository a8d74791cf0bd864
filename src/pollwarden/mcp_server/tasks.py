"""MCP tasks: a task-augmented `wait_operation` (or `start_watch`) returns at once; the server does the waiting.

A `tools/call` whose params carry `task` (the 2025-11-25 tasks shape, which the installed SDK's types describe:
`Task`, `CreateTaskResult`, `tasks/get`, `tasks/result`, `tasks/cancel`) answers with a task whose id is the
operation id. A background watch in this process then steps the operation when it is due, through the same
`wait_operation` tool body any call uses (no lease is held between polls), and ends with the session. What
`tasks/get` reports is read from the store each time, so it says what a person or another process did too:

  working         active, nothing asked of a person
  input_required  an open decision about the operation as it is now (a stop, an agent's cancel request), or a
                  pending approval of this session's call or session; its question is the status message
  completed       succeeded
  cancelled       tasks/cancel (the server stopped waiting; the operation is left as it is), or stopped as
                  job_cancelled with nothing left to decide (a person cancelled it, or the provider)
  failed          stopped with nothing left to decide (closed, refused), or the watch itself could not go on

`tasks/cancel` stops the server's waiting at once: the task is `cancelled` before the answer, and the operation is
left as it is (a later wait_operation resumes it). Asking a person to cancel the job at the provider is
`request_cancel`. The SDK binds these methods for an `Extension` (`io.modelcontextprotocol/tasks`, advertised under
`capabilities.extensions`); the task-augmented `tools/call` itself is answered by a server middleware, because on
the 2025-11-25 wire the SDK sieves a `tools/call` result (the extension interceptor's included) into a
`CallToolResult`, which drops a `CreateTaskResult`'s `task` (see docs/agents.md "MCP tasks").
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CancelTaskRequestParams,
    GetTaskPayloadRequestParams,
    GetTaskRequestParams,
    PaginatedRequestParams,
    ServerTasksCapability,
    ServerTasksRequestsCapability,
    Task,
    TasksCallCapability,
    TasksCancelCapability,
    TasksListCapability,
    TasksToolsCapability,
)

from .. import events as ev
from ..actions.decisions import open_decision
from ..core.durations import format_rfc3339
from ..core.reasons import Phase, StopReason
from ..report.progress import progress_of_record
from ..store.base import Store
from .base import MAX_WAIT_SECONDS, CallContext, ToolFailure, client_of, log

if TYPE_CHECKING:
    from .broker import Broker

IDENTIFIER = "io.modelcontextprotocol/tasks"
TASK_TOOLS: dict[str, frozenset[str]] = {
    "wait_operation": frozenset({"operation_id", "max_wait_seconds"}),
    "start_watch": frozenset({"contract", "job_id", "deadline", "max_requests", "status_url"}),
}
"""Tools a task may augment (both end in an operation the server can wait on), with the arguments each takes;
a task's wait has no max_wait_seconds: it lasts until the operation is over, within its own limits."""
RELATED_TASK = "io.modelcontextprotocol/related-task"
PERSON_POLL_MS = 5000
MIN_POLL_MS = 1000
"""A task is looked at no more often than once a second, however soon its next check is due."""
POLL_MARGIN_MS = 250
"""Added to the time to the next due check: the server's own watch makes that check then, and a host that came
back at exactly that moment found it not made yet (4 tasks/get in 10 in bench.agents_measure) and came again."""
"""The poll interval suggested while a person decides: their answer comes on human time, not the schedule's."""
RECHECK_SECONDS = 0.25
"""How often a background watch looks whether a stopped operation was extended or closed (a store read only)."""
TERMINAL = frozenset({"completed", "failed", "cancelled"})


@dataclass
class _Watch:
    operation_id: str
    stop: threading.Event = field(default_factory=threading.Event)
    problem: dict[str, Any] | None = None
    """Why the watch could not go on (a configuration error, the store): the task then fails with it."""
    thread: threading.Thread | None = None
    cancelled: bool = False
    """tasks/cancel: the server stopped waiting; the operation is left as it is."""


class Tasks:
    """This session's tasks: one background watch per operation, and the task view of each."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._watches: dict[str, _Watch] = {}
        self._lock = threading.Lock()

    # -- creating and watching -------------------------------------------------------------------

    def create(self, tool: str, arguments: Mapping[str, Any], client: Mapping[str, Any] | None) -> dict[str, Any]:
        """Run on a worker thread: (ok, payload) of the call; on success a `CreateTaskResult`."""
        broker = self.broker
        unknown = sorted(str(k) for k in arguments if k not in TASK_TOOLS[tool])
        if unknown:  # what the SDK's argument validation refuses on a plain call
            return {"error": {"error": "invalid_argument", "message": f"{tool} takes no argument {unknown[0]!r}"}}
        fresh = CallContext(cancelled=threading.Event())
        if tool == "start_watch":
            ok, started = broker.dispatch(tool, fresh, client, **{str(k): v for k, v in arguments.items()})
            if not ok:
                return {"error": started}
            operation_id = str(started["operation_id"])
        else:
            # get_decision sends nothing: it checks the operation as any tool does, with the same refusal at once.
            ok, known = broker.dispatch("get_decision", fresh, client, operation_id=arguments.get("operation_id"))
            if not ok:
                return {"error": known}
            operation_id = str(known["operation_id"])
        with self._lock:
            watch = self._watches.get(operation_id)
            if watch is None or watch.thread is None or not watch.thread.is_alive():
                watch = _Watch(operation_id)
                watch.thread = threading.Thread(
                    target=self._run, args=(watch,), name=f"pollwarden-task-{operation_id}", daemon=True
                )
                self._watches[operation_id] = watch
                watch.thread.start()
        # The task is durable before the answer: tasks/get reads it from the store, where it already is.
        return {"task": self.get(operation_id)}

    def _run(self, watch: _Watch) -> None:
        broker = self.broker
        call = CallContext(cancelled=watch.stop, notify=None)
        try:
            while not self._ending(watch):
                ok, reply = broker.dispatch(
                    "wait_operation", call, None, operation_id=watch.operation_id, max_wait_seconds=MAX_WAIT_SECONDS
                )
                if not ok:
                    if reply.get("error") == "approval_required":  # a person approves the session: wait for it
                        self._pause(watch, lambda store: self._pending_grant(store, watch.operation_id) is not None)
                        continue
                    watch.problem = reply
                    return
                if reply.get("status") == "succeeded":
                    return
                if reply.get("status") == "stopped" and not self._wait_for_person(watch):
                    return
        except Exception:  # a watch never takes the server down; the task says it failed
            log.exception("task watch of %s failed", watch.operation_id)
            watch.problem = {"error": "internal_error", "message": "the server's watch of this task failed"}

    def _ending(self, watch: _Watch) -> bool:
        return watch.stop.is_set() or self.broker.stopping.is_set()

    def _wait_for_person(self, watch: _Watch) -> bool:
        """After a stop: True once a person made the operation active again (an extension), False when nothing
        is left to decide (closed, refused, cancelled) or the session ends."""

        def deciding(store: Store) -> bool:
            _, record = self.broker.operation(store, watch.operation_id)
            return record.phase is Phase.STOPPED and _open_question(store, record.operation_id) is not None

        self._pause(watch, deciding)
        if self._ending(watch):
            return False
        with self.broker.store() as store:
            _, record = self.broker.operation(store, watch.operation_id)
        return record.phase is Phase.ACTIVE

    def _pause(self, watch: _Watch, still: Callable[[Store], bool]) -> None:
        while not self._ending(watch):
            with self.broker.store() as store:
                if not still(store):
                    return
            self.broker.stopping.wait(RECHECK_SECONDS)

    # -- what a task says ------------------------------------------------------------------------

    def ids(self) -> list[str]:
        with self._lock:
            return sorted(self._watches)

    def known(self, task_id: object) -> str:
        if not isinstance(task_id, str) or task_id not in self._watches:
            raise MCPError(
                INVALID_PARAMS,
                f"no task {str(task_id)[:80]!r} in this session: a task id is the operation id that a task-augmented"
                " tools/call of wait_operation or start_watch returned here",
            )
        return task_id

    def get(self, task_id: str) -> dict[str, Any]:
        broker = self.broker
        now = broker.clock()
        with broker.store() as store:
            _, record = broker.operation(store, task_id)
            progress = progress_of_record(record)
            question = _open_question(store, task_id)
            grant = self._pending_grant(store, task_id)
            events = store.events(task_id)
        watch = self._watches.get(task_id)
        poll_ms: int | None = None
        if record.phase is Phase.ACTIVE:
            seconds = progress.seconds_to_next_check(now) or 0.0
            poll_ms = max(MIN_POLL_MS, int(seconds * 1000) + POLL_MARGIN_MS)
        message = progress.message(now)
        if question is not None or grant is not None:
            status = "input_required"
            message = question if question is not None else str(grant)
            poll_ms = poll_ms if poll_ms is not None and record.phase is Phase.ACTIVE else PERSON_POLL_MS
        elif record.phase is Phase.ACTIVE:
            status = "working"
        elif record.phase is Phase.SUCCEEDED:
            status = "completed"
        else:
            status = "cancelled" if record.reason is StopReason.JOB_CANCELLED else "failed"
            message = f"{message}: {record.detail}" if record.detail else message
        if watch is not None and watch.cancelled and status not in TERMINAL:
            status, poll_ms = "cancelled", None
            message = (
                f"the agent cancelled this task (tasks/cancel): the server stopped waiting; operation {task_id} is"
                " left as it was (wait_operation resumes the wait; request_cancel asks a person to cancel the job)"
            )
        elif watch is not None and watch.problem is not None and status not in TERMINAL:
            status, poll_ms = "failed", None
            message = f"the server's watch stopped: {watch.problem.get('message') or watch.problem.get('error')}"
        updated = events[-1].at if events else record.created_at
        task = Task(
            task_id=task_id,
            status=status,  # type: ignore[arg-type]
            status_message=message,
            created_at=format_rfc3339(record.created_at),
            last_updated_at=format_rfc3339(updated),
            ttl=max(0, int((record.deadline_at - record.created_at).total_seconds() * 1000)),
            poll_interval=poll_ms,
        )
        dumped: dict[str, Any] = task.model_dump(by_alias=True, mode="json", exclude_none=True)
        dumped.setdefault("ttl", None)
        return dumped

    def _pending_grant(self, store: Store, operation_id: str) -> str | None:
        """The approval this session's call on the operation waits for, as the sentence a person acts on."""
        broker = self.broker
        stored = store.get(operation_id)
        contract = stored.record.contract_name if stored is not None else None
        for grant in store.grants(subject=broker.session_id, status="pending"):
            if grant.kind == "call" and grant.scope == operation_id:
                return (
                    f"waiting for approval {grant.grant_id} of this call by {broker.approvers}:"
                    f" pollwarden approve-call {grant.grant_id} {broker.person_flags}"
                )
            if grant.kind == "session" and grant.scope == contract:
                return (
                    f"waiting for a person to approve this agent session on contract {contract!r}:"
                    f" pollwarden approve-session {grant.grant_id} {broker.person_flags}"
                )
        return None

    def result(self, task_id: str) -> tuple[bool, dict[str, Any]]:
        """The final wait_operation reply; only asked once the task is terminal."""
        watch = self._watches.get(task_id)
        if watch is not None and watch.problem is not None:
            return False, watch.problem
        return self.broker.dispatch(
            "wait_operation", CallContext(cancelled=threading.Event()), None, operation_id=task_id, max_wait_seconds=0
        )

    def cancel(self, task_id: str) -> dict[str, Any]:
        """The server stops waiting for the task at once, and the task is `cancelled` before this answers (the
        tasks spec); the operation stays as it is, resumable. Cancelling the job at the provider is a person's
        to decide: `request_cancel` asks them."""
        if self.get(task_id)["status"] in TERMINAL:
            raise MCPError(INVALID_PARAMS, f"task {task_id} is already over; there is nothing to cancel")
        with self._lock:
            watch = self._watches[task_id]
            watch.cancelled = True
            watch.stop.set()
        with self.broker.store() as store:
            self.broker.audit(store, ev.TaskCancelled(operation=task_id))
        return self.get(task_id)


def _open_question(store: Store, operation_id: str) -> str | None:
    """The open decision about the operation as it is now, as its question and how a person answers."""
    stored = store.get(operation_id)
    opened = open_decision(store, stored.record) if stored is not None else None
    if opened is None:
        return None
    request = opened.request
    options = "; ".join(f"[{o.number}] {o.label}" for o in request.options)
    about = f"stopped: {request.reason.value}" if request.reason else "an agent asked to cancel the running job"
    return (
        f"waiting for a person to decide {request.decision_id} ({about}). Options: {options}. They answer with"
        f" pollwarden decide {request.decision_id} --option N --by NAME, or in the console"
    )


def legacy_tasks_capability() -> ServerTasksCapability:
    """The same offer as the extension's settings, as `capabilities.tasks`: a 2025-11-25 initialize answer is
    sieved to that revision's ServerCapabilities, which has no `extensions` (the SDK drops them there)."""
    return ServerTasksCapability(
        list=TasksListCapability(),
        cancel=TasksCancelCapability(),
        requests=ServerTasksRequestsCapability(tools=TasksToolsCapability(call=TasksCallCapability())),
    )


class TasksExtension(Extension):
    """`tasks/get`, `tasks/result`, `tasks/cancel` and `tasks/list` over this session's `Tasks`."""

    identifier = IDENTIFIER

    def __init__(self, tasks: Tasks) -> None:
        self.tasks = tasks

    def settings(self) -> dict[str, Any]:
        return {"requests": {"tools": {"call": {}}}, "cancel": {}, "list": {}, "tools": sorted(TASK_TOOLS)}

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", GetTaskRequestParams, self._get),
            MethodBinding("tasks/result", GetTaskPayloadRequestParams, self._result),
            MethodBinding("tasks/cancel", CancelTaskRequestParams, self._cancel),
            MethodBinding("tasks/list", PaginatedRequestParams, self._list),
        )

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: Any) -> HandlerResult:
        task_id = self.tasks.known(params.task_id)
        return await _off_loop(self.tasks.get, task_id)

    async def _result(self, ctx: ServerRequestContext[Any, Any], params: Any) -> HandlerResult:
        """Blocks until the task is terminal, as the spec asks; a person's decision may take a while."""
        task_id = self.tasks.known(params.task_id)
        while (await _off_loop(self.tasks.get, task_id))["status"] not in TERMINAL:
            if self.tasks.broker.stopping.is_set():
                raise MCPError(INVALID_PARAMS, f"the session is ending; task {task_id} is not finished")
            await anyio.sleep(RECHECK_SECONDS)
        ok, payload = await anyio.to_thread.run_sync(self.tasks.result, task_id)
        return tool_result(ok, payload, task_id)

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: Any) -> HandlerResult:
        task_id = self.tasks.known(params.task_id)
        return await _off_loop(self.tasks.cancel, task_id)

    async def _list(self, ctx: ServerRequestContext[Any, Any], params: Any) -> HandlerResult:
        ids = self.tasks.ids()
        listed = [await _off_loop(self.tasks.get, task_id) for task_id in ids]
        return {"tasks": listed}


async def _off_loop(fn: Callable[[str], dict[str, Any]], task_id: str) -> dict[str, Any]:
    """Store work on a worker thread; a refusal from it (the store cannot be opened) is a JSON-RPC error."""
    try:
        return await anyio.to_thread.run_sync(fn, task_id)
    except ToolFailure as failure:
        raise MCPError(INVALID_PARAMS, failure.message) from None


def tool_result(ok: bool, payload: Mapping[str, Any], task_id: str | None = None) -> dict[str, Any]:
    """A `CallToolResult` on the wire, as server.py's tools answer (the JSON text and the structured reply)."""
    result: dict[str, Any] = {
        "content": [{"type": "text", "text": json.dumps(payload, indent=2, sort_keys=True)}],
        "structuredContent": dict(payload),
        "isError": not ok,
    }
    if task_id is not None:
        result["_meta"] = {RELATED_TASK: {"taskId": task_id}}
    return result


def task_middleware(tasks: Tasks) -> Any:
    """The server middleware that answers a task-augmented `tools/call` of a `TASK_TOOLS` tool at once."""

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if ctx.method == "tools/list":
            return _with_task_support(await call_next(ctx))
        if ctx.method != "tools/call" or not isinstance(params, Mapping) or not isinstance(params.get("task"), Mapping):
            return await call_next(ctx)  # no task asked, or a malformed one: the SDK's validation answers it
        name, arguments = params.get("name"), params.get("arguments")
        if name not in TASK_TOOLS or not isinstance(arguments, Mapping):
            return await call_next(ctx)  # a tool without task support runs as a plain call (the spec allows it)
        client = client_of(ctx)
        created = await anyio.to_thread.run_sync(tasks.create, str(name), arguments, client)
        if "error" in created:
            return tool_result(False, created["error"])
        answer: dict[str, Any] = created
        return answer

    return middleware


def _with_task_support(listed: HandlerResult) -> HandlerResult:
    """tools/list with `execution.taskSupport = "optional"` on the tools a task may augment (the SDK's
    registration has no such field; the wire dict is ours to extend, as a middleware's result)."""
    if not isinstance(listed, dict) or not isinstance(listed.get("tools"), list):
        return listed
    tools = [
        {**tool, "execution": {"taskSupport": "optional"}}
        if isinstance(tool, dict) and tool.get("name") in TASK_TOOLS
        else tool
        for tool in listed["tools"]
    ]
    return {**listed, "tools": tools}
