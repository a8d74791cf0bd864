"""A tool call's arguments checked against the tool's own parameters before it runs, for every tool in one place.

The SDK's own check answers a wrong type with pydantic's validation text (a dump an agent must parse, with the
rejected value in it); here the same check answers as every other refusal does: `{"error": "invalid_argument",
"message": ...}` with `isError`, naming the argument and what it must be, never echoing the value. A job id the
agent gives as a number (GitHub's and GitLab's are) is taken as its decimal string.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from pydantic import ValidationError

from ..errors import PollwardenError
from .base import ToolFailure

NUMERIC_IDS = frozenset({"job_id"})
"""Arguments a provider may number: an int (not a bool) becomes its decimal string."""

Validate = Callable[[str, dict[str, Any]], None]
"""`validate(tool, arguments)`: raises pydantic's ValidationError for arguments the tool does not take."""


class UnknownArgument(PollwardenError):
    """An argument the tool does not take."""

    def __init__(self, tool: str, name: str) -> None:
        super().__init__(f"{tool} takes no argument {name!r}")
        self.tool, self.name = tool, name


def normalised(arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: str(value) if name in NUMERIC_IDS and isinstance(value, int) and not isinstance(value, bool) else value
        for name, value in arguments.items()
    }


def refusal(tool: str, error: ValidationError) -> ToolFailure:
    """The first problem, as a sentence: the argument, what it must be, the type it was (never its value)."""
    first = error.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "the arguments"
    kind = first["type"]
    if kind == "missing":
        said = f"{tool} needs the argument {where!r}"
    elif kind in ("unexpected_keyword_argument", "extra_forbidden"):
        said = f"{tool} takes no argument {where!r}"
    else:
        said = f"{tool}: {where} is not accepted: {str(first['msg']).lower()}"
    return ToolFailure("invalid_argument", f"{said}; nothing was done. tools/list gives each tool's parameters")


def arguments_middleware(validate: Validate, tool_result: Callable[[bool, dict[str, Any]], dict[str, Any]]) -> Any:
    """A server middleware: a `tools/call` whose arguments the tool would refuse is answered here, as JSON."""

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if ctx.method != "tools/call" or not isinstance(params, dict):
            return await call_next(ctx)
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return await call_next(ctx)  # no such tool, or no arguments at all: the SDK's own answer
        arguments.update(normalised(arguments))
        if "task" in params:
            # A task-augmented call (or a malformed one) has checks of its own: tasks.py and the SDK's params.
            return await call_next(ctx)
        try:
            validate(name, arguments)
        except ValidationError as exc:
            return tool_result(False, refusal(name, exc).to_json())
        except UnknownArgument as exc:
            said = f"{exc}; nothing was done. tools/list gives each tool's parameters"
            return tool_result(False, ToolFailure("invalid_argument", said).to_json())
        return await call_next(ctx)

    return middleware
