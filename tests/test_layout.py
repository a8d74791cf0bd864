"""The package's layout shows its layers (issue 25): few modules loose at the top, none over 600 lines, no import
circle between modules of one package, each package importing only the layers below it (`LAYERS`, the order
docs/design.md draws), no function over 8 parameters.

Everything is computed with `ast` over src/pollwarden, never by importing it. An offender that could not be fixed
yet is named in a PENDING set; each PENDING entry must still offend, so a fixed one is taken out of the set and
the set only shrinks.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pollwarden

PACKAGE = Path(pollwarden.__file__).resolve().parent
MAX_LOOSE = 8
MAX_LINES = 600
MAX_PARAMETERS = 8

PENDING_LONG: frozenset[str] = frozenset()
"""Modules still over MAX_LINES lines."""

PENDING_CIRCLES: frozenset[frozenset[str]] = frozenset()
"""Import circles (as the set of modules in one strongly connected group) not broken yet."""

LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "lazy", "clock", "foreground"),
    ("core",),
    ("events", "catalogue", "shown"),
    ("audit",),
    ("store",),
    ("transport",),
    ("engine",),
    ("actions",),
    ("home",),
    ("report",),
    ("api", "fleet", "console", "mcp_server", "simulator"),
    ("integrations", "isolation"),
    ("cli",),
    ("__main__",),
)
"""The packages (and loose modules) of pollwarden from the bottom up: each may import its own members and what
is in a layer below its own, never a layer above or a neighbour in its own layer."""

LOW_MODULES: dict[str, int] = {"home.directory": 1, "isolation.peers": 1}
"""Modules of the standard library's reach only (the home's paths and file modes; who the kernel says a user is),
in the core's layer, below the package they are kept in: the store and the audit keys write private files, the
engine names the OS user who installs a contract."""

PENDING_UPWARD: frozenset[tuple[str, str]] = frozenset()
"""Imports (module, package it reaches up to) that go against `LAYERS` and are not fixed yet."""

PENDING_WIDE: frozenset[str] = frozenset()
"""Functions (module:qualified.name) still taking more than MAX_PARAMETERS parameters."""


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    tree: ast.Module

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    @property
    def package(self) -> str:
        """The package this module is a member of (a package's __init__ belongs to the package above it)."""
        return self.name.rpartition(".")[0]


@functools.cache
def _modules() -> dict[str, Module]:
    """Every module of the package, parsed: on first use, not at import, since each xdist worker collects (imports)
    this file and only one runs its tests."""
    found: dict[str, Module] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        found[name] = Module(name, path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return found


def _imports(module: Module) -> Iterator[str]:
    """The pollwarden modules `module` imports, at any depth: a function's import closes a circle as surely, only
    later, and one under `if TYPE_CHECKING:` closes it for the reader and the type checker (the layer below
    names what it needs as a protocol of its own instead)."""
    base = module.name if module.is_package else module.package

    def walk(node: ast.AST) -> Iterator[str]:
        for child in ast.iter_child_nodes(node):
            yield from walk_one(child)

    def walk_one(node: ast.AST) -> Iterator[str]:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                target = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                target = node.module or ""
            yield target
            yield from (f"{target}.{alias.name}" for alias in node.names)
        else:
            yield from walk(node)

    for name in walk(module.tree):
        if name in _modules() and name != module.name:
            yield name


def _circles() -> set[frozenset[str]]:
    """Each group of two or more modules of one package that import one another round (Tarjan's strongly
    connected components over the imports between members of the same package)."""
    edges = {
        name: {
            other
            for other in _imports(module)
            if _modules()[other].package == module.package and not _modules()[other].is_package
        }
        for name, module in _modules().items()
        if not module.is_package
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group: set[str] = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.add(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.add(frozenset(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return groups


def _functions() -> dict[str, int]:
    """Every function and method, named module:qualified.name, with its count of parameters (self and cls not
    counted; *args and **kwargs count one each)."""
    counted: dict[str, int] = {}

    def walk(node: ast.AST, module: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                args = child.args
                names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
                if names and names[0] in ("self", "cls"):
                    names = names[1:]
                counted[f"{module}:{prefix}{child.name}"] = (
                    len(names) + (args.vararg is not None) + (args.kwarg is not None)
                )
                walk(child, module, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, module, f"{prefix}{child.name}.")
            else:
                walk(child, module, prefix)

    for name, module in _modules().items():
        walk(module.tree, name, "")
    return counted


def _lines(module: Module) -> int:
    return len(module.path.read_text(encoding="utf-8").splitlines())


def test_at_most_eight_modules_loose_at_the_top_of_the_package() -> None:
    loose = sorted(n for n, m in _modules().items() if m.package == "pollwarden" and not m.is_package)
    assert len(loose) <= MAX_LOOSE, loose


def test_no_module_over_600_lines() -> None:
    long = {name for name, module in _modules().items() if _lines(module) > MAX_LINES}
    assert sorted(long - PENDING_LONG) == []
    assert sorted(PENDING_LONG - long) == [], "fixed: take these out of PENDING_LONG"


def test_no_import_circle_between_modules_of_one_package() -> None:
    circles = _circles()
    assert sorted(map(sorted, circles - PENDING_CIRCLES)) == []
    assert sorted(map(sorted, PENDING_CIRCLES - circles)) == [], "fixed: take these out of PENDING_CIRCLES"


def _short(name: str) -> str:
    return name.removeprefix("pollwarden.")


def _layer(name: str) -> int:
    """The layer of a module: its own (`LOW_MODULES`) or its top-level package's, or a loose module's."""
    short = _short(name)
    if short in LOW_MODULES:
        return LOW_MODULES[short]
    top = short.split(".")[0]
    return next(i for i, layer in enumerate(LAYERS) if top in layer)


def _upward() -> set[tuple[str, str]]:
    """Every import of a module into a layer not below its own, as (module, the package it reaches)."""
    found: set[tuple[str, str]] = set()
    for name, module in _modules().items():
        if name == "pollwarden":
            continue
        top = _short(name).split(".")[0]
        for other in _imports(module):
            if other == "pollwarden" or _short(other).split(".")[0] == top:
                continue
            if _layer(other) >= _layer(name):
                found.add((_short(name), _short(other).split(".")[0]))
    return found


def test_every_package_is_in_a_layer() -> None:
    named = {p for layer in LAYERS for p in layer}
    tops = {_short(n).split(".")[0] for n in _modules() if n != "pollwarden"}
    assert sorted(tops - named) == [], "put each new package (or loose module) in a layer of LAYERS"
    assert sorted(named - tops) == []


def test_each_package_imports_only_the_layers_below_it() -> None:
    upward = _upward()
    assert sorted(upward - PENDING_UPWARD) == []
    assert sorted(PENDING_UPWARD - upward) == [], "fixed: take these out of PENDING_UPWARD"


def test_no_function_over_eight_parameters() -> None:
    wide = {name for name, count in _functions().items() if count > MAX_PARAMETERS}
    assert sorted(wide - PENDING_WIDE) == []
    assert sorted(PENDING_WIDE - wide) == [], "fixed: take these out of PENDING_WIDE"


def test_the_parts_of_docs_design_md_that_code_cites_exist() -> None:
    """A comment that says why by pointing at docs/design.md points at a heading or a bold term that is there."""
    design = (PACKAGE.parent.parent / "docs" / "design.md").read_text(encoding="utf-8")
    parts = {m.group(1).casefold() for m in re.finditer(r"^#+ (.+)$", design, re.M)}
    parts |= {m.group(1).casefold().rstrip(".:") for m in re.finditer(r"\*\*([^*]+)\*\*", design)}
    cited = re.compile(r'(?:DESIGN|design)\.md[,:]? "([^"]+)"')
    sources = [*PACKAGE.rglob("*.py"), *(PACKAGE.parent.parent / "tests").rglob("*.py")]
    missing = sorted(
        f"{path.name}: {m.group(1)}"
        for path in sources
        for m in cited.finditer(path.read_text(encoding="utf-8"))
        if m.group(1).casefold() not in parts
    )
    assert missing == []
    outside = [path.name for path in sources if path.name != "test_layout.py" and "DESIGN.md" in path.read_text()]
    assert outside == [], "there is no DESIGN.md in the repository: cite docs/design.md"


def test_the_checks_see_what_they_check() -> None:
    """The walk finds the package's modules and the imports between them, so an empty answer above means
    something (a broken walk would pass every check)."""
    assert len(_modules()) > 100
    assert "pollwarden.core.decide" in set(_imports(_modules()["pollwarden.engine.flow"]))
    assert "pollwarden.engine.flow" in set(_imports(_modules()["pollwarden.engine"]))
    functions = _functions()
    assert functions["pollwarden.core.durations:parse_duration"] >= 1
    assert any(count > MAX_PARAMETERS // 2 for count in functions.values())


def test_no_file_at_the_repository_root_has_a_name_with_blanks_at_its_ends() -> None:
    """A path built from a blank name (`--db " "`) once left files named " " and " -writer.lock" at the root, and
    they were committed; such a name is always a mistake (and hard to see in a listing)."""
    root = PACKAGE.parent.parent
    assert sorted(repr(p.name) for p in root.iterdir() if p.name != p.name.strip()) == []
