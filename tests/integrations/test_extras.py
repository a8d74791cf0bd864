"""The framework tools are extras: nothing loads a framework until its tool is asked for, and a framework that is
not installed is an ImportError that names the extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.test_imports import _modules_after

FRAMEWORKS = ("langgraph", "langchain_core", "agents", "openai")


def test_the_integrations_face_loads_no_framework_until_a_tool_is_asked_for() -> None:
    loaded = _modules_after(
        "import pollwarden, pollwarden.integrations\nassert 'langgraph_tool' in dir(pollwarden.integrations)"
    )
    assert [m for m in loaded if m.split(".")[0] in FRAMEWORKS] == []
    assert not any(m.startswith("pollwarden.integrations.") for m in loaded)
    used = _modules_after("from pollwarden.integrations import langgraph_tool")
    assert "langgraph.types" in used and "agents" not in used


@pytest.mark.parametrize(
    ("module", "missing", "extra"),
    [
        ("langgraph", "langgraph", "langgraph"),
        ("langgraph", "langchain_core", "langgraph"),
        ("openai_agents", "agents", "openai-agents"),
    ],
)
def test_a_missing_framework_names_the_extra_to_install(module: str, missing: str, extra: str) -> None:
    code = (
        "import sys\n"
        f"sys.modules[{missing!r}] = None  # what an interpreter without the package finds\n"
        "try:\n"
        f"    import pollwarden.integrations.{module}\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('imported')\n"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert f"pip install 'pollwarden[{extra}]'" in ran.stdout
