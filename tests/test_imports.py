"""`import pollwarden.core` loads only the standard library, the package face loads the API on first use, and
the API and the CLI load each heavy dependency only in what needs it (issue 13).

Each check runs in a fresh interpreter: this test process has long since imported everything. These are
correctness checks of what is loaded, never timings: the time and memory of an import are measured by
`python -m bench.import_bench` (docs/performance.md, "Import cost").
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pollwarden
from pollwarden.cli import main
from pollwarden.cli.parser import Command, build_parser
from pollwarden.simulator import Simulator
from tests.conftest import write_contract

CORE = Path(pollwarden.__file__).resolve().parent / "core"
HEAVY = ("httpx", "cryptography", "psycopg", "psycopg_pool", "prometheus_client", "mcp", "anyio")
CONSOLE_AND_AGENTS = (
    "pollwarden.console",
    "pollwarden.mcp_server",
    "pollwarden.fleet.worker",
    "pollwarden.store.postgres",
)
"""Our own modules that carry a heavy dependency or a server: loaded only by the command that serves them."""


def _modules_after(code: str) -> list[str]:
    """What `code` adds to sys.modules beyond what the interpreter loaded at start-up (site hooks, __main__)."""
    prologue = "import json, sys; before = set(sys.modules)"
    epilogue = "print(json.dumps(sorted(set(sys.modules) - before)))"
    loaded: list[str] = json.loads(_ran(f"{prologue}\n{code}\n{epilogue}").splitlines()[-1])
    return loaded


def _ran(code: str) -> str:
    """The standard output of `code` run in a fresh interpreter, which must succeed."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, (code, out.stderr)
    return out.stdout


def _heavy(modules: list[str], also: tuple[str, ...] = ()) -> list[str]:
    """The loaded modules that belong to a heavy dependency, or to one of `also` (a package or a module)."""
    return [
        m for m in modules if m.split(".")[0] in HEAVY or any(m == name or m.startswith(name + ".") for name in also)
    ]


def _outside_stdlib(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] not in sys.stdlib_module_names]


def test_import_core_loads_only_the_standard_library_and_core() -> None:
    loaded = _modules_after("import pollwarden.core")
    ours = {"pollwarden", "pollwarden.errors", "pollwarden.lazy"}
    assert [m for m in _outside_stdlib(loaded) if m not in ours and not m.startswith("pollwarden.core")] == []
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []


def test_import_pollwarden_loads_no_dependency_until_a_name_is_used() -> None:
    loaded = _modules_after("import pollwarden; assert pollwarden.__version__")
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []
    assert "pollwarden.api" not in loaded
    used = _modules_after("import pollwarden; pollwarden.watch_sync")
    assert "pollwarden.api" in used


def test_the_python_api_loads_only_the_core_until_a_watch_runs() -> None:
    """Its names, and a Watch built (which checks the contract and the limits), need the core alone."""
    loaded = _modules_after(
        "import pollwarden\n"
        "from pollwarden import Outcome, Stopped, Succeeded, Watch, WatchError, watch, watch_sync\n"
        "from pollwarden.errors import PollwardenError\n"
        "Watch('openai-batch', 'batch_abc123', deadline='10m', max_requests=5)"
    )
    ours = {m for m in loaded if m.startswith("pollwarden") and not m.startswith("pollwarden.core")}
    assert ours == {
        "pollwarden",
        "pollwarden.lazy",
        "pollwarden.api",
        "pollwarden.catalogue",
        "pollwarden.errors",
    }
    assert _heavy(loaded, ("asyncio",)) == []


def test_a_watch_run_loads_the_store_and_its_crypto_and_no_other_heavy_dependency(
    sim: Simulator, tmp_path: Path, home: Path
) -> None:
    """Status requests go over pollwarden's own sockets: httpx is never loaded (webhooks go over them too)."""
    contract = write_contract(tmp_path / "c.toml", sim.url)
    loaded = _modules_after(
        "import pollwarden\n"
        f"outcome = pollwarden.watch_sync({str(contract)!r}, 'happy-7', home={str(home)!r})\n"
        "assert isinstance(outcome, pollwarden.Succeeded), outcome"
    )
    assert "pollwarden.engine.driver" in loaded and "pollwarden.store.sqlite" in loaded
    assert {m.split(".")[0] for m in _heavy(loaded, (*CONSOLE_AND_AGENTS, "asyncio"))} == {"cryptography"}


def _cli(*argv: str) -> str:
    """Run the CLI's `main` on argv, keeping its output out of the module list printed after it."""
    return (
        "import contextlib, io\n"
        "from pollwarden.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "    try:\n"
        f"        code = main({list(argv)!r})\n"
        "    except SystemExit as exc:\n"
        "        code = exc.code\n"
        "assert code == 0, code"
    )


def test_help_lists_every_command_and_loads_none_of_them() -> None:
    loaded = _modules_after(_cli("--help"))
    assert _heavy(loaded, (*CONSOLE_AND_AGENTS, "pollwarden.engine", "pollwarden.store.sqlite")) == []
    commands = {m for m in loaded if m.startswith("pollwarden.cli.")}
    assert commands == {
        "pollwarden.cli.app",
        "pollwarden.cli.common",
        "pollwarden.cli.interrupts",
        "pollwarden.cli.parser",
    }


def _commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> dict[str, Command]:
    """Every command line the parser knows (`audit verify`, `db upgrade`, ...) and the function it runs."""
    found: dict[str, Command] = {}
    if isinstance(parser.get_default("func"), Command):
        found[" ".join(words)] = parser.get_default("func")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, inner in action.choices.items():
                found |= _commands(inner, (*words, word))
    return found


def test_every_command_names_a_function_that_exists_and_help_lists_it(capsys: pytest.CaptureFixture[str]) -> None:
    """A command's module is imported only when it runs, so a wrong name would surface only then: checked here."""
    commands = _commands(build_parser())
    assert {"watch", "audit verify", "contracts show", "db upgrade", "mcp", "console"} <= set(commands)
    for line, target in commands.items():
        func = getattr(importlib.import_module(f"pollwarden.cli.{target.module}"), target.name)
        assert callable(func) and func.__name__ == target.name, line
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = capsys.readouterr().out
    assert all(f"\n    {line.split()[0]} " in listed for line in commands), listed


def test_status_on_sqlite_loads_the_crypto_and_nothing_it_does_not_use(tmp_path: Path) -> None:
    loaded = _modules_after(_cli("status", "--home", str(tmp_path)))
    assert "pollwarden.cli.inspect" in loaded and "pollwarden.store.sqlite" in loaded
    assert {m.split(".")[0] for m in _heavy(loaded, CONSOLE_AND_AGENTS)} == {"cryptography"}


def test_the_fleet_commands_load_prometheus_only_for_a_running_worker() -> None:
    loaded = _modules_after("import pollwarden.cli.fleet")
    assert "pollwarden.fleet.worker" in loaded
    assert _heavy(loaded, ("pollwarden.store.sqlite", *CONSOLE_AND_AGENTS[:2], "pollwarden.store.postgres")) == []
    metrics = _modules_after("from pollwarden.fleet.worker import Metrics; Metrics()")
    assert "prometheus_client" in metrics and "psycopg" not in metrics


def test_a_postgres_target_is_named_and_redacted_without_psycopg() -> None:
    loaded = _modules_after(
        "from pollwarden.home.operating import watch_command\n"
        "line = watch_command('op', db='postgresql://ana:s3cret@db/x')\n"
        "assert 's3cret' not in line and 'postgresql://ana@db/x' in line, line"
    )
    assert _heavy(loaded) == []


@pytest.mark.parametrize(
    "face", ["pollwarden", "pollwarden.audit", "pollwarden.store", "pollwarden.simulator", "pollwarden.integrations"]
)
def test_every_lazy_face_gives_each_name_from_its_module(face: str) -> None:
    """A face's `__all__`, its lazy table and its TYPE_CHECKING imports are three lists: each name must resolve,
    and to the very object its module defines (mypy checks the TYPE_CHECKING side)."""
    code = (
        f"import importlib, {face} as face\n"
        "for name in face.__all__:\n"
        "    value = getattr(face, name)\n"
        "    assert name in dir(face), name\n"
        "    if name != '__version__':\n"
        "        home = getattr(value, '__module__', None)\n"
        "        assert home is None or getattr(importlib.import_module(home), name, value) is value, name\n"
        "try:\n"
        "    face.no_such_name\n"
        "except AttributeError as exc:\n"
        "    assert 'no_such_name' in str(exc)\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')"
    )
    _ran(code)


def test_the_face_keeps_its_names() -> None:
    """Its list of names; that each resolves, and an unknown one is an AttributeError, is the test above."""
    code = (
        "import pollwarden, json\n"
        "names = sorted(pollwarden.__all__)\n"
        "from pollwarden import Progress, Succeeded, Stopped, Watch, WatchCancelled, WatchError, watch, watch_sync\n"
        "from pollwarden.api import Succeeded as S\n"
        "from pollwarden.report.progress import Progress as P\n"
        "assert Succeeded is S and pollwarden.Succeeded is S and Progress is P\n"
        "print(json.dumps(names))"
    )
    assert json.loads(_ran(code)) == sorted(
        [
            "Outcome",
            "Progress",
            "Stopped",
            "Succeeded",
            "Watch",
            "WatchCancelled",
            "WatchError",
            "__version__",
            "watch",
            "watch_sync",
        ]
    )


def test_the_progress_type_loads_with_the_core_alone() -> None:
    """An `on_progress` callback is typed with `pollwarden.Progress`: naming it loads no engine and no store."""
    loaded = _modules_after("from pollwarden import Progress")
    ours = {m for m in loaded if m.startswith("pollwarden") and not m.startswith("pollwarden.core")}
    assert ours == {
        "pollwarden",
        "pollwarden.lazy",
        "pollwarden.errors",
        "pollwarden.report",
        "pollwarden.report.progress",
    }
    assert _heavy(loaded, ("asyncio",)) == []


def test_the_api_function_watch_wins_over_the_submodule_of_the_same_name() -> None:
    for first in ("import pollwarden.engine", "from pollwarden import Stopped", "import pollwarden.cli"):
        _ran(f"{first}\nimport pollwarden, types\nassert callable(pollwarden.watch), pollwarden.watch")


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
