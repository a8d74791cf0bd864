"""The Agents SDK tool in a real `Runner.run` with a scripted model (no model service, no network) against the
loopback simulator: a stop with a decision is a needs_approval interruption; approving applies the decision."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage
from agents.items import TResponseInputItem, TResponseStreamEvent
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from pollwarden.home.operating import open_store
from pollwarden.integrations.openai_agents import AgentsJobTool, openai_agents_tool
from pollwarden.simulator import Simulator, Step
from tests.conftest import write_contract

NO_TRACES = RunConfig(tracing_disabled=True)  # the SDK would otherwise export traces to its service


class ScriptedModel(Model):
    """A model that answers from a script: a call to the tool first, then a final message; it counts its calls."""

    def __init__(self, *outputs: list[Any]) -> None:
        self.outputs = list(outputs)
        self.calls: list[Any] = []  # what each call was given, as the SDK sent it

    async def get_response(
        self, system_instructions: str | None, input: str | list[TResponseInputItem], *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.calls.append(input)
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the tests run without streaming")


def tool_call(job_id: str, call_id: str = "call-1") -> list[Any]:
    arguments = json.dumps({"job_id": job_id})
    return [ResponseFunctionToolCall(type="function_call", call_id=call_id, name="wait_for_job", arguments=arguments)]


def message(text: str) -> list[Any]:
    part = ResponseOutputText(type="output_text", text=text, annotations=[])
    return [ResponseOutputMessage(type="message", id="msg-1", role="assistant", status="completed", content=[part])]


@pytest.fixture
def contract(sim: Simulator, tmp_path: Path) -> Path:
    return write_contract(tmp_path / "c.toml", sim.url, base_delay="20ms", max_delay="50ms")


def agent_with(waiter: AgentsJobTool, model: Model) -> Agent[Any]:
    return Agent(name="ops", instructions="wait for the job", tools=[waiter.tool], model=model)


def tool_outputs(model: ScriptedModel) -> dict[str, Any]:
    """The tool's answers as the model was given them in its later calls' input, by call id (JSON decoded; the
    SDK's own text, such as a rejection, as it is)."""
    found: dict[str, Any] = {}
    for sent in model.calls:
        items: list[Any] = sent if isinstance(sent, list) else []
        for item in items:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                output = item["output"]
                found[item["call_id"]] = json.loads(output) if output.startswith("{") else output
    return found


def test_a_stop_with_a_decision_is_an_approval_and_approving_applies_it(
    sim: Simulator, contract: Path, home: Path
) -> None:
    sim.add_job(
        "job-1", [Step(body={"state": "running"}, times=3), Step(body={"state": "succeeded", "result_url": "/r/1"})]
    )
    waiter = openai_agents_tool(contract, home=home, max_requests=2)
    model = ScriptedModel(tool_call("job-1"), message("the export is ready"))
    agent = agent_with(waiter, model)

    async def scenario() -> None:
        first = await Runner.run(agent, "export and wait", run_config=NO_TRACES)
        (item,) = first.interruptions
        assert item.tool_name == "wait_for_job" and len(model.calls) == 1
        decision = waiter.decision(item)
        assert decision is not None and decision.reason is not None
        assert decision.reason.value == "request_budget_exhausted"
        assert [(o.number, o.kind.value) for o in decision.options] == [(1, "extend"), (2, "close")]
        assert sim.request_count("job-1") == 2
        state = first.to_state()
        message_ = waiter.approve(state, item, by="alice")
        assert message_.startswith("extended operation")
        done = await Runner.run(agent, state, run_config=NO_TRACES)
        assert done.final_output == "the export is ready" and done.interruptions == []
        answer = tool_outputs(model)["call-1"]
        assert answer["status"] == "succeeded" and answer["result"] == "/r/1"
        store = open_store(home)
        try:
            (decided,) = store.decisions(decision.operation_id)
            assert (decided.status, decided.decided_by, decided.option) == ("decided", "alice", 1)
        finally:
            store.close()

    asyncio.run(scenario())
    assert sim.request_count("job-1") == 4 and model.outputs == []  # both scripted answers used, no other call


def test_a_rejection_or_a_nameless_approval_leaves_the_decision_open(
    sim: Simulator, contract: Path, home: Path
) -> None:
    sim.add_job("job-2", [Step(body={"state": "running"})])
    waiter = openai_agents_tool(contract, home=home, max_requests=1)
    model = ScriptedModel(
        tool_call("job-2"), message("not approved"), tool_call("job-2", "call-2"), message("still stopped")
    )
    agent = agent_with(waiter, model)

    async def scenario() -> str:
        from agents import RunState

        first = await Runner.run(agent, "wait", run_config=NO_TRACES)
        assert len(first.interruptions) == 1
        # The paused run travels as a string (another process, later): the decision is found from the call.
        state = await RunState.from_string(agent, first.to_state().to_string())
        (restored,) = state.get_interruptions()
        decision = waiter.decision(restored)
        assert decision is not None
        said = waiter.reject(state, restored)
        assert f"decision {decision.decision_id} stays open" in said
        rejected = await Runner.run(agent, state, run_config=NO_TRACES)
        assert rejected.final_output == "not approved"
        # The model asks again: another interruption; the SDK's own approve names no one, so nothing is granted.
        second = await Runner.run(agent, "wait again", run_config=NO_TRACES)
        (again,) = second.interruptions
        state = second.to_state()
        state.approve(again)
        done = await Runner.run(agent, state, run_config=NO_TRACES)
        assert done.final_output == "still stopped"
        return decision.decision_id

    decision_id = asyncio.run(scenario())
    outputs = tool_outputs(model)
    assert outputs["call-1"] == "Tool execution was not approved."
    answer = outputs["call-2"]
    assert answer["status"] == "stopped" and answer["decision"]["decision_id"] == decision_id
    store = open_store(home)
    try:
        assert [d.status for d in store.decisions(answer["operation_id"])] == ["open"]
    finally:
        store.close()
    assert sim.request_count("job-2") == 1


def test_a_success_or_bad_input_needs_no_approval(sim: Simulator, contract: Path, home: Path) -> None:
    sim.add_job("job-3", [Step(body={"state": "succeeded", "result_url": "/r/3"})])
    waiter = openai_agents_tool(contract, home=home)
    model = ScriptedModel(tool_call("job-3"), message("done"), tool_call("a\x00b", "call-2"), message("refused"))
    agent = agent_with(waiter, model)

    async def scenario() -> None:
        done = await Runner.run(agent, "wait", run_config=NO_TRACES)
        assert done.interruptions == [] and done.final_output == "done"
        bad = await Runner.run(agent, "wait", run_config=NO_TRACES)
        assert bad.interruptions == [] and bad.final_output == "refused"

    asyncio.run(scenario())
    succeeded, refused = tool_outputs(model)["call-1"], tool_outputs(model)["call-2"]
    assert succeeded["status"] == "succeeded" and succeeded["operation_id"] == "oa:wait_for_job:exports:job-3"
    assert refused["status"] == "refused" and "control character" in refused["message"]
    assert sim.request_count("job-3") == 1  # the approval check watched; the tool run resumed the final operation


def test_approve_refuses_without_a_name_or_once_the_decision_is_taken(
    sim: Simulator, contract: Path, home: Path
) -> None:
    from pollwarden.core.escalation import DecisionError
    from pollwarden.home.operating import decide

    sim.add_job("job-4", [Step(body={"state": "running"})])
    waiter = openai_agents_tool(contract, home=home, max_requests=1)
    agent = agent_with(waiter, ScriptedModel(tool_call("job-4")))

    async def scenario() -> None:
        first = await Runner.run(agent, "wait", run_config=NO_TRACES)
        (item,) = first.interruptions
        state = first.to_state()
        with pytest.raises(DecisionError, match='"by" must name the person'):
            waiter.approve(state, item, by=" ")
        decision = waiter.decision(item)
        assert decision is not None
        store = open_store(home)
        try:
            decide(store, decision.decision_id, option=2, refuse=False, by="dave", note=None)  # closed via the CLI path
        finally:
            store.close()
        with pytest.raises(DecisionError, match="not an open decision"):
            waiter.approve(state, item, by="alice")
        still = await Runner.run(agent, state, run_config=NO_TRACES)  # nothing was approved: still waiting
        assert [i.tool_name for i in still.interruptions] == ["wait_for_job"]

    asyncio.run(scenario())


def test_a_second_stop_after_an_approval_is_asked_for_again_by_the_next_call(
    sim: Simulator, contract: Path, home: Path
) -> None:
    sim.add_job(
        "job-5", [Step(body={"state": "running"}, times=7), Step(body={"state": "succeeded", "result_url": "/r/5"})]
    )
    waiter = openai_agents_tool(contract, home=home, max_requests=2)
    model = ScriptedModel(tool_call("job-5"), tool_call("job-5", "call-2"), message("ready"))
    agent = agent_with(waiter, model)

    async def scenario() -> list[str]:
        approvers = []
        result = await Runner.run(agent, "wait", run_config=NO_TRACES)
        for name in ("alice", "bob"):
            (item,) = result.interruptions
            state = result.to_state()
            waiter.approve(state, item, by=name)
            approvers.append(name)
            result = await Runner.run(agent, state, run_config=NO_TRACES)
        assert result.final_output == "ready" and result.interruptions == []
        return approvers

    asyncio.run(scenario())
    outputs = tool_outputs(model)
    assert (
        outputs["call-1"]["status"] == "stopped"
        and "call this tool again" in outputs["call-1"]["decision"]["answer_with"]
    )
    assert outputs["call-2"]["status"] == "succeeded" and sim.request_count("job-5") == 8
    store = open_store(home)
    try:
        assert [d.decided_by for d in store.decisions(outputs["call-2"]["operation_id"])] == ["alice", "bob"]
    finally:
        store.close()


def test_a_stop_no_yes_can_mean_is_answered_without_an_interruption(sim: Simulator, contract: Path, home: Path) -> None:
    """403: the same request with the same credential is never approved again, so there is nothing to extend; a
    check with a changed credential is a person's own choice of option, never what a yes to the run means."""
    waiter = openai_agents_tool(contract, home=home)
    model = ScriptedModel(tool_call("forbidden-1"), message("a person must look"))
    result = asyncio.run(Runner.run(agent_with(waiter, model), "wait", run_config=NO_TRACES))
    assert result.interruptions == [] and result.final_output == "a person must look"
    answer = tool_outputs(model)["call-1"]
    assert answer["status"] == "stopped" and answer["reason"] == "authorization_denied"
    assert [o["kind"] for o in answer["decision"]["options"]] == ["recheck", "close"]
    assert sim.request_count("forbidden-1") == 1


def test_cancelling_the_run_cancels_the_watch_and_leaves_it_to_resume(
    sim: Simulator, contract: Path, home: Path
) -> None:
    """The approval check's watch is the API's `watch`: a cancelled run stops it within one request, audited."""
    waiter = openai_agents_tool(contract, home=home)
    agent = agent_with(waiter, ScriptedModel(tool_call("never-1")))

    async def scenario() -> None:
        run = asyncio.create_task(Runner.run(agent, "wait", run_config=NO_TRACES))
        for _ in range(3000):  # until the provider has seen the watch (30 s at most), then cancel the run
            if sim.request_count("never-1") or run.done():
                break
            await asyncio.sleep(0.01)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(scenario())
    operation = waiter.operation_id("never-1")
    store = open_store(home)
    try:
        stored = store.get(operation)
        assert stored is not None and stored.record.phase.value == "active"
        assert "interrupted" in [e.kind for e in store.events(operation)]
        sent = sim.request_count("never-1")
        assert 1 <= sent == stored.record.status_requests_used  # nothing sent behind the record
    finally:
        store.close()


def test_a_misspelt_option_is_a_type_error_as_a_keyword_argument_was(contract: Path, home: Path) -> None:
    """The tools' options are one `ToolOptions` TypedDict (declared once for both frameworks); a caller the type
    checker does not see still gets the TypeError a misspelt keyword argument gave."""
    from pollwarden.integrations.langgraph import langgraph_tool

    for make in (openai_agents_tool, langgraph_tool):
        with pytest.raises(TypeError, match=r"unexpected keyword argument 'max_request'.*max_requests"):
            make(contract, home=home, max_request=2)  # type: ignore[call-arg]
