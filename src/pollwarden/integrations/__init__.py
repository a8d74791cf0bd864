"""Tools for agent frameworks, each an extra: `pollwarden[langgraph]` (a LangChain tool whose stops become
LangGraph interrupts) and `pollwarden[openai-agents]` (an Agents SDK function tool whose stops become approvals).

Lazy, like the package face: `import pollwarden.integrations` loads no framework; a name loads its module on
first use, and a framework that is not installed is an ImportError naming the extra to install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_face

if TYPE_CHECKING:
    from .langgraph import decision_answer, langgraph_tool
    from .openai_agents import AgentsJobTool, openai_agents_tool

__all__ = ["AgentsJobTool", "decision_answer", "langgraph_tool", "openai_agents_tool"]

__getattr__, __dir__ = lazy_face(
    __name__, {".langgraph": "decision_answer langgraph_tool", ".openai_agents": "AgentsJobTool openai_agents_tool"}
)
