"""What one JMESPath field may cost: bounded at load by its shape, and on each answer by a budget of steps.

A field expression runs on every answer, and JMESPath can multiply: `[@, @][]` doubles what it is given, so
twenty of those piped hold a million copies of one answer (issue 23: 5.3 s and 219 MiB for one poll). Two bounds
hold whatever the contract and the body say:

- at load (`shape_problem`, exit 2 naming the field): the expression's nesting, its size, how many times it walks
  an array (projections, filters, flattens, functions that apply an expression to each element), and its
  amplification: how many copies of its input its output may hold (a multiselect adds its branches, a pipe,
  projection or sub-expression multiplies its parts). Without that one, a single `to_string` or `==` over a value
  shared 2^20 times is exponential inside one step.
- on each answer (`Budgeted`): every node visited and every element a flatten, slice or function goes through is
  a step; past `MAX_STEPS` the evaluation ends and the field cannot be read on that body, which the core records
  as `invalid_response` naming the field, as it does for any other unreadable field. A body is capped in bytes
  already, but a cheap expression over a million small values is not cheap: this bounds that too.
"""

from __future__ import annotations

import functools
from typing import Any

from ..errors import PollwardenError

MAX_DEPTH = 32
"""Levels of the parsed expression; the deepest shipped one has 12."""
MAX_NODES = 256
"""Nodes of the parsed expression; the largest shipped one has 63."""
MAX_WALKS = 16
"""Projections, filters, flattens and functions given an `&expression`, each of which walks an array."""
MAX_AMPLIFICATION = 16
"""Copies of its input the expression's output may hold: `[@, @][] | [@, @][]` holds 4, twenty of them a million."""
MAX_STEPS = 100_000
"""Steps one evaluation may take on one body: 0.1-0.3 s of CPU at worst (a `to_string` per element, on a loaded
2-core machine), where a whole poll otherwise costs about 0.5 ms; a filter over 10,000 elements fits
(tests/core/test_expr.py)."""

_WALKERS = frozenset({"projection", "value_projection", "filter_projection", "flatten"})
_PRODUCTS = frozenset({"subexpression", "pipe", "index_expression", "projection", "value_projection"})
_ONE = frozenset({"field", "current", "identity", "index", "slice", "literal", "comparator", "not_expression"})


def shape_problem(tree: Any) -> str | None:
    """Why this parsed expression may cost too much on some body, in words for the contract's author; None if not."""
    nodes = walks = 0
    deepest = 0
    pending: list[tuple[Any, int]] = [(tree, 1)]
    while pending:  # iterative: the tree may be as deep as the parser allowed
        node, depth = pending.pop()
        if not isinstance(node, dict):
            continue
        nodes += 1
        deepest = max(deepest, depth)
        children = node.get("children") or []
        if node.get("type") in _WALKERS or (
            node.get("type") == "function_expression" and any(_is_expref(c) for c in children)
        ):
            walks += 1
        pending.extend((child, depth + 1) for child in children)
    copies = amplification(tree)
    if copies > MAX_AMPLIFICATION:
        shown = f"{copies}" if copies <= MAX_AMPLIFICATION**2 else f"more than {MAX_AMPLIFICATION**2}"
        return (
            f"can hold {shown} copies of the answer (each multiselect adds its branches, each pipe or projection"
            f" multiplies them); at most {MAX_AMPLIFICATION} are allowed"
        )
    if deepest > MAX_DEPTH:
        return f"is nested {deepest} levels deep; at most {MAX_DEPTH} are allowed"
    if nodes > MAX_NODES:
        return f"has {nodes} parts; at most {MAX_NODES} are allowed"
    if walks > MAX_WALKS:
        return f"walks arrays {walks} times (projections, filters, flattens, map/sort_by); at most {MAX_WALKS}"
    return None


def _is_expref(node: Any) -> bool:
    return isinstance(node, dict) and node.get("type") == "expref"


def amplification(tree: Any) -> int:
    """How many copies of its input the value of `tree` may hold, at most (capped past the limit's square, so a
    hostile expression never makes a huge number). Children before parents, without recursion: any depth."""
    found: dict[int, int] = {}
    pending: list[tuple[Any, bool]] = [(tree, False)]
    while pending:
        node, ready = pending.pop()
        children = [c for c in (node.get("children") or []) if isinstance(c, dict)] if isinstance(node, dict) else []
        if ready or not children:
            found[id(node)] = _copies(node, [found[id(child)] for child in children])
        else:
            pending.append((node, True))
            pending.extend((child, False) for child in children)
    return found[id(tree)]


def _copies(node: Any, parts: list[int]) -> int:
    """One node's amplification from its children's."""
    cap = MAX_AMPLIFICATION**2 + 1
    if not isinstance(node, dict):
        return 1
    kind = node.get("type")
    children = [c for c in (node.get("children") or []) if isinstance(c, dict)]
    if kind in _ONE or not children:
        return 1
    if kind in _PRODUCTS:
        total = 1
        for part in parts:
            total = min(total * max(part, 1), cap)
        return total
    if kind == "filter_projection":  # [base, projected, condition]: the condition is a boolean
        return min(max(parts[0], 1) * max(parts[1], 1), cap)
    if kind in ("or_expression", "and_expression", "flatten", "key_val_pair", "expref"):
        return max(parts)
    if kind == "function_expression" and any(_is_expref(child) for child in children):
        # map(&e, list) holds e's copies of each element; sort_by, min_by, max_by no more than the list.
        expressions = max(p for c, p in zip(children, parts, strict=True) if _is_expref(c))
        arrays = sum(p for c, p in zip(children, parts, strict=True) if not _is_expref(c))
        return min(arrays * expressions, cap)
    return min(sum(parts), cap)  # multiselects, other functions: one copy per branch or argument at most


_DEEP = frozenset({"to_string"})
"""Functions that go through every level of their argument (to_string writes all of it); the others go through
one level, which their argument's length charges."""


def _deep_size(value: Any, limit: int) -> int:
    """Steps to go through `value` whole, counted up to `limit` (one per value, one per 256 characters of a
    string): a value shared many times counts every time, as `json.dumps` writes it every time."""
    size = 0
    pending = [value]
    while pending and size < limit:
        item = pending.pop()
        if isinstance(item, str):
            size += 1 + len(item) // 256
        elif isinstance(item, list):
            size += 1
            pending.extend(item)
        elif isinstance(item, dict):
            size += 1 + len(item)
            pending.extend(item.values())
        else:
            size += 1
    return size


class StepsExceeded(PollwardenError):
    """An evaluation used its budget (`MAX_STEPS`) on this body; `expr.lookup` turns it into the field's problem."""


@functools.cache
def budgeted_class() -> type[Any]:
    """jmespath's own interpreter, charged a step per node visited and per element a flatten, slice or function
    goes through (the work its loops do inside one visit). Built on first use: jmespath loads lazily."""
    from jmespath.visitor import TreeInterpreter

    class Budgeted(TreeInterpreter):
        def __init__(self, options: Any, budget: int) -> None:
            super().__init__(options)
            self.left = budget
            self._dispatch: dict[str, Any] = {}

        def spend(self, steps: int) -> None:
            self.left -= steps
            if self.left < 0:
                raise StepsExceeded

        def visit(self, node: Any, *args: Any, **kwargs: Any) -> Any:
            # One call per node visited, millions on a hostile body: the step is charged and the method found
            # here (as jmespath's own `visit` finds it) rather than through `spend` and `super().visit`, which
            # doubled the evaluation's calls.
            self.left -= 1
            if self.left < 0:
                raise StepsExceeded
            kind = node["type"]
            method = self._dispatch.get(kind)
            if method is None:
                method = self._dispatch[kind] = getattr(self, f"visit_{kind}", self.default_visit)
            return method(node, *args, **kwargs)

        def visit_flatten(self, node: Any, value: Any) -> Any:
            base = self.visit(node["children"][0], value)
            if not isinstance(base, list):
                return None
            # Charged before the list is made: `[@, @, ...][]` of a list shared many times is the costly one.
            self.spend(sum(len(element) if isinstance(element, list) else 1 for element in base))
            merged: list[Any] = []
            for element in base:
                if isinstance(element, list):
                    merged.extend(element)
                else:
                    merged.append(element)
            return merged

        def visit_slice(self, node: Any, value: Any) -> Any:
            if isinstance(value, list):
                self.spend(len(range(len(value))[slice(*node["children"])]))
            return super().visit_slice(node, value)

        def visit_function_expression(self, node: Any, value: Any) -> Any:
            arguments = [self.visit(child, value) for child in node["children"]]
            if node["value"] in _DEEP:
                for argument in arguments:
                    self.spend(_deep_size(argument, self.left + 1))
            else:  # a string is gone through in C, as `_deep_size` counts it: one step per 256 characters
                self.spend(sum(len(a) if isinstance(a, list | dict) else len(a) // 256 for a in arguments
                               if isinstance(a, list | dict | str)))  # fmt: skip
            return getattr(self, "_functions").call_function(node["value"], arguments)  # noqa: B009 (untyped)

    return Budgeted
