"""Every shipped contract held to its provider's own published definition (issue 24, "fidelity tables").

A contract's own tests encode the same mapping the contract does, so they cannot find a state the provider
documents and the contract never heard of. Each `fidelity/<contract>.toml` is written from the provider's SDK
type file or API reference (cited in its `[source]`), not from the contract: it lists every value the provider
documents for each field it reads (`[documented]`) and, as `[[case]]`s, answer bodies and the meaning each must
get. This runner holds every contract in `src/pollwarden/contracts/` to its table through the real core (the
shipped text parsed with the table's vars, a `Response` built from the body, `core.observe`):

- a shipped contract without a table fails;
- each case's body must get the table's meaning (pending, success, failure, cancelled, expired, needs_person;
  `unknown` only with a `note` saying why the provider's own words leave it open), and, where the case says,
  the result and the counts the outcome must carry;
- every documented value of every documented field must occur in some case's body at that field (the field's
  JMESPath evaluated on each body), so a value the provider documents and the contract does not map is a
  failing case here, never a silent `unknown_state` in production.

The table format (one file per contract; another contract's author writes the same):

    contract = "openai-batch"
    vars = { }                                  # the vars it needs (defaults are fine)
    [source]
    definition = "openai/openai-python src/openai/types/batch.py @ <commit>"   # or a list of them
    reference = "https://platform.openai.com/docs/api-reference/batch/object"  # or a list
    [documented]                                # field (JMESPath) = every value the provider documents
    "status" = ["validating", "failed", ...]
    [[case]]
    body = { status = "completed", output_file_id = "file-1" }   # or body_json = '{"a": null}' (TOML has no null)
    meaning = "success"
    result = "file-1"                           # optional; result_json = 'null' says "no result is kept"
    result_problem = "is null"                  # optional, with success: words of why the result is refused
    counts = { completed = 95, failed = 5 }     # optional: the counts the outcome carries
    note = "why, for a judgement"               # optional (required with meaning = "unknown")
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pollwarden.catalogue import shipped_contract, shipped_names
from pollwarden.core import Response, observe
from pollwarden.core.contract.parse import Contract
from pollwarden.core.expr import lookup
from pollwarden.core.observe import Kind, Observation

TABLES = Path(__file__).parent / "fidelity"
MEANINGS = ("pending", "success", "failure", "cancelled", "expired", "needs_person", "unknown")
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class TableError(Exception):
    """A table that does not follow the format: the runner says which file and which key."""


@dataclass(frozen=True)
class Case:
    number: int
    body: Any
    meaning: str
    result: Any = None
    has_result: bool = False
    counts: Mapping[str, Any] | None = None
    result_problem: str | None = None
    note: str | None = None

    def shown(self) -> str:
        text = json.dumps(self.body, sort_keys=True)
        return f"case {self.number} {text if len(text) <= 160 else text[:157] + '...'}"


@dataclass(frozen=True)
class Table:
    path: Path
    contract: str
    vars: Mapping[str, str]
    sources: tuple[str, ...]
    documented: Mapping[str, tuple[Any, ...]]
    cases: tuple[Case, ...]


def _strings(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str) and value.strip():
        return (value,)
    if isinstance(value, list) and value and all(isinstance(v, str) and v.strip() for v in value):
        return tuple(value)
    raise TableError(f"{where}: a non-empty string or list of strings")


def _json_key(raw: Mapping[str, Any], plain: str, where: str) -> tuple[bool, Any]:
    """(given, value) for a key that may be written as TOML (`plain`) or as JSON text (`plain_json`)."""
    as_json = f"{plain}_json"
    if plain in raw and as_json in raw:
        raise TableError(f"{where}: give {plain} or {as_json}, not both")
    if as_json in raw:
        if not isinstance(raw[as_json], str):
            raise TableError(f"{where}.{as_json}: JSON text")
        try:
            return True, json.loads(raw[as_json])
        except ValueError as exc:
            raise TableError(f"{where}.{as_json}: not JSON ({exc})") from None
    return (plain in raw), raw.get(plain)


def load_table(path: Path) -> Table:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TableError(f"{path.name}: not TOML ({exc})") from None
    unknown = set(data) - {"contract", "vars", "source", "documented", "case"}
    if unknown:
        raise TableError(f"{path.name}: unknown keys {sorted(unknown)}")
    contract = data.get("contract")
    if not isinstance(contract, str) or path.stem != contract:
        raise TableError(f"{path.name}: contract must name the contract the file is named for ({path.stem!r})")
    variables = data.get("vars", {})
    if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
        raise TableError(f"{path.name}: vars: a table of strings")
    source = data.get("source")
    if not isinstance(source, dict) or not {"definition", "reference"} >= set(source) or not source:
        raise TableError(f"{path.name}: [source] says where the values come from: definition and/or reference")
    sources = tuple(s for key in ("definition", "reference") if key in source for s in _strings(source[key], key))
    documented = data.get("documented")
    if not isinstance(documented, dict) or not documented:
        raise TableError(f"{path.name}: [documented] lists each field's documented values")
    values: dict[str, tuple[Any, ...]] = {}
    for field, listed in documented.items():
        if not isinstance(listed, list) or not listed or any(isinstance(v, dict | list) for v in listed):
            raise TableError(f"{path.name}: documented {field!r}: a non-empty list of values")
        values[field] = tuple(listed)
    raw_cases = data.get("case")
    if not isinstance(raw_cases, list) or not raw_cases:
        raise TableError(f"{path.name}: no [[case]]")
    cases = []
    for number, raw in enumerate(raw_cases, start=1):
        where = f"{path.name} case {number}"
        unknown = set(raw) - {
            "body",
            "body_json",
            "meaning",
            "result",
            "result_json",
            "counts",
            "result_problem",
            "note",
        }
        if unknown:
            raise TableError(f"{where}: unknown keys {sorted(unknown)}")
        has_body, body = _json_key(raw, "body", where)
        if not has_body:
            raise TableError(f"{where}: body (or body_json) is required")
        meaning = raw.get("meaning")
        if meaning not in MEANINGS:
            raise TableError(f"{where}: meaning must be one of {', '.join(MEANINGS)}, got {meaning!r}")
        note = raw.get("note")
        if note is not None and not isinstance(note, str):
            raise TableError(f"{where}: note: a string")
        if meaning == "unknown" and not note:
            raise TableError(f"{where}: meaning 'unknown' needs a note saying why the provider leaves it open")
        has_result, result = _json_key(raw, "result", where)
        counts = raw.get("counts")
        if counts is not None and not isinstance(counts, dict):
            raise TableError(f"{where}: counts: a table")
        result_problem = raw.get("result_problem")
        if result_problem is not None and (meaning != "success" or not isinstance(result_problem, str)):
            raise TableError(f"{where}: result_problem: words of the problem that keeps a success from being declared")
        cases.append(Case(number, body, meaning, result, has_result, counts, result_problem, note))
    return Table(path, contract, variables, sources, values, tuple(cases))


PATHS = sorted(TABLES.glob("*.toml"))


def answer(contract: Contract, body: Any) -> Observation:
    """One 200 answer with this body, classified by the contract: exactly what a poll would see."""
    response = Response(
        status=200,
        headers={"content-type": "application/json"},
        body=json.dumps(body).encode("utf-8"),
        sent_at=AT,
        received_at=AT,
    )
    return observe(contract, response)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: `true` is not `1`, and `1` is `1.0` only as JSON says."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def case_problems(contract: Contract, case: Case) -> list[str]:
    seen = answer(contract, case.body)
    if seen.kind is not Kind.JOB_STATE:
        return [f"{case.shown()}: the contract reads it as {seen.kind.value} ({seen.detail}), not a job state"]
    got = seen.category.value if seen.category is not None else "?"
    state = f"state {seen.state!r}"
    problems = []
    if got != case.meaning:
        problems.append(f"{case.shown()}: the contract says {got} ({state}), the table says {case.meaning}")
    if case.result_problem is not None:
        if seen.result_problem is None or case.result_problem not in seen.result_problem:
            problems.append(
                f"{case.shown()}: success is refused for {seen.result_problem!r}, not {case.result_problem!r}"
            )
    elif case.meaning == "success" and seen.result_problem is not None:
        problems.append(f"{case.shown()}: success, but {seen.result_problem}")
    if case.has_result and not _same(seen.result, case.result):
        problems.append(f"{case.shown()}: the result kept is {json.dumps(seen.result)}, not {json.dumps(case.result)}")
    if case.counts is not None and not _same(dict(seen.counts or ()), case.counts):
        problems.append(f"{case.shown()}: the counts kept are {dict(seen.counts or ())}, not {case.counts}")
    return problems


def uncovered(table: Table) -> list[str]:
    """Each documented value that no case's body has at its field."""
    missing = []
    for field, values in table.documented.items():
        found = [lookup(field, case.body) for case in table.cases]
        for value in values:
            if not any(f.problem is None and _same(f.value, value) for f in found):
                missing.append(f"{field} = {json.dumps(value)}")
    return missing


def test_every_shipped_contract_has_a_table() -> None:
    named = {path.stem for path in PATHS}
    shipped = set(shipped_names())
    assert shipped - named == set(), (
        f"shipped contracts without a fidelity table in {TABLES}: {sorted(shipped - named)}; write one from the"
        " provider's own definition (see this module's docstring)"
    )
    assert named - shipped == set(), f"tables for contracts that are not shipped: {sorted(named - shipped)}"


@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.stem)
def test_every_case_means_what_the_provider_documents(path: Path) -> None:
    table = load_table(path)
    contract = shipped_contract(table.contract, table.vars)
    problems = [problem for case in table.cases for problem in case_problems(contract, case)]
    assert not problems, f"{table.contract} against {table.path.name}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.stem)
def test_every_documented_value_has_a_case(path: Path) -> None:
    table = load_table(path)
    missing = uncovered(table)
    assert not missing, (
        f"{table.path.name}: documented values no case exercises (add a [[case]] for each, with the meaning the"
        f" provider's definition gives it): {', '.join(missing)}"
    )


# The runner's own checks: a table that cannot fail proves nothing.


def _table(tmp_path: Path, text: str) -> Table:
    path = tmp_path / "replicate-prediction.toml"
    path.write_text(text, encoding="utf-8")
    return load_table(path)


TINY = """
contract = "replicate-prediction"
[source]
reference = "https://replicate.com/docs/topics/predictions/lifecycle"
[documented]
"status" = ["starting", "succeeded"]
[[case]]
body = { status = "starting" }
meaning = "pending"
"""


def test_a_documented_value_without_a_case_is_reported(tmp_path: Path) -> None:
    assert uncovered(_table(tmp_path, TINY)) == ['status = "succeeded"']


def test_a_case_the_contract_reads_otherwise_is_reported(tmp_path: Path) -> None:
    table = _table(tmp_path, TINY + '[[case]]\nbody = { status = "starting" }\nmeaning = "success"\n')
    contract = shipped_contract(table.contract, table.vars)
    (problem,) = case_problems(contract, table.cases[1])
    assert "the contract says pending" in problem and "the table says success" in problem


def test_a_value_the_contract_does_not_map_is_reported(tmp_path: Path) -> None:
    table = _table(tmp_path, TINY + '[[case]]\nbody = { status = "paused" }\nmeaning = "pending"\n')
    contract = shipped_contract(table.contract, table.vars)
    (problem,) = case_problems(contract, table.cases[1])
    assert "the contract says unknown" in problem


def test_a_result_the_outcome_does_not_carry_is_reported(tmp_path: Path) -> None:
    body = '[[case]]\nbody_json = \'{"status": "succeeded", "output": ["a"]}\'\nmeaning = "success"\nresult = ["b"]\n'
    table = _table(tmp_path, TINY + body)
    contract = shipped_contract(table.contract, table.vars)
    (problem,) = case_problems(contract, table.cases[1])
    assert 'the result kept is ["a"]' in problem


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ('[[case]]\nbody = { status = "x" }\nmeaning = "unknown"\n', "needs a note"),
        ('[[case]]\nbody = { status = "x" }\nmeaning = "fine"\n', "meaning must be one of"),
        ('[[case]]\nmeaning = "pending"\n', "body (or body_json) is required"),
        ("[[case]]\nbody_json = '{'\nmeaning = \"pending\"\n", "not JSON"),
        ('[[case]]\nbody = {}\nmeaning = "pending"\nwhy = "x"\n', "unknown keys"),
    ],
)
def test_a_malformed_table_is_refused(tmp_path: Path, extra: str, words: str) -> None:
    with pytest.raises(TableError, match=words.replace("(", r"\(").replace(")", r"\)")):
        _table(tmp_path, TINY + extra)
