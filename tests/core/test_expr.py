"""Fields as JMESPath expressions: derived states, case folding, time forms, and bodies that make JMESPath raise.

The bodies are the providers' own shapes (docs/plans/part8-providers.md cites where each comes from); the
contracts are written in the test so that a change in a shipped contract cannot hide a change in the format.
"""

from __future__ import annotations

import functools
import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pollwarden.core import Category, observe, parse_contract
from pollwarden.core.contract.parse import ContractError
from pollwarden.core.expr import ExpressionError, check, lookup
from pollwarden.core.observe import Kind, Observation

from .support import contract_text, make_contract, response

OPENAI = """
name = "openai-batch"
status_url = "https://api.openai.example/v1/batches/{job_id}"
[states]
pending = ["validating", "in_progress", "finalizing", "cancelling"]
success = ["completed"]
failure = ["failed", "completed_without_output"]
cancelled = ["cancelled"]
expired = ["expired"]
[fields]
state = "(status == 'completed' && !output_file_id) && 'completed_without_output' || status"
result = "output_file_id"
error = "errors.data[].message"
expires_at = "expires_at"
[timestamps]
expires_at = "epoch_seconds"
"""

GITHUB = """
name = "github-actions-run"
status_url = "https://api.github.example/repos/o/n/actions/runs/{job_id}"
[states]
pending = ["queued", "in_progress", "waiting", "requested", "pending"]
success = ["success", "neutral"]
failure = ["failure", "timed_out", "startup_failure"]
cancelled = ["cancelled", "skipped"]
expired = ["stale"]
needs_person = ["action_required"]
[fields]
state = "status == 'completed' && conclusion || status"
result = "html_url"
"""

AZURE = """
name = "azure-operation"
status_url = "https://azure.example/operations/{job_id}"
[states]
pending = ["notstarted", "running"]
success = ["succeeded"]
failure = ["failed"]
cancelled = ["canceled"]
[fields]
state = "lower(status)"
result = "resourceLocation"
"""


def seen(contract_text: str, document: Any) -> Observation:
    return observe(parse_contract(contract_text), response(json.dumps(document).encode()))


def test_openai_completed_with_output_is_success_and_without_is_failure() -> None:
    ok = seen(OPENAI, {"status": "completed", "output_file_id": "file-cvaTdG", "expires_at": 1711557933})
    assert (ok.category, ok.result, ok.state) == (Category.SUCCESS, "file-cvaTdG", "completed")
    # Every request failed: only an error file exists (a production body quoted in kaapi-backend#723).
    none = seen(OPENAI, {"status": "completed", "output_file_id": None, "error_file_id": "file-QzTK"})
    assert (none.category, none.state) == (Category.FAILURE, "completed_without_output")
    empty = seen(OPENAI, {"status": "completed", "output_file_id": ""})
    assert empty.category is Category.FAILURE


def test_openai_failed_keeps_every_error_message_joined() -> None:
    body = {
        "status": "failed",
        "errors": {"object": "list", "data": [{"message": "line 1 bad"}, {"message": "line 2 bad"}]},
    }
    assert seen(OPENAI, body).provider_error == "line 1 bad; line 2 bad"


def test_epoch_seconds_expiry_is_read_and_a_pending_state_after_it_is_contradictory() -> None:
    obs = seen(OPENAI, {"status": "in_progress", "expires_at": 1711557933})
    assert obs.expires_at == datetime.fromtimestamp(1711557933, UTC)
    assert obs.rejections == ()
    wrong = seen(OPENAI, {"status": "in_progress", "expires_at": "2024-03-27T16:45:33Z"})
    assert wrong.expires_at is None
    assert [r.why for r in wrong.rejections] == ["not a Unix time in seconds"]


@pytest.mark.parametrize("value", [True, -1, 1e300, float("inf"), "1711557933", [1]])
def test_epoch_values_that_are_not_a_moment_are_rejected_not_guessed(value: Any) -> None:
    text = json.dumps({"status": "in_progress", "expires_at": value}) if value != float("inf") else None
    payload = text.encode() if text is not None else b'{"status": "in_progress", "expires_at": 1e999}'
    obs = observe(parse_contract(OPENAI), response(payload))
    assert obs.expires_at is None
    if obs.kind is Kind.JOB_STATE:
        assert obs.rejections and "Unix time" in obs.rejections[0].why
    else:  # 1e999 is refused by the strict parser before any field is read
        assert obs.kind is Kind.INVALID_RESPONSE


def test_epoch_millis() -> None:
    text = OPENAI.replace('expires_at = "epoch_seconds"', 'expires_at = "epoch_millis"')
    obs = seen(text, {"status": "in_progress", "expires_at": 1711557933500})
    assert obs.expires_at == datetime.fromtimestamp(1711557933.5, UTC)


@pytest.mark.parametrize(
    ("status", "conclusion", "category"),
    [
        ("queued", None, Category.PENDING),
        ("in_progress", None, Category.PENDING),
        ("completed", "success", Category.SUCCESS),
        ("completed", "failure", Category.FAILURE),
        ("completed", "timed_out", Category.FAILURE),
        ("completed", "startup_failure", Category.FAILURE),
        ("completed", "cancelled", Category.CANCELLED),
        ("completed", "action_required", Category.NEEDS_PERSON),
        ("completed", "brand_new_conclusion", Category.UNKNOWN),
    ],
)
def test_github_status_and_conclusion_together(status: str, conclusion: str | None, category: Category) -> None:
    body = {"status": status, "conclusion": conclusion, "html_url": "https://github.example/o/n/actions/runs/1"}
    assert seen(GITHUB, body).category is category


def test_completed_with_a_failure_conclusion_is_never_a_success() -> None:
    # The report in the issue: `status: completed` with `conclusion: failure` came out as succeeded, exit 0.
    obs = seen(GITHUB, {"status": "completed", "conclusion": "failure"})
    assert obs.category is Category.FAILURE
    assert obs.state == "failure"


def test_completed_without_a_conclusion_is_not_a_success() -> None:
    obs = seen(GITHUB, {"status": "completed"})
    assert (obs.category, obs.state) == (Category.UNKNOWN, "completed")


def test_a_state_expression_that_evaluates_to_null_names_it_without_nonetype() -> None:
    obs = seen(GITHUB.replace('|| status"', '"'), {"status": "completed"})
    assert obs.kind is Kind.INVALID_RESPONSE
    assert "evaluates to null" in obs.detail
    assert "NoneType" not in obs.detail


@pytest.mark.parametrize(("raw", "category"), [("NotStarted", Category.PENDING), ("Succeeded", Category.SUCCESS)])
def test_lower_makes_a_case_insensitive_state(raw: str, category: Category) -> None:
    obs = seen(AZURE, {"status": raw, "resourceLocation": "https://azure.example/r/1"})
    assert obs.category is category


def test_a_function_given_the_wrong_type_is_an_invalid_answer_in_json_words() -> None:
    obs = seen(AZURE, {"status": 5})
    assert obs.kind is Kind.INVALID_RESPONSE
    assert "wrong JSON type" in obs.detail
    assert "NoneType" not in obs.detail and "int" not in obs.detail.split("wrong JSON type")[1]


def test_an_ordering_of_a_string_against_a_number_is_an_invalid_answer_not_a_traceback() -> None:
    text = GITHUB.replace(
        "state = \"status == 'completed' && conclusion || status\"",
        "state = \"run_attempt > `3` && 'queued' || status\"",
    )
    obs = seen(text, {"status": "queued", "run_attempt": "four"})
    assert obs.kind is Kind.INVALID_RESPONSE
    assert "different JSON types" in obs.detail


def test_missing_and_null_are_told_apart_for_a_plain_path() -> None:
    contract = parse_contract(AZURE.replace('state = "lower(status)"', 'state = "job.state"'))
    missing = observe(contract, response(b'{"job": {}}'))
    null = observe(contract, response(b'{"job": {"state": null}}'))
    assert "'job.state' is missing" in missing.detail
    assert "'job.state' is null" in null.detail


def test_a_dotted_path_with_names_jmespath_would_need_quoted_still_means_that_path() -> None:
    # Contracts written before fields were expressions: `poll-after` and `0` are keys, as they always were.
    assert lookup("job.poll-after", {"job": {"poll-after": 5}}).value == 5
    assert lookup("items.0", {"items": {"0": "x"}}).value == "x"


@pytest.mark.parametrize("text", ["", "job..state", "status ==", "a[", "`unterminated"])
def test_an_expression_that_does_not_compile_is_refused_at_load_naming_the_key(text: str) -> None:
    with pytest.raises(ExpressionError):
        check(text)
    contract = OPENAI.replace('result = "output_file_id"', f"result = {json.dumps(text)}")
    with pytest.raises(ContractError) as info:
        parse_contract(contract, source="c.toml")
    assert "c.toml: [fields].result" in str(info.value)


@pytest.mark.parametrize(
    ("table", "complaint"),
    [
        ('[timestamps]\nexpires_at = "unix"', "must be one of rfc3339, epoch_seconds, epoch_millis"),
        ('[timestamps]\nnext_check_at = "epoch_seconds"', "does not read"),
        ('[timestamps]\nstarted_at = "rfc3339"', "unknown key"),
    ],
)
def test_timestamp_forms_are_checked_at_load(table: str, complaint: str) -> None:
    text = OPENAI.replace('[timestamps]\nexpires_at = "epoch_seconds"', table)
    with pytest.raises(ContractError) as info:
        parse_contract(text, source="c.toml")
    assert complaint in str(info.value)


def test_the_fingerprint_of_a_contract_without_the_new_keys_is_unchanged() -> None:
    # Computed on the commit before fields became expressions: stored operations are resumed by fingerprint,
    # so it must not move for a contract that uses none of part 8's keys.
    assert make_contract().fingerprint() == "0e04701470abed2391f94341cf3a21f0f441f0b08142558bf7c583a8ee7096c8"
    with_new = parse_contract(OPENAI)
    without = parse_contract(OPENAI.replace('[timestamps]\nexpires_at = "epoch_seconds"\n', ""))
    assert with_new.fingerprint() != without.fingerprint()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["status", "conclusion", "output_file_id", "errors", "expires_at"]), JSON))
def test_no_body_makes_a_field_expression_raise(document: dict[str, Any]) -> None:
    for text in (OPENAI, GITHUB, AZURE):
        obs = seen(text, document)
        assert obs.kind in (Kind.JOB_STATE, Kind.INVALID_RESPONSE)
        assert "NoneType" not in obs.detail


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("(" * 5000 + "status" + ")" * 5000, "nested too deeply"),
        ("nosuchfn(status)", "no function nosuchfn()"),
        ("lowr(status) || status", "no function lowr()"),
        ("lower(status, status)", "lower(), which takes 1 argument, given 2"),
        ("items[?contains(name)]", "contains(), which takes 2 arguments, given 1"),
        ("not_null()", "not_null(), which takes at least 1 argument, given 0"),
    ],
)
def test_an_expression_that_can_never_evaluate_is_refused_at_load_not_blamed_on_the_answer(
    text: str, complaint: str
) -> None:
    # A typo in a function name, a wrong argument count or a nesting the parser cannot follow is the
    # contract's mistake, knowable before any request: exit 2 naming the key, not a traceback, and not an
    # invalid_response that spends a request and blames the provider's body.
    with pytest.raises(ExpressionError, match=re.escape(complaint)):
        check(text)
    contract = OPENAI.replace('result = "output_file_id"', f"result = {json.dumps(text)}")
    with pytest.raises(ContractError) as info:
        parse_contract(contract, source="c.toml")
    assert "c.toml: [fields].result" in str(info.value)


@pytest.mark.parametrize("text", ["lower(status)", "not_null(a, b, c)", "contains(['a'], status) && upper(x)"])
def test_known_functions_with_their_arity_still_load(text: str) -> None:
    check(text)


# --- issue 23: a field's cost is bounded, at load by its shape and on each answer by a budget ------------------------

DOUBLING = " | ".join(["[@, @][]"] * 20)  # the attacker's: 2^20 copies of one answer


def _balanced(leaves: int) -> str:
    """`(k0 || k1) || (k2 || k3)`...: many parts, shallow, and no copies."""
    names = [f"k{i}" for i in range(leaves)]
    while len(names) > 1:
        names = [f"({a} || {b})" for a, b in zip(names[::2], names[1::2], strict=True)]
    return names[0]


MULTISELECT16 = "[" + ", ".join(["@"] * 16) + "]"


def _state(expression: str) -> str:
    return contract_text(state_field=expression)


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        (DOUBLING, "can hold more than 256 copies of the answer"),
        (" | ".join(["[@, @][]"] * 5), "can hold 32 copies of the answer"),
        ("[" + ", ".join(["@"] * 17) + "] | [0]", "can hold 17 copies"),
        ("a" + "[]" * 40, "is nested 81 levels deep; at most 32"),
        (_balanced(256), "has 511 parts; at most 256"),
        (" | ".join(["[*]"] * 17), "walks arrays 17 times"),
        (" | ".join(["map(&[@, @, @, @], @)[]"] * 3), "can hold 64 copies"),
    ],
)
def test_an_expression_that_can_cost_too_much_is_refused_at_load_naming_the_field(expression: str, words: str) -> None:
    with pytest.raises(ContractError) as caught:
        parse_contract(_state(expression), source="costly.toml")
    message = str(caught.value)
    assert message.startswith("costly.toml: [fields].state:") and words in message, message
    assert "its cost on one answer must stay bounded" in message


def test_every_shipped_contract_and_example_keeps_loading() -> None:
    import tomllib
    from pathlib import Path

    from pollwarden.core import load_contract

    root = Path(__file__).parents[2]
    shipped = sorted(root.joinpath("src", "pollwarden", "contracts").glob("*.toml"))
    assert len(shipped) >= 8
    for path in shipped:  # their vars may be required, so each expression is checked as the loader checks it
        for expression in tomllib.loads(path.read_text(encoding="utf-8"))["fields"].values():
            check(expression)
    for path in root.joinpath("examples").glob("*.toml"):
        assert load_contract(path).name


@functools.cache
def _hostile_documents() -> dict[str, Any]:
    return {name: json.loads(raw) for name, raw in _hostile_bodies().items()}


def _hostile_bodies(cap: int = 1 << 20) -> dict[str, bytes]:
    """The most values a body of the default cap can hold, in the shapes projections walk."""
    return {
        "zeros": b"[" + b",".join([b"0"] * (cap // 2 - 1)) + b"]",
        "lists": b"[" + b",".join([b"[0]"] * (cap // 4 - 1)) + b"]",
        "objects": b"[" + b",".join([b'{"a":0}'] * (cap // 8 - 1)) + b"]",
    }


WORST_WITHIN_BOUNDS = [
    f"to_string({MULTISELECT16})",
    f"{MULTISELECT16}[] | length(@)",
    "[*].[@, @, @, @][] | [*].[@, @, @, @][] | length(@)",
    "[?to_string(@) == '0'] | length(@)",
    "join(',', [*].to_string(@))",
    "sort_by([*], &to_string(@))",
    "map(&[@, @, @, @], [*])[] | map(&[@, @, @, @], @)[] | length(@)",
    "[][][][][][][][] | length(@)",
]


@pytest.mark.parametrize("expression", WORST_WITHIN_BOUNDS)
def test_the_worst_expression_within_the_bounds_costs_little_on_a_hostile_body_of_the_maximum_size(
    expression: str,
) -> None:
    """Each loads, and on each body of the 1 MiB cap ends within its budget: the attacker's doubling took 5.3 s and
    219 MiB. CPU time, not wall time: a loaded machine stretches the one, not the other; the bound is 10 times what
    it measures (0.03-0.3 s on a loaded 2-core machine), memory 4 times."""
    import time
    import tracemalloc

    check(expression)
    documents = _hostile_documents()
    for name, document in documents.items():
        started = time.process_time()
        found = lookup(expression, document)
        spent = time.process_time() - started
        assert spent < 3.0, (name, spent)
        assert found.problem is None or "steps on this body" in found.problem or "wrong JSON type" in found.problem
    tracemalloc.start()  # slows every allocation: once, on the body of the most values
    try:
        lookup(expression, documents["zeros"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, peak


def test_a_field_past_its_budget_stops_the_poll_as_invalid_response_naming_the_field() -> None:
    contract = parse_contract(_state("items[?@ == `1`] | length(@) > `0` && 'done' || 'running'"))
    small = lookup(contract.fields.state, {"items": [0, 1, 2]})
    assert small.value == "done"
    obs = observe(contract, response(b'{"items":' + _hostile_bodies()["zeros"] + b"}"))
    assert obs.kind is Kind.INVALID_RESPONSE
    assert "state field" in obs.detail and "takes more than 100000 steps on this body" in obs.detail, obs.detail


def test_a_projection_over_ten_thousand_elements_fits_the_budget() -> None:
    document = {"items": [{"state": "done", "n": i} for i in range(10_000)]}
    found = lookup("items[?state == 'done'] | length(@)", document)
    assert found.problem is None and found.value == 10_000
