"""`import pollwarden.core` loads only the standard library, and the package face loads the API on first use.

Each check runs in a fresh interpreter: this test process has long since imported everything.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pollwarden

CORE = Path(pollwarden.__file__).resolve().parent / "core"
HEAVY = ("httpx", "cryptography", "psycopg", "psycopg_pool", "prometheus_client", "mcp", "anyio")


def _modules_after(code: str) -> list[str]:
    """What `code` adds to sys.modules beyond what the interpreter loaded at start-up (site hooks, __main__)."""
    prologue = "import json, sys; before = set(sys.modules)"
    epilogue = "print(json.dumps(sorted(set(sys.modules) - before)))"
    out = subprocess.run(
        [sys.executable, "-c", f"{prologue}\n{code}\n{epilogue}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    loaded: list[str] = json.loads(out.splitlines()[-1])
    return loaded


def _outside_stdlib(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] not in sys.stdlib_module_names]


def test_import_core_loads_only_the_standard_library_and_core() -> None:
    loaded = _modules_after("import pollwarden.core")
    ours = {"pollwarden", "pollwarden.errors"}
    assert [m for m in _outside_stdlib(loaded) if m not in ours and not m.startswith("pollwarden.core")] == []
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []


def test_import_pollwarden_loads_no_dependency_until_a_name_is_used() -> None:
    loaded = _modules_after("import pollwarden; assert pollwarden.__version__")
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []
    assert "pollwarden.api" not in loaded
    used = _modules_after("import pollwarden; pollwarden.watch_sync")
    assert "pollwarden.api" in used and "httpx" in used


def test_the_face_keeps_its_names() -> None:
    code = (
        "import pollwarden, json\n"
        "names = sorted(pollwarden.__all__)\n"
        "assert set(names) <= set(dir(pollwarden)), set(names) - set(dir(pollwarden))\n"
        "from pollwarden import Succeeded, Stopped, Watch, WatchError, watch, watch_sync\n"
        "from pollwarden.api import Succeeded as S\n"
        "assert Succeeded is S and pollwarden.Succeeded is S\n"
        "try:\n"
        "    pollwarden.no_such_name\n"
        "except AttributeError as exc:\n"
        "    assert 'no_such_name' in str(exc)\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')\n"
        "print(json.dumps(names))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == sorted(
        ["Outcome", "Stopped", "Succeeded", "Watch", "WatchError", "__version__", "watch", "watch_sync"]
    )


def test_the_api_function_watch_wins_over_the_submodule_of_the_same_name() -> None:
    for first in ("import pollwarden.engine", "from pollwarden import Stopped", "import pollwarden.cli"):
        code = f"{first}\nimport pollwarden, types\nassert callable(pollwarden.watch), pollwarden.watch"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, (first, out.stderr)


def _imported_names(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every import in a file, lazy ones inside functions included."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.extend((0, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
    return found


PURE_LIBRARIES = {"jmespath"}
"""Third-party code the core may name: a pure evaluator of the contract's field expressions (no I/O, no
threads), imported only when an expression is first compiled, so `import pollwarden.core` still loads none."""


def test_core_sources_name_only_the_standard_library_core_and_the_error_tree() -> None:
    bad = []
    for path in sorted(CORE.glob("*.py")):
        for level, module in _imported_names(path):
            if level == 0 and module.split(".")[0] in sys.stdlib_module_names | PURE_LIBRARIES:
                continue
            if level == 1 or (level == 2 and module == "errors"):
                continue
            bad.append(f"{path.name}: {'.' * level}{module}")
    assert bad == []


def test_every_requirement_id_the_sources_cite_is_defined() -> None:
    root = CORE.parent.parent.parent
    defined = set(
        re.findall(r"^- \*\*(R\d+)\*\*", (root / "docs" / "requirements.md").read_text(encoding="utf-8"), re.M)
    )
    cited: set[str] = set()
    for path in [*(root / "src").rglob("*.py"), root / "README.md", *(root / "docs").glob("*.md")]:
        cited.update(re.findall(r"\bR\d+\b", path.read_text(encoding="utf-8")))
    assert cited, "the pattern found no citation at all"
    assert sorted(cited - defined, key=lambda r: int(r[1:])) == []
