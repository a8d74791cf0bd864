"""The LangGraph tool on a real graph (StateGraph, InMemorySaver, a thread) against the loopback simulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator, Step
from tests.conftest import write_contract

# langgraph is imported inside each test (tests/integrations/langgraph_kit.py), and xdist runs this file's tests on
# one worker (tests/conftest.py ONE_WORKER): at collection every worker paid for it.

RUNNING = Step(body={"state": "running"})


def thread(name: str) -> Any:
    return {"configurable": {"thread_id": name}}


@pytest.fixture
def contract(sim: Simulator, tmp_path: Path) -> Path:
    return write_contract(tmp_path / "c.toml", sim.url, base_delay="20ms", max_delay="50ms")


def test_a_node_that_runs_again_resumes_the_same_operation(sim: Simulator, contract: Path, home: Path) -> None:
    from tests.integrations import langgraph_kit as lg

    sim.add_job(
        "job-1", [Step(body={"state": "running"}, times=2), Step(body={"state": "succeeded", "result_url": "/r/1"})]
    )
    tool = lg.langgraph_tool(contract, home=home)
    app = lg.graph(tool, fail_first=[True])
    with pytest.raises(RuntimeError, match="crashed"):
        app.invoke({"job": "job-1"}, thread("t-1"))
    assert sim.request_count("job-1") == 3
    done = app.invoke(None, thread("t-1"))  # the checkpoint's pending node runs again from its start
    assert done["out"]["status"] == "succeeded" and done["out"]["result"] == "/r/1"
    assert sim.request_count("job-1") == 3  # resumed the succeeded operation: no request beyond the plan
    op = lg.operation_id("t-1", "wait_for_job", "exports", "job-1")
    assert done["out"]["operation_id"] == op == "lg:t-1:wait_for_job:exports:job-1"
    again = app.invoke({"job": "job-1"}, thread("t-1"))  # the whole graph again on the thread: same operation
    assert again["out"]["operation_id"] == op and sim.request_count("job-1") == 3
    store = open_store(home)
    try:
        assert [s.record.operation_id for s in store.all()] == [op]
    finally:
        store.close()


def test_a_stop_with_a_decision_interrupts_and_a_persons_answer_lets_the_watch_go_on(
    sim: Simulator, contract: Path, home: Path
) -> None:
    from tests.integrations import langgraph_kit as lg

    sim.add_job(
        "job-2", [Step(body={"state": "running"}, times=3), Step(body={"state": "succeeded", "result_url": "/r/2"})]
    )
    app = lg.graph(lg.langgraph_tool(contract, home=home, max_requests=2))
    first = app.invoke({"job": "job-2"}, thread("t-2"))
    (asked,) = first["__interrupt__"]
    decision = asked.value
    assert decision["reason"] == "request_budget_exhausted"
    assert [(o["number"], o["kind"]) for o in decision["options"]] == [(1, "extend"), (2, "close")]
    assert "Checks used: 2 of 2 checks" in decision["question"] and sim.request_count("job-2") == 2
    # No name: nothing is decided, the graph asks again with the same decision and says why.
    second = app.invoke(lg.Command(resume={"decision": decision["decision_id"], "option": 1}), thread("t-2"))
    (again,) = second["__interrupt__"]
    assert again.value["decision_id"] == decision["decision_id"]
    assert '"by" must name the person deciding' in again.value["problem"]
    done = app.invoke(lg.Command(resume=lg.decision_answer(decision, option=1, by="alice")), thread("t-2"))
    assert done["out"]["status"] == "succeeded" and done["out"]["result"] == "/r/2"
    assert sim.request_count("job-2") == 4
    store = open_store(home)
    try:
        (decided,) = store.decisions(decision["operation_id"])
        assert (decided.status, decided.decided_by, decided.option) == ("decided", "alice", 1)
    finally:
        store.close()


def test_each_answer_is_applied_once_when_langgraph_replays_the_node(
    sim: Simulator, contract: Path, home: Path
) -> None:
    """A second stop in the same tool call: on the second resume LangGraph replays the first answer first; it
    names the first decision, already applied, so it is skipped and never applied to the second."""
    from tests.integrations import langgraph_kit as lg

    sim.add_job(
        "job-3", [Step(body={"state": "running"}, times=7), Step(body={"state": "succeeded", "result_url": "/r/3"})]
    )
    app = lg.graph(lg.langgraph_tool(contract, home=home, max_requests=2))
    first = app.invoke({"job": "job-3"}, thread("t-3"))["__interrupt__"][0].value
    second = app.invoke(lg.Command(resume=lg.decision_answer(first, option=1, by="alice")), thread("t-3"))
    stopped_again = second["__interrupt__"][0].value
    assert stopped_again["decision_id"] != first["decision_id"] and "problem" not in stopped_again
    assert sim.request_count("job-3") == 6  # 2, then the 4 more checks alice granted
    done = app.invoke(lg.Command(resume=lg.decision_answer(stopped_again, option=1, by="bob")), thread("t-3"))
    assert done["out"]["status"] == "succeeded" and sim.request_count("job-3") == 8
    store = open_store(home)
    try:
        answered = [(d.request.decision_id, d.decided_by) for d in store.decisions(first["operation_id"])]
    finally:
        store.close()
    assert answered == [(first["decision_id"], "alice"), (stopped_again["decision_id"], "bob")]


def test_a_refusal_ends_the_tool_call_with_the_stop(sim: Simulator, contract: Path, home: Path) -> None:
    from tests.integrations import langgraph_kit as lg

    sim.add_job("job-4", [RUNNING])
    app = lg.graph(lg.langgraph_tool(contract, home=home, max_requests=1))
    asked = app.invoke({"job": "job-4"}, thread("t-4"))["__interrupt__"][0].value
    done = app.invoke(lg.Command(resume=lg.decision_answer(asked, refuse=True, by="carol")), thread("t-4"))
    assert done["out"]["status"] == "stopped" and done["out"]["reason"] == "request_budget_exhausted"
    assert done["out"]["decision"] is None and sim.request_count("job-4") == 1
    store = open_store(home)
    try:
        (refused,) = store.decisions(asked["operation_id"])
        assert (refused.status, refused.decided_by) == ("refused", "carol")
    finally:
        store.close()


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ("yes", "must be a mapping"),
        ({"decision": "d", "option": 1, "by": "a", "force": True}, "unknown keys force"),
        ({"option": 1, "by": "a"}, 'must name its "decision"'),
        ({"decision": "d", "option": True, "by": "a"}, '"option" must be one of the option numbers'),
        ({"decision": "d", "option": 1, "refuse": True, "by": "a"}, 'give one of "option"'),
        ({"decision": "d", "by": "a"}, 'give one of "option"'),
        ({"decision": "d", "option": 1, "by": "al\x1bice"}, "no control characters"),
        ({"decision": "d", "option": 9, "by": "alice"}, "has no option 9"),
        ({"decision": "d-other", "option": 1, "by": "alice"}, "names decision 'd-other'"),
        ({"decision": "d", "option": 2, "by": "alice", "note": 7}, '"note" must be plain text'),
    ],
)
def test_a_resume_value_that_is_no_persons_answer_changes_nothing(
    sim: Simulator, contract: Path, home: Path, answer: Any, problem: str
) -> None:
    from tests.integrations import langgraph_kit as lg

    sim.add_job("job-5", [RUNNING])
    app = lg.graph(lg.langgraph_tool(contract, home=home, max_requests=1))
    asked = app.invoke({"job": "job-5"}, thread("t-5"))["__interrupt__"][0].value
    if isinstance(answer, dict) and answer.get("decision") == "d":
        answer = {**answer, "decision": asked["decision_id"]}
    again = app.invoke(lg.Command(resume=answer), thread("t-5"))["__interrupt__"][0].value
    assert again["decision_id"] == asked["decision_id"] and problem in again["problem"]
    store = open_store(home)
    try:
        assert [d.status for d in store.decisions(asked["operation_id"])] == ["open"]
    finally:
        store.close()
    assert sim.request_count("job-5") == 1


def test_an_answer_someone_else_overtook_is_reported_not_applied(sim: Simulator, contract: Path, home: Path) -> None:
    from pollwarden.home.operating import decide
    from tests.integrations import langgraph_kit as lg

    sim.add_job("job-6", [RUNNING])
    app = lg.graph(lg.langgraph_tool(contract, home=home, max_requests=1))
    asked = app.invoke({"job": "job-6"}, thread("t-6"))["__interrupt__"][0].value
    store = open_store(home)
    try:
        decide(store, asked["decision_id"], option=1, refuse=False, by="dave", note=None)  # the CLI's path
    finally:
        store.close()
    # dave's extension let the watch go on; it stops again (4 more checks, still running) with a new decision.
    again = app.invoke(lg.Command(resume=lg.decision_answer(asked, option=2, by="erin")), thread("t-6"))
    value = again["__interrupt__"][0].value
    assert value["decision_id"] != asked["decision_id"]
    assert f"decision {asked['decision_id']} was already decided by dave" in value["problem"]
    assert sim.request_count("job-6") == 5


def test_bad_input_is_a_clear_tool_error(sim: Simulator, contract: Path, home: Path) -> None:
    from tests.integrations import langgraph_kit as lg

    tool = lg.langgraph_tool(contract, home=home)
    no_thread = tool.invoke({"job_id": "job-7"})
    assert "needs the graph's thread" in no_thread
    bad_job = tool.invoke({"job_id": "a\x00b"}, {"configurable": {"thread_id": "t-7"}})
    assert "job_id" in bad_job and "control character" in bad_job
    assert sim.requests() == []
    with pytest.raises(ValueError, match="vars must be a mapping"):
        lg.langgraph_tool(contract, home=home, vars="x=1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="useful_for"):
        lg.langgraph_tool(contract, home=home, useful_for="soon")


def test_the_tools_limits_are_what_a_new_operation_starts_with(sim: Simulator, contract: Path, home: Path) -> None:
    """(A resumed one keeps its own: the extension tests above would stop at once if max_requests=2 narrowed it.)"""
    from tests.integrations import langgraph_kit as lg

    sim.add_job("job-11", [Step(body={"state": "succeeded", "result_url": "/r/11"})])
    app = lg.graph(lg.langgraph_tool(contract, home=home, deadline="40s", max_requests=3, useful_for="30s"))
    out = app.invoke({"job": "job-11"}, thread("t-11"))["out"]
    assert out["status"] == "succeeded"
    operation = out["operation"]
    assert operation["max_status_requests"] == 3 and operation["useful_until"] is not None


def test_long_or_odd_thread_ids_are_hashed_into_a_valid_operation_id() -> None:
    from pollwarden.core.admission import operation_id_problem
    from tests.integrations import langgraph_kit as lg

    readable = lg.operation_id("t", "wait_for_job", "exports", "job-1")
    odd = [
        lg.operation_id("t" * 200, "w", "c", "j"),
        lg.operation_id("a:b", "w", "c", "j"),
        lg.operation_id("a", "b:w", "c", "j"),
    ]
    assert all(operation_id_problem(op) is None for op in [readable, *odd])
    assert len(set(odd)) == 3 and all(op.startswith("lg-") for op in odd)
    assert lg.operation_id("t/1", "w", "c", "j") != lg.operation_id("t 1", "w", "c", "j")


def test_in_a_tool_node_the_model_gets_the_outcome_and_never_the_credential(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """How a model's graph calls it: a ToolNode on an AIMessage's tool call. The provider echoes the credential
    in its state; neither the interrupt nor the tool message carries it."""
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.graph import MessagesState
    from langgraph.prebuilt import ToolNode

    from tests.integrations import langgraph_kit as lg

    token = "s3cret-token-for-the-tool-node"
    monkeypatch.setenv("SIM_TOKEN", token)
    with Simulator(token=token) as sim:
        contract = write_contract(
            tmp_path / "t.toml", sim.url, base_delay="20ms", max_delay="50ms", secret_env="SIM_TOKEN"
        )
        sim.add_job("job-8", [Step(body={"state": "running", "error": token}), Step(body={"state": f"odd {token}"})])
        builder = lg.StateGraph(MessagesState)
        builder.add_node("tools", ToolNode([lg.langgraph_tool(contract, home=home)]))
        builder.add_edge(lg.START, "tools")
        builder.add_edge("tools", lg.END)
        app = builder.compile(checkpointer=lg.InMemorySaver())
        call = AIMessage(content="", tool_calls=[{"name": "wait_for_job", "args": {"job_id": "job-8"}, "id": "call-8"}])
        asked = app.invoke({"messages": [call]}, thread("t-8"))["__interrupt__"][0].value
        assert asked["reason"] == "unknown_state" and "Last state: odd [secret]" in asked["question"]
        assert token not in repr(asked)
        close = next(o["number"] for o in asked["options"] if o["kind"] == "close")
        done = app.invoke(lg.Command(resume=lg.decision_answer(asked, option=close, by="alice")), thread("t-8"))
        answer = done["messages"][-1]
        assert isinstance(answer, ToolMessage) and answer.tool_call_id == "call-8"
        assert '"status": "stopped"' in str(answer.content) and token not in str(answer.content)
        assert sim.request_count("job-8") == 2


def test_a_job_another_operation_watches_is_refused_with_that_operation(
    sim: Simulator, contract: Path, home: Path
) -> None:
    from pollwarden import Watch
    from tests.integrations import langgraph_kit as lg

    sim.add_job("job-9", [Step(body={"state": "running"})])
    stopped = Watch(contract, "job-9", home=home, operation_id="by-hand", max_requests=1).run()
    assert stopped.operation_id == "by-hand" and sim.request_count("job-9") == 1
    app = lg.graph(lg.langgraph_tool(contract, home=home))
    refused = app.invoke({"job": "job-9"}, thread("t-9"))["out"]
    assert isinstance(refused, str) and "already watched by operation by-hand" in refused
    assert sim.request_count("job-9") == 1  # one job, one budget: no second one from a thread


def test_inspect_is_not_applied_from_the_graph(sim: Simulator, tmp_path: Path, home: Path) -> None:
    """Opening a console decides nothing: the graph asks again, the decision stays open, no event is added."""
    from tests.integrations import langgraph_kit as lg

    extra = '[escalation]\nconsole_url = "https://console.example/jobs/{job_id}"\n'
    contract = write_contract(tmp_path / "i.toml", sim.url, base_delay="20ms", max_delay="50ms", extra=extra)
    sim.add_job("job-10", [RUNNING])
    app = lg.graph(lg.langgraph_tool(contract, home=home, max_requests=1))
    asked = app.invoke({"job": "job-10"}, thread("t-10"))["__interrupt__"][0].value
    inspect = next(o for o in asked["options"] if o["kind"] == "inspect")
    assert "https://console.example/jobs/job-10" in inspect["effect"]
    answer = lg.decision_answer(asked, option=inspect["number"], by="alice")
    again = app.invoke(lg.Command(resume=answer), thread("t-10"))
    value = again["__interrupt__"][0].value
    assert value["decision_id"] == asked["decision_id"] and "inspect decides nothing" in value["problem"]
    store = open_store(home)
    try:
        assert [d.status for d in store.decisions(asked["operation_id"])] == ["open"]
        assert "inspected" not in [e.kind for e in store.events(asked["operation_id"])]
    finally:
        store.close()
