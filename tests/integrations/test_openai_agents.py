"""The Agents SDK tool in a real `Runner.run` with a scripted model (no model service, no network) against the
loopback simulator: a stop with a decision is a needs_approval interruption; approving applies the decision."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator, Step
from tests.conftest import write_contract

if TYPE_CHECKING:
    from tests.integrations.agents_kit import ScriptedModel

# The SDK is imported inside each test (tests/integrations/agents_kit.py), and xdist runs this file's tests on one
# worker (tests/conftest.py ONE_WORKER): at collection every worker paid for it.


@pytest.fixture
def contract(sim: Simulator, tmp_path: Path) -> Path:
    return write_contract(tmp_path / "c.toml", sim.url, base_delay="20ms", max_delay="50ms")


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
    from tests.integrations import agents_kit as sdk

    sim.add_job(
        "job-1", [Step(body={"state": "running"}, times=3), Step(body={"state": "succeeded", "result_url": "/r/1"})]
    )
    waiter = sdk.openai_agents_tool(contract, home=home, max_requests=2)
    model = sdk.ScriptedModel(sdk.tool_call("job-1"), sdk.message("the export is ready"))
    agent = sdk.agent_with(waiter, model)

    async def scenario() -> None:
        first = await sdk.Runner.run(agent, "export and wait", run_config=sdk.NO_TRACES)
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
        done = await sdk.Runner.run(agent, state, run_config=sdk.NO_TRACES)
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
    from tests.integrations import agents_kit as sdk

    sim.add_job("job-2", [Step(body={"state": "running"})])
    waiter = sdk.openai_agents_tool(contract, home=home, max_requests=1)
    model = sdk.ScriptedModel(
        sdk.tool_call("job-2"),
        sdk.message("not approved"),
        sdk.tool_call("job-2", "call-2"),
        sdk.message("still stopped"),
    )
    agent = sdk.agent_with(waiter, model)

    async def scenario() -> str:
        from agents import RunState

        first = await sdk.Runner.run(agent, "wait", run_config=sdk.NO_TRACES)
        assert len(first.interruptions) == 1
        # The paused run travels as a string (another process, later): the decision is found from the call.
        state = await RunState.from_string(agent, first.to_state().to_string())
        (restored,) = state.get_interruptions()
        decision = waiter.decision(restored)
        assert decision is not None
        said = waiter.reject(state, restored)
        assert f"decision {decision.decision_id} stays open" in said
        rejected = await sdk.Runner.run(agent, state, run_config=sdk.NO_TRACES)
        assert rejected.final_output == "not approved"
        # The model asks again: another interruption; the SDK's own approve names no one, so nothing is granted.
        second = await sdk.Runner.run(agent, "wait again", run_config=sdk.NO_TRACES)
        (again,) = second.interruptions
        state = second.to_state()
        state.approve(again)
        done = await sdk.Runner.run(agent, state, run_config=sdk.NO_TRACES)
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
    from tests.integrations import agents_kit as sdk

    sim.add_job("job-3", [Step(body={"state": "succeeded", "result_url": "/r/3"})])
    waiter = sdk.openai_agents_tool(contract, home=home)
    model = sdk.ScriptedModel(
        sdk.tool_call("job-3"), sdk.message("done"), sdk.tool_call("a\x00b", "call-2"), sdk.message("refused")
    )
    agent = sdk.agent_with(waiter, model)

    async def scenario() -> None:
        done = await sdk.Runner.run(agent, "wait", run_config=sdk.NO_TRACES)
        assert done.interruptions == [] and done.final_output == "done"
        bad = await sdk.Runner.run(agent, "wait", run_config=sdk.NO_TRACES)
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
    from tests.integrations import agents_kit as sdk

    sim.add_job("job-4", [Step(body={"state": "running"})])
    waiter = sdk.openai_agents_tool(contract, home=home, max_requests=1)
    agent = sdk.agent_with(waiter, sdk.ScriptedModel(sdk.tool_call("job-4")))

    async def scenario() -> None:
        first = await sdk.Runner.run(agent, "wait", run_config=sdk.NO_TRACES)
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
        still = await sdk.Runner.run(agent, state, run_config=sdk.NO_TRACES)  # nothing was approved: still waiting
        assert [i.tool_name for i in still.interruptions] == ["wait_for_job"]

    asyncio.run(scenario())


def test_a_second_stop_after_an_approval_is_asked_for_again_by_the_next_call(
    sim: Simulator, contract: Path, home: Path
) -> None:
    from tests.integrations import agents_kit as sdk

    sim.add_job(
        "job-5", [Step(body={"state": "running"}, times=7), Step(body={"state": "succeeded", "result_url": "/r/5"})]
    )
    waiter = sdk.openai_agents_tool(contract, home=home, max_requests=2)
    model = sdk.ScriptedModel(sdk.tool_call("job-5"), sdk.tool_call("job-5", "call-2"), sdk.message("ready"))
    agent = sdk.agent_with(waiter, model)

    async def scenario() -> list[str]:
        approvers = []
        result = await sdk.Runner.run(agent, "wait", run_config=sdk.NO_TRACES)
        for name in ("alice", "bob"):
            (item,) = result.interruptions
            state = result.to_state()
            waiter.approve(state, item, by=name)
            approvers.append(name)
            result = await sdk.Runner.run(agent, state, run_config=sdk.NO_TRACES)
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
    from tests.integrations import agents_kit as sdk

    waiter = sdk.openai_agents_tool(contract, home=home)
    model = sdk.ScriptedModel(sdk.tool_call("forbidden-1"), sdk.message("a person must look"))
    result = asyncio.run(sdk.Runner.run(sdk.agent_with(waiter, model), "wait", run_config=sdk.NO_TRACES))
    assert result.interruptions == [] and result.final_output == "a person must look"
    answer = tool_outputs(model)["call-1"]
    assert answer["status"] == "stopped" and answer["reason"] == "authorization_denied"
    assert [o["kind"] for o in answer["decision"]["options"]] == ["recheck", "close"]
    assert sim.request_count("forbidden-1") == 1


def test_cancelling_the_run_cancels_the_watch_and_leaves_it_to_resume(
    sim: Simulator, contract: Path, home: Path
) -> None:
    """The approval check's watch is the API's `watch`: a cancelled run stops it within one request, audited."""
    from tests.integrations import agents_kit as sdk

    waiter = sdk.openai_agents_tool(contract, home=home)
    agent = sdk.agent_with(waiter, sdk.ScriptedModel(sdk.tool_call("never-1")))

    async def scenario() -> None:
        run = asyncio.create_task(sdk.Runner.run(agent, "wait", run_config=sdk.NO_TRACES))
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
    from tests.integrations import agents_kit as sdk

    for make in (sdk.openai_agents_tool, langgraph_tool):
        with pytest.raises(TypeError, match=r"unexpected keyword argument 'max_request'.*max_requests"):
            make(contract, home=home, max_request=2)  # type: ignore[call-arg]
