"""The Agents SDK side of tests/integrations/test_openai_agents.py: a scripted model and the items it answers with.

Its own module, imported inside the tests, because importing the SDK (with openai and pydantic's models) costs ~3 s
of CPU: at the test module's top, every pytest worker paid it when collecting, whether it ran these tests or not."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage
from agents.items import TResponseInputItem, TResponseStreamEvent
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from pollwarden.integrations.openai_agents import AgentsJobTool, openai_agents_tool

__all__ = ["NO_TRACES", "Runner", "ScriptedModel", "agent_with", "message", "openai_agents_tool", "tool_call"]

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


def agent_with(waiter: AgentsJobTool, model: Model) -> Agent[Any]:
    return Agent(name="ops", instructions="wait for the job", tools=[waiter.tool], model=model)
