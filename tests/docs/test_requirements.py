"""Every requirement id (R1-R49, docs/requirements.md) is cited by at least one test that checks it: in the test's
docstring or a comment in its body, in its class's docstring, or in the docstring of a test module whose tests
all check it. A citation anywhere else (a helper, a fixture, a string) does not count."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_ID = re.compile(r"\bR(\d+)\b")


def defined() -> set[int]:
    text = (ROOT / "docs" / "requirements.md").read_text(encoding="utf-8")
    return {int(n) for n in re.findall(r"^- \*\*R(\d+)\*\*", text, re.MULTILINE)}


def _comments(source: str) -> dict[int, str]:
    """Each line's comment, by line number."""
    found: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string
    return found


def _tests(tree: ast.Module) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    """Each test function, with its class's docstring ("" outside a class)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
            yield node, ""
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name.startswith("test_"):
                    yield item, ast.get_docstring(node) or ""


def citations() -> dict[int, list[str]]:
    """Each cited id, with the tests that cite it (`path::name`)."""
    cited: dict[int, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        source = path.read_text(encoding="utf-8")
        if not _ID.search(source):
            continue
        tree = ast.parse(source)
        comments = _comments(source)
        module = ast.get_docstring(tree) or ""
        for test, in_class in _tests(tree):
            end = test.end_lineno or test.lineno
            body = " ".join(text for line, text in comments.items() if test.lineno <= line <= end)
            text = " ".join([module, in_class, ast.get_docstring(test) or "", body])
            for n in {int(found) for found in _ID.findall(text)}:
                cited.setdefault(n, []).append(f"{path.relative_to(ROOT)}::{test.name}")
    return cited


def test_every_requirement_is_cited_by_a_test_that_checks_it() -> None:
    ids = defined()
    assert ids == set(range(1, 50)), sorted(set(range(1, 50)) ^ ids)
    missing = sorted(ids - set(citations()))
    assert missing == [], f"cited by no test: {', '.join(f'R{n}' for n in missing)}"


def test_no_test_cites_an_id_the_requirements_do_not_define() -> None:
    unknown = {n: where for n, where in citations().items() if n not in defined()}
    assert unknown == {}, unknown
