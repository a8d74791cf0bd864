"""JMESPath expressions over a provider's JSON, evaluated so that no answer can make them raise.

A contract names every field it reads as a JMESPath expression (the language botocore waiters and the AWS CLI
use), so one field, several fields, booleans and presence are all said in the contract, never in code. The
`jmespath` package raises a bare `TypeError` on some comparisons (a string ordered against a number) and
`JMESPathTypeError` on functions given the wrong type; a provider's body decides both, so every evaluation is
caught here and becomes a `Lookup` with a problem that names the field and what was found.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import PollwardenError
from .expr_cost import MAX_STEPS, StepsExceeded, budgeted_class, shape_problem

if TYPE_CHECKING:
    import jmespath


@functools.cache
def _options() -> jmespath.Options:
    """Built on first use: `import pollwarden.core` loads only the standard library (tests/test_imports.py)."""
    import jmespath
    import jmespath.functions

    class _Functions(jmespath.functions.Functions):
        """Stock JMESPath has no case folding; Azure's `status` is documented case-insensitive."""

        @jmespath.functions.signature({"types": ["string"]})
        def _func_lower(self, s: str) -> str:
            return s.lower()

        @jmespath.functions.signature({"types": ["string"]})
        def _func_upper(self, s: str) -> str:
            return s.upper()

    return jmespath.Options(custom_functions=_Functions())


class ExpressionError(PollwardenError, ValueError):
    """The text is not an expression this module will evaluate; the message says where it breaks.

    Raised while a contract loads, where it becomes a ContractError naming the key (exit 2)."""


@dataclass(frozen=True)
class Lookup:
    """What an expression found: `present` is False when a key it follows is absent (a plain path only) or it
    evaluated to null; `problem` is set when the evaluation itself failed on this document."""

    present: bool
    value: Any = None
    missing: bool = False
    problem: str | None = None
    plain: bool = True


@dataclass(frozen=True)
class _Compiled:
    parsed: Any
    path: tuple[str, ...] | None  # set for a plain dotted path, so "missing" and "null" can be told apart


def check(text: str) -> None:
    """Raise ExpressionError unless `text` compiles; called at contract load so a typo is exit 2 at start-up."""
    _compile(text)


@functools.lru_cache(maxsize=1024)
def _compile(text: str) -> _Compiled:
    import jmespath
    import jmespath.exceptions

    if not text.strip():
        raise ExpressionError("is empty")
    path = _plain_path(text)
    try:
        parsed = jmespath.compile(text)
    except RecursionError:
        # jmespath's parser recurses once per nesting level: a contract cannot crash start-up with it.
        raise ExpressionError("is nested too deeply to be parsed") from None
    except jmespath.exceptions.JMESPathError as exc:
        if path is None:
            raise ExpressionError(f"is not a JMESPath expression ({_where(exc)}); {_EXAMPLE}") from None
        # A dotted path of names JMESPath would need quoted (`poll-after`, `0`): contracts written before
        # fields were expressions kept working by quoting each segment, which is what they meant.
        parsed = jmespath.compile(".".join(json.dumps(part) for part in path))
    _check_functions(parsed.parsed)
    if path is None and (problem := shape_problem(parsed.parsed)) is not None:
        raise ExpressionError(f"{problem}: its cost on one answer must stay bounded (docs/contracts.md)")
    return _Compiled(parsed, path)


def _check_functions(tree: Any) -> None:
    """jmespath resolves function names and argument counts only while evaluating, so a typo (`lowr(status)`)
    would load and then stop the first answer as an invalid_response blaming the provider; check them now."""
    functions = _options().custom_functions
    assert functions is not None, "_options() always installs the functions"
    table: dict[str, Any] = functions.FUNCTION_TABLE
    pending = [tree]
    while pending:  # iterative: the tree may be as deep as the parser allowed
        node = pending.pop()
        if not isinstance(node, dict):
            continue
        children = node.get("children") or []
        pending.extend(children)
        if node.get("type") != "function_expression":
            continue
        name = node.get("value")
        if name not in table:
            raise ExpressionError(f"calls no function {name}(); {_EXAMPLE}")
        signature = table[name]["signature"]
        given = len(children)
        variadic = bool(signature) and bool(signature[-1].get("variadic"))
        if (given < len(signature)) if variadic else (given != len(signature)):
            wanted = len(signature)
            plural = "" if wanted == 1 else "s"
            takes = f"at least {wanted} argument{plural}" if variadic else f"{wanted} argument{plural}"
            raise ExpressionError(f"calls {name}(), which takes {takes}, given {given}")


def _plain_path(text: str) -> tuple[str, ...] | None:
    """The segments of `a.b.c` when every segment is a bare key; None for anything with operators."""
    parts = tuple(text.split("."))
    if all(parts) and all(not set(part) & set(" \t\"'`[]{}()|&!=<>*@,:?") for part in parts):
        return parts
    return None


_EXAMPLE = "write a field like 'status' or 'job.state', or an expression like \"status == 'done' && 'ok'\""


def _where(exc: Exception) -> str:
    position = getattr(exc, "lex_position", None)
    token = getattr(exc, "token_value", None)
    if isinstance(position, int) and token is not None:
        return f"it breaks at column {position + 1}, near {str(token)[:20]!r}"
    if isinstance(position, int):
        return f"it breaks at column {position + 1}"
    return "it cannot be parsed"


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def lookup(text: str, document: Any) -> Lookup:
    """Evaluate `text` against a parsed JSON document; never raises for any document."""
    import jmespath.exceptions

    compiled = _compile(text)
    if compiled.path is not None:
        current = document
        for part in compiled.path:
            if not isinstance(current, dict) or part not in current:
                return Lookup(present=False, missing=True)
            current = current[part]
        return Lookup(present=current is not None, value=current)
    try:
        value = budgeted_class()(_options(), MAX_STEPS).visit(compiled.parsed.parsed, document)
    except StepsExceeded:
        return Lookup(present=False, problem=f"it takes more than {MAX_STEPS} steps on this body", plain=False)
    except (jmespath.exceptions.JMESPathError, TypeError, ValueError, ArithmeticError, RecursionError) as exc:
        return Lookup(present=False, problem=_evaluation_problem(exc), plain=False)
    return Lookup(present=value is not None, value=value, plain=False)


def _evaluation_problem(exc: Exception) -> str:
    import jmespath.exceptions

    if isinstance(exc, TypeError) and not isinstance(exc, jmespath.exceptions.JMESPathError):
        # Python's own words here name Python types ("'<' not supported between 'str' and 'int'").
        return "it compares values of different JSON types (a string with a number)"
    if isinstance(exc, jmespath.exceptions.JMESPathTypeError):
        return f"a function got the wrong JSON type: {_json_words(_first_line(exc))}"
    return f"it cannot be evaluated on this body ({type(exc).__name__})"


_PY_TYPES = {
    "str": "string",
    "int": "number",
    "float": "number",
    "bool": "boolean",
    "NoneType": "null",
    "null": "null",
    "dict": "object",
    "list": "array",
}


def _json_words(text: str) -> str:
    return re.sub(r"\b(str|int|float|bool|NoneType|dict|list)\b", lambda m: _PY_TYPES[m.group(1)], text)


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages a person reads (never "NoneType")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "value"


def described(value: Any) -> str:
    """'a number', 'an array', 'null': how a message names what was found instead."""
    name = json_type(value)
    return name if name == "null" else ("an " if name[0] in "aeiou" else "a ") + name


def absent_words(found: Lookup) -> str:
    """'is missing' for an absent key, 'is null' for an explicit null, and the reason when it failed."""
    if found.problem is not None:
        return f"cannot be read: {found.problem}"
    if found.missing:
        return "is missing"
    return "is null" if found.plain else "evaluates to null (a field it reads is missing or null)"


def finite_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None
