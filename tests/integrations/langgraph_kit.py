"""The LangGraph side of tests/integrations/test_langgraph.py: a one-node graph around the tool.

Its own module, imported inside the tests, because importing langgraph and langchain_core costs over a second of
CPU: at the test module's top, every pytest worker paid it when collecting, whether it ran these tests or not."""

from __future__ import annotations

from typing import Any, TypedDict

from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from pollwarden.integrations.langgraph import decision_answer, langgraph_tool, operation_id

__all__ = [
    "END",
    "START",
    "Command",
    "InMemorySaver",
    "StateGraph",
    "decision_answer",
    "graph",
    "langgraph_tool",
    "operation_id",
]


class State(TypedDict, total=False):
    job: str
    out: dict[str, Any]


def graph(tool: BaseTool, *, fail_first: list[bool] | None = None) -> CompiledStateGraph[Any, Any, Any, Any]:
    """One node that calls the tool; `fail_first` makes the node raise once after the tool answered (a crash)."""

    def node(state: State) -> State:
        out = tool.invoke({"job_id": state["job"]})
        if fail_first:
            fail_first.pop()
            raise RuntimeError("the node crashed after the tool answered")
        return {"out": out}

    builder = StateGraph(State)
    builder.add_node("wait", node)
    builder.add_edge(START, "wait")
    builder.add_edge("wait", END)
    return builder.compile(checkpointer=InMemorySaver())
