"""A LangChain tool for LangGraph graphs: wait for a provider's job within pollwarden's limits, and hand a stop
that needs a person to the graph's own human-in-the-loop, `interrupt()`.

    from pollwarden.integrations.langgraph import decision_answer, langgraph_tool

    wait_for_job = langgraph_tool("exports.toml", home="~/.local/state/pollwarden")
    # in a node, or in a ToolNode given to a model:   wait_for_job.invoke({"job_id": "exp_71c"})
    # the graph stops with an Interrupt whose value is the decision (id, question, options); a person answers:
    graph.invoke(Command(resume=decision_answer(interrupt.value, option=1, by="alice")), config)

The operation id is derived from the graph's thread (`config["configurable"]["thread_id"]`), the tool's name,
the contract and the job: a node that runs again, because it was resumed or because the graph was re-invoked
on the thread after a crash, resumes the same operation (its deadline and budget kept, no request beyond the
plan), and two tools in one thread never share one.

The resume value is a person's decision only when it names the decision it answers and the person:
`{"decision": ID, "option": N, "by": "alice"}` (or `"refuse": true`). It is applied through `operating.decide`,
the same code as `pollwarden decide ID --option N --by alice` (audited, refused when already decided or when the
operation moved on); if it lets waiting go on, the watch continues in the same tool call. Anything else (no
`by`, a wrong number, another decision's id) changes nothing: the graph is interrupted again with the same
decision and the problem. Naming the decision is what makes a re-run safe: LangGraph replays every earlier
resume value of the node in order, and an answer to a decision already applied is recognised and skipped, never
applied to the next one. "inspect" is not applied from here: its URL is in the options, and opening it decides
nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from ..api import WatchError
from ..core.contract.parse import Contract
from ..core.contract.result import JSONValue
from ..core.escalation import DecisionError, DecisionRequest, OptionKind
from ._common import (
    ANSWER_FORM,
    Answer,
    JobTool,
    ToolOptions,
    decision_json,
    missing_extra,
    operation_id_for,
    outcome_json,
    stopped_for_decision,
)
from ._common import parse_answer as parse_answer

if TYPE_CHECKING:
    from ..store.roles import Decisions

try:
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import BaseTool, StructuredTool, ToolException
    from langgraph.types import interrupt
except ImportError as exc:  # pragma: no cover - the test runs it in an interpreter without the framework
    raise missing_extra("langgraph", "langgraph") from exc

__all__ = ["decision_answer", "langgraph_tool", "operation_id", "parse_answer"]

PREFIX = "lg"
ANSWER_WITH = (
    f"graph.invoke(Command(resume={ANSWER_FORM}), config): a person's decision, applied as `pollwarden decide`"
)


def operation_id(thread_id: str, tool: str, contract: str, job_id: str) -> str:
    """The operation a tool call on this thread owns (readable, or hashed when it could not be an id)."""
    return operation_id_for(PREFIX, thread_id, tool, contract, job_id)


def decision_answer(
    decision: Mapping[str, Any] | DecisionRequest,
    *,
    by: str,
    option: int | None = None,
    refuse: bool = False,
    note: str | None = None,
) -> dict[str, JSONValue]:
    """The resume value for an interrupt's decision (its `value`, or the DecisionRequest): one option, or refuse."""
    decision_id = decision.decision_id if isinstance(decision, DecisionRequest) else decision.get("decision_id")
    value: dict[str, object] = {"decision": decision_id, "by": by}
    if refuse:
        value["refuse"] = True
    if option is not None:
        value["option"] = option
    if note is not None:
        value["note"] = note
    parsed = parse_answer(value)
    if isinstance(parsed, str):
        raise ValueError(parsed)
    return parsed.to_json()


def langgraph_tool(contract: Contract | str | Path, **options: Unpack[ToolOptions]) -> BaseTool:
    """A tool `(job_id) -> outcome` over `contract` (a Contract, a path or a shipped contract's name).

    `options` (`ToolOptions`) are what a new operation starts with and the tool's name; a resumed operation
    keeps what it has. The answer is a dict: `status`
    "succeeded" with `result`, or "stopped" with `reason`, `job_ended` and the decision (if one is left);
    `operation` is the record's summary. Bad input (a job id the contract refuses, another operation holding the
    job) is a ToolException with the message, which a ToolNode hands to the model.
    """
    job = JobTool(contract, options)
    name = job.name

    def wait_for_job(job_id: str, config: RunnableConfig) -> dict[str, JSONValue]:
        thread = (config.get("configurable") or {}).get("thread_id")
        if thread is None or str(thread) == "":
            raise ToolException(
                f"{name} needs the graph's thread: compile the graph with a checkpointer and invoke it with"
                ' config={"configurable": {"thread_id": ...}}'
            )
        try:
            return _wait(job, operation_id(str(thread), name, job.contract.name, job_id), job_id)
        except WatchError as exc:
            raise ToolException(str(exc)) from None

    return StructuredTool.from_function(
        wait_for_job,
        name=name,
        description=job.description
        or (
            f"Wait until the {job.contract.name} job with this job_id finishes, within pollwarden's limits"
            " (deadline, status-request budget, Retry-After). Returns status succeeded with the result, or stopped"
            " with the reason; a stop that needs a person pauses the graph until one answers."
        ),
        handle_tool_error=True,
    )


def _wait(job: JobTool, operation: str, job_id: str) -> dict[str, JSONValue]:
    """Watch; each open decision becomes an interrupt; a valid answer is applied and the watch goes on."""
    store = job.open_store()
    try:
        problem: str | None = None
        while True:
            outcome = job.watch(store, operation, job_id)
            decision = stopped_for_decision(outcome)
            if decision is None:
                return outcome_json(outcome, ANSWER_WITH)
            payload = decision_json(decision, ANSWER_WITH)
            if problem is not None:
                payload["problem"] = problem
            # Raises GraphInterrupt the first time; on a re-run, returns the resume values given so far, in order.
            answer = parse_answer(interrupt(payload))
            problem = None
            if isinstance(answer, str):
                problem = answer
                continue
            if answer.decision_id != decision.decision_id:
                problem = _other_decision(store, answer, decision)
                continue
            if answer.option is not None and _kind(decision, answer.option) is OptionKind.INSPECT:
                problem = "inspect decides nothing: open the URL in its option, then answer with another option"
                continue
            try:
                job.decide(store, answer)
            except DecisionError as exc:
                problem = str(exc)
            # Next: the watch goes on when the decision allows it; else (refused, closed, resubmitted as another
            # operation) the stop is returned as it is, with nothing sent, as a re-run of this node would.
    finally:
        store.close()


def _other_decision(store: Decisions, answer: Answer, open_one: DecisionRequest) -> str | None:
    """None (skip it) for an earlier answer of this node that LangGraph replays: its decision was answered by
    this very answer. Otherwise the problem: a decision someone else answered meanwhile, or an id this operation
    never had."""
    stored = store.get_decision(answer.decision_id)
    if stored is None or stored.request.operation_id != open_one.operation_id:
        return f"the answer names decision {answer.decision_id!r}; the open one is {open_one.decision_id}"
    if (stored.decided_by, stored.option) == (answer.by, answer.option) and stored.status in ("decided", "refused"):
        return None
    who = f" by {stored.decided_by}" if stored.decided_by else ""
    return (
        f"decision {answer.decision_id} was already {stored.status}{who}, so that answer changed nothing;"
        f" the open one is {open_one.decision_id}"
    )


def _kind(decision: DecisionRequest, number: int) -> OptionKind | None:
    return next((o.kind for o in decision.options if o.number == number), None)
