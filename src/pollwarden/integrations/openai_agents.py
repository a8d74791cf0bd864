"""An OpenAI Agents SDK function tool: wait for a provider's job within pollwarden's limits, and hand a stop
that needs a person to the SDK's human-in-the-loop, a `needs_approval` interruption.

    from pollwarden.integrations.openai_agents import openai_agents_tool

    waiter = openai_agents_tool("exports.toml", home="~/.local/state/pollwarden")
    agent = Agent(name="ops", tools=[waiter.tool])
    result = await Runner.run(agent, "export the report and wait for it")
    while result.interruptions:
        state = result.to_state()
        for item in result.interruptions:
            decision = waiter.decision(item)        # the open DecisionRequest: question, bounded options
            waiter.approve(state, item, by="alice")  # or waiter.reject(state, item)
        result = await Runner.run(agent, state)

Before the tool runs, its approval check watches the job (the same `Watch` as the Python API; the operation id
is derived from the tool's name, the contract and the job, so a second call resumes it). A success, or a stop
with nothing a yes can mean, needs no approval: the tool answers at once with the outcome, no request sent. A
stop whose decision offers more waiting ("extend", or "pause" for an unknown state) interrupts the run.

The SDK's approval is a yes or a no about running one tool call, so a yes means exactly the one option that
lets this tool do what it does, wait: `approve(state, item, by=NAME)` applies the decision's extend (or pause)
option through `operating.decide`, as `pollwarden decide ID --option N --by NAME` does (audited, refused when
already decided or when the operation moved on), then approves the call, and the resumed run's tool watches on.
No option is exposed as a tool of its own: the model would then choose which authority to ask for, and cancel,
close or resubmit are a person's, through `pollwarden decide` or the console. A no (`reject`) leaves the
decision open and the operation stopped. An approval given with the SDK's own `state.approve(item)` names no
one, so it grants nothing: the tool reports the stop and the open decision.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Unpack

from ..api import WatchError
from ..core.contract.parse import Contract
from ..core.escalation import DecisionError, DecisionRequest
from ..errors import PollwardenError
from ._common import (
    Answer,
    JobTool,
    ToolOptions,
    continue_option,
    missing_extra,
    operation_id_for,
    outcome_json,
    person_problem,
    stopped_for_decision,
)

try:
    from agents import FunctionTool, RunContextWrapper, RunState, ToolApprovalItem, function_tool
except ImportError as exc:  # pragma: no cover - the test runs it in an interpreter without the framework
    raise missing_extra("openai_agents", "openai-agents") from exc

__all__ = ["AgentsJobTool", "openai_agents_tool"]

PREFIX = "oa"
ANSWER_WITH = (
    "call this tool again with the same job_id to ask a person: approving that call"
    " (AgentsJobTool.approve(state, item, by=NAME)) applies the extend option; or a person decides with"
    " `pollwarden decide DECISION_ID --option N --by NAME`"
)


class AgentsJobTool:
    """The function tool (`tool`) and what a person's side needs: the decision behind an interruption, and
    approve/reject that apply it by name."""

    def __init__(self, job: JobTool, name: str, description: str | None) -> None:
        self._job = job
        self.name = name

        async def needs_approval(context: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
            job_id = params.get("job_id")
            if not isinstance(job_id, str):
                return False  # the tool run itself reports the bad argument
            try:
                outcome = await job.watch_async(self.operation_id(job_id), job_id)
            except PollwardenError:
                return False  # likewise: the SDK would take an exception here for "ask a person"
            decision = stopped_for_decision(outcome)
            return decision is not None and continue_option(decision) is not None

        async def wait_for_job(job_id: str) -> str:
            """Wait until the provider's job with this job_id finishes, within pollwarden's limits."""
            try:
                outcome = await job.watch_async(self.operation_id(job_id), job_id)
            except WatchError as exc:
                return json.dumps({"status": "refused", "message": str(exc)})
            return json.dumps(outcome_json(outcome, ANSWER_WITH))

        self.tool: FunctionTool = function_tool(
            wait_for_job,
            name_override=name,
            description_override=description
            or (
                f"Wait until the {job.contract.name} job with this job_id finishes, within pollwarden's limits"
                " (deadline, status-request budget, Retry-After). Returns JSON: status succeeded with the result,"
                " or stopped with the reason; a stop a person may extend asks for their approval first."
            ),
            needs_approval=needs_approval,
        )

    def operation_id(self, job_id: str) -> str:
        return operation_id_for(PREFIX, self.name, self._job.contract.name, job_id)

    def decision(self, item: ToolApprovalItem) -> DecisionRequest | None:
        """The open decision an interruption of this tool asks about (None for another tool's, or none open)."""
        job_id = self._job_id(item)
        if job_id is None:
            return None
        store = self._job.open_store()
        try:
            return self._job.open_decision(store, self.operation_id(job_id))
        finally:
            store.close()

    def approve(self, state: RunState[Any, Any], item: ToolApprovalItem, *, by: str, note: str | None = None) -> str:
        """Apply the decision's extend (or pause) option as `by`'s decision, then approve the call; the resumed
        run's tool watches on. Raises DecisionError, having approved nothing, when it cannot be applied."""
        if (problem := person_problem(by, note)) is not None:
            raise DecisionError(problem)
        request = self.decision(item)
        if request is None:
            raise DecisionError(f"this interruption is not an open decision of {self.name}; nothing was approved")
        option = continue_option(request)
        if option is None:
            raise DecisionError(f"decision {request.decision_id} offers no more waiting; decide it with pollwarden")
        store = self._job.open_store()
        try:
            decided = self._job.decide(store, Answer(request.decision_id, option.number, by.strip(), note))
        finally:
            store.close()
        state.approve(item)
        return decided.message

    def reject(self, state: RunState[Any, Any], item: ToolApprovalItem) -> str:
        """Reject the call: the decision stays open and the operation stopped (a person may still decide it)."""
        request = self.decision(item)
        state.reject(item)
        if request is None:
            return "rejected"
        return f"rejected; decision {request.decision_id} stays open and operation {request.operation_id} stopped"

    def _job_id(self, item: ToolApprovalItem) -> str | None:
        """The job id of an interruption of this tool, read from its call's arguments (hostile until parsed)."""
        if item.tool_name != self.name:
            return None
        raw = item.raw_item
        arguments = raw.get("arguments") if isinstance(raw, Mapping) else getattr(raw, "arguments", None)
        if not isinstance(arguments, str):
            return None
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):
            return None
        job_id = parsed.get("job_id") if isinstance(parsed, dict) else None
        return job_id if isinstance(job_id, str) else None


def openai_agents_tool(contract: Contract | str | Path, **options: Unpack[ToolOptions]) -> AgentsJobTool:
    """The tool over `contract` (a Contract, a path or a shipped contract's name); `.tool` goes to the Agent.

    `options` (`ToolOptions`) are what a new operation starts with and the tool's name; a resumed operation
    keeps what it has.
    """
    job = JobTool(contract, options)
    return AgentsJobTool(job, job.name, job.description)
