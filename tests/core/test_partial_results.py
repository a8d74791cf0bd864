"""Partial results are results (issue 24): `[result].partial` keeps the finished part of a job the provider ended,
and `[fields].counts` says what part of the job a result covers, in the core, for every interface.

An expired OpenAI batch's output file holds every request that finished before the window closed; dropping it
made a pipeline submit the batch again and pay twice. The stop stays a stop (the job did not succeed), and the
result it kept is validated like a success's, fetched like one, and labelled with the provider's counts.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pollwarden.core import Action, ContractError, parse_contract
from pollwarden.core.codec import observation_from_json, record_from_json, record_to_json
from pollwarden.core.observe import MAX_COUNTS, Kind, observe
from pollwarden.core.reasons import Phase, StopReason
from pollwarden.core.result_part import no_result_problem, part_words, result_part

from .support import contract_text, make_record, poll, response

PARTIAL = """
counts = "request_counts"
[result]
type = "string"
partial = ["cancelled", "expired"]
credential = true
url = "https://provider.example/v1/files/{result}/content"
"""


def _contract(extra: str = PARTIAL, *, result: str | None = "output_file_id") -> Any:
    # contract_text ends [fields] just before [schedule]: `counts` joins [fields], then the [result] table follows.
    text = contract_text(result=result).replace("[schedule]", extra.lstrip("\n") + "[schedule]", 1)
    return parse_contract(text, source="partial.toml")


def _answer(state: str, **fields: Any) -> Any:
    return response(json.dumps({"state": state, **fields}).encode())


COUNTS = {"total": 100, "completed": 60, "failed": 2}


def test_an_expired_job_keeps_its_finished_part_and_its_counts() -> None:
    contract = _contract()
    decision = poll(
        contract, make_record(contract), _answer("expired", output_file_id="file-part", request_counts=COUNTS)
    )
    record = decision.record
    assert (decision.action, record.reason) == (Action.STOP, StopReason.JOB_EXPIRED)
    assert (record.result, dict(record.counts or ())) == ("file-part", COUNTS)
    assert record.partial and no_result_problem(record) is None
    assert result_part(record) == {"partial": True, "ended": "job_expired", "counts": COUNTS}
    assert part_words(record) == (
        "a partial result: the finished part of a job that ended (job expired): completed 60, failed 2, total 100"
    )


def test_an_ending_without_a_finished_part_keeps_no_result_and_says_nothing_is_wrong() -> None:
    contract = _contract()
    seen = observe(contract, _answer("cancelled", output_file_id=None, request_counts=COUNTS))
    assert (seen.result, seen.rejections) == (None, ())
    record = poll(contract, make_record(contract), _answer("cancelled")).record
    assert (record.result, record.partial) == (None, False)
    assert "has no validated result (job_cancelled)" in (no_result_problem(record) or "")


def test_a_partial_result_the_result_table_refuses_is_not_kept_and_the_trail_says_why() -> None:
    seen = observe(_contract(), _answer("expired", output_file_id="   "))
    assert seen.result is None
    (rejection,) = seen.rejections
    assert rejection.source == "output_file_id" and "not kept as a partial result" in rejection.why


def test_a_category_not_named_partial_keeps_no_result() -> None:
    """`failed` is not in `partial`: a failed job's file is not output, whatever the answer carries."""
    record = poll(_contract(), make_record(_contract()), _answer("failed", output_file_id="file-x")).record
    assert (record.reason, record.result) == (StopReason.JOB_FAILED, None)


def test_a_success_carries_its_counts_and_a_pending_answer_reads_none() -> None:
    contract = _contract()
    assert observe(contract, _answer("running", request_counts=COUNTS)).counts is None
    record = poll(
        contract, make_record(contract), _answer("succeeded", output_file_id="file-all", request_counts=COUNTS)
    ).record
    assert (record.phase, record.result, dict(record.counts or ())) == (Phase.SUCCEEDED, "file-all", COUNTS)
    assert part_words(record) == "the result covers: completed 60, failed 2, total 100"


@pytest.mark.parametrize(
    ("counts", "kept", "rejected"),
    [
        pytest.param(
            {"done": 3, "flag": True, "name": "x", "rate": 0.5}, {"done": 3, "rate": 0.5}, False, id="numbers-only"
        ),
        pytest.param({"flag": True}, None, True, id="no-number"),
        pytest.param([1, 2], None, True, id="not-an-object"),
        pytest.param(None, None, False, id="null"),
        pytest.param({f"k{i:02}": i for i in range(40)}, {f"k{i:02}": i for i in range(MAX_COUNTS)}, False, id="many"),
    ],
)
def test_counts_are_the_number_members_of_an_object(counts: Any, kept: Any, rejected: bool) -> None:
    seen = observe(_contract(), _answer("succeeded", output_file_id="f", request_counts=counts))
    assert seen.kind is Kind.JOB_STATE
    assert (None if seen.counts is None else dict(seen.counts)) == kept
    assert bool(seen.rejections) is rejected


def test_the_record_and_the_observation_keep_the_counts_through_the_codec() -> None:
    contract = _contract()
    seen = observe(contract, _answer("expired", output_file_id="file-part", request_counts=COUNTS))
    assert observation_from_json(json.loads(json.dumps(seen.to_json()))) == seen
    record = poll(contract, make_record(contract), _answer("expired", output_file_id="p", request_counts=COUNTS)).record
    assert record_from_json(json.loads(json.dumps(record_to_json(record)))) == record
    # A record or an observation without counts is stored exactly as before the key existed.
    assert "counts" not in record_to_json(make_record(contract))
    assert "counts" not in observe(contract, _answer("running")).to_json()


def test_the_new_keys_join_the_fingerprint_only_when_used() -> None:
    plain = parse_contract(contract_text(result="output_file_id"), source="plain.toml")
    assert "counts" not in plain.fields.identity()
    assert plain.result.identity() is None
    assert _contract().fingerprint() != plain.fingerprint()


@pytest.mark.parametrize(
    ("partial", "words"),
    [
        ('["success"]', "a success always keeps its result"),
        ('["pending"]', "'pending' is not one of"),
        ('["expired", "expired"]', "lists a category twice"),
        ('"expired"', "must be a non-empty list"),
        ("[]", "must be a non-empty list"),
    ],
)
def test_a_malformed_partial_is_refused_naming_the_key(partial: str, words: str) -> None:
    with pytest.raises(ContractError, match=r"\[result\]\.partial") as raised:
        _contract(PARTIAL.replace('["cancelled", "expired"]', partial))
    assert words in str(raised.value)


def test_a_counts_that_is_not_an_expression_is_refused_naming_the_key() -> None:
    with pytest.raises(ContractError, match=r"\[fields\]\.counts"):
        _contract(PARTIAL.replace('"request_counts"', '"request_counts["'))
