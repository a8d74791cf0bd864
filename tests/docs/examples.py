"""The examples of README.md and docs/*.md, read as a reader sees them: every fenced block, in order, with what
the line before it says (`<!-- not run: reason -->` keeps a block out of the run, and says why)."""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RUN = ("sh", "python")
"""The languages whose blocks are run; `toml` blocks are read as contracts."""

_FENCE = re.compile(r"^```(\S*)\s*$")
_NOT_RUN = re.compile(r"^<!--\s*not run:\s*(.*?)\s*-->$")
_EXPECTED_EXIT = re.compile(r"#.*\bexit (\d+)\b")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    not_run: str | None  # the reason given, when the block is kept out of the run

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def documents() -> list[Path]:
    """README.md and every page of docs/ (new pages included as they land)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    n = 0
    while n < len(lines):
        opened = _FENCE.match(lines[n])
        if not opened:
            n += 1
            continue
        start = n
        n += 1
        while n < len(lines) and not lines[n].startswith("```"):
            n += 1
        before = next((lines[k].strip() for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        marked = _NOT_RUN.match(before)
        text = "\n".join(lines[start + 1 : n]) + "\n"
        found.append(Block(path, start + 1, opened.group(1), text, marked.group(1) if marked else None))
        n += 1
    return found


def every_block() -> list[Block]:
    return [block for path in documents() for block in blocks(path)]


def shell_script(text: str) -> str:
    """The block as bash runs it, stopping at the first command that fails: a line whose comment says `exit N`
    must end with exactly that code instead (`pollwarden audit verify   # exit 5: ...`)."""
    out = ["set -euo pipefail"]
    for line in text.splitlines():
        expected = _EXPECTED_EXIT.search(line)
        if expected and not line.rstrip().endswith("\\") and not line.lstrip().startswith("#"):
            command = line[: line.index("#")].rstrip()
            out.append(f"set +e; {command}; rc=$?; set -e")
            code = expected.group(1)
            out.append(f'[ "$rc" -eq {code} ] || {{ echo "exit $rc, not {code}: {_quoted(command)}" >&2; exit 1; }}')
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def _quoted(command: str) -> str:
    return command.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")


def contract_text(fragment: str, base: str) -> tuple[str, dict[str, str]]:
    """A whole contract from a block, and the vars to read it with: the block itself when it `use`s a shipped
    contract or names its own states, else `base` with the block's keys put in place of its own, table by table
    (where a `{base_url}` is declared, as the reference's blocks assume). A var the contract requires (declared
    empty) is given a value of its kind, as `--var` would."""
    data = tomllib.loads(fragment)
    if "use" in data or ("status_url" in data and "states" in data):
        merged = data
        text = fragment
    else:
        merged = _merge(tomllib.loads(base), {"vars": {"base_url": "http://127.0.0.1:8080"}})
        merged = _merge(merged, data)
        text = _dumps(merged)
    declared = merged.get("vars", {})
    given = {name: _a_value(name) for name, value in declared.items() if value == ""}
    return text, given


def _a_value(name: str) -> str:
    if name.endswith("_url"):
        return "http://127.0.0.1:8080"
    if name.endswith("_file"):
        return "/etc/hostname"
    return "acme/deploy"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        old = merged.get(key)
        merged[key] = _merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return merged


def _dumps(data: dict[str, Any], prefix: str = "") -> str:
    """TOML for what a contract holds: scalars, arrays of scalars, tables and arrays of tables."""
    lines: list[str] = []
    tables: list[str] = []
    for key, value in data.items():
        name = f"{prefix}{_key(key)}"
        if isinstance(value, dict):
            tables.append(f"[{name}]\n{_dumps(value, name + '.')}")
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            tables.extend(f"[[{name}]]\n{_dumps(item, name + '.')}" for item in value)
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    return "\n".join([*lines, *tables]) + "\n"


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))
