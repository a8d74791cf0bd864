"""Admission, the one rule every interface goes through: create, resume, narrow or refuse."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from pollwarden.core.admission import (
    Create,
    Limits,
    Narrow,
    Refusal,
    Refuse,
    Resume,
    WatchRequest,
    admit,
    check_many,
    job_id_problem,
    new_operation_id,
    repeated,
)
from pollwarden.core.contract.parse import AgentLimits

from .support import T0, make_contract, make_record

CONTRACT = make_contract(deadline="40m", max_requests=12)


def ask(job: str | None = "exp_71c", op: str | None = None, **limits: Any) -> WatchRequest:
    return WatchRequest(CONTRACT, job, op, Limits(**limits))


def test_a_new_job_creates_one_record_with_one_created_shape() -> None:
    answer = admit(ask(), None, [], T0, token="abc123")
    assert isinstance(answer, Create)
    assert answer.record.operation_id == "exports-20250418-102000-abc123"
    assert answer.event["created_by"] == "cli"
    assert set(answer.event) >= {"operation", "job", "contract_fingerprint", "request_fingerprint", "expected_terminal"}


@pytest.mark.parametrize("job", ["", "  ", "a\nb", "a\x1b[2Jb", "a\u202eb", "a\ud800b", "x" * 513, "tab\there"])
def test_job_ids_with_controls_blanks_or_invisible_characters_are_refused(job: str) -> None:
    assert job_id_problem(job) is not None
    answer = admit(ask(job), None, [], T0, token="t")
    assert isinstance(answer, Refuse) and answer.kind is Refusal.INVALID and answer.operation_id is None


@pytest.mark.parametrize(
    "limits",
    [
        {"max_requests": 0},
        {"max_requests": 10**20},
        {"max_requests": True},
        {"max_transport_failures": 0},
        {"deadline": timedelta(0)},
        {"base_delay": timedelta(seconds=10), "max_delay": timedelta(seconds=5)},
    ],
)
def test_malformed_limits_are_refused_before_anything_is_looked_up(limits: dict[str, Any]) -> None:
    answer = admit(ask(**limits), None, [], T0, token="t")
    assert isinstance(answer, Refuse) and answer.kind is Refusal.INVALID


def test_narrowing_a_limit_keeps_the_usefulness_window() -> None:
    """Item 3: `--max-requests 1` on resume used to set useful_until to null, widening authority."""
    existing = make_record(CONTRACT, useful_for=timedelta(minutes=20))
    answer = admit(ask(op=existing.operation_id, max_requests=1), existing, [], T0, token="t")
    assert isinstance(answer, Narrow)
    assert answer.narrowed.plan.max_status_requests == 1
    assert answer.narrowed.plan.useful_until == existing.plan.useful_until == T0 + timedelta(minutes=20)
    assert answer.narrowed.plan.deadline_at == existing.plan.deadline_at


def test_a_resume_asking_for_nothing_new_changes_nothing() -> None:
    existing = make_record(CONTRACT)
    answer = admit(ask(op=existing.operation_id, max_requests=12), existing, [], T0, token="t")
    assert isinstance(answer, Resume) and answer.record is existing


@pytest.mark.parametrize(
    ("limits", "words"),
    [
        ({"max_requests": 13}, "exceeds the approved 12"),
        ({"deadline": timedelta(hours=1)}, "would move the deadline past"),
        ({"max_transport_failures": 9}, "exceeds the approved 3"),
        ({"base_delay": timedelta(seconds=1)}, "differs from the operation's"),
    ],
)
def test_widening_on_resume_is_refused_and_audited_on_the_operation(limits: dict[str, Any], words: str) -> None:
    existing = make_record(CONTRACT)
    answer = admit(ask(op=existing.operation_id, **limits), existing, [], T0, token="t")
    assert isinstance(answer, Refuse) and answer.kind is Refusal.CONFLICT
    assert answer.operation_id == existing.operation_id and words in answer.message


def test_another_job_or_contract_on_resume_is_refused() -> None:
    existing = make_record(CONTRACT)
    other = admit(ask("other-job", op=existing.operation_id), existing, [], T0, token="t")
    assert isinstance(other, Refuse) and "watches job exp_71c, not other-job" in other.message
    changed = WatchRequest(make_contract(result="output.url"), "exp_71c", existing.operation_id)
    assert isinstance(admit(changed, existing, [], T0, token="t"), Refuse)


def test_the_same_job_gets_its_existing_operation_back_never_a_fresh_budget() -> None:
    """Item 5: start_watch again for the same job used to create a fresh operation with a fresh budget."""
    spent = replace(make_record(CONTRACT), status_requests_used=12)
    again = admit(ask(), None, [spent], T0 + timedelta(minutes=1), token="t")
    assert isinstance(again, Resume) and again.record is spent and again.reused_job
    named = admit(ask(op="a-new-name"), None, [spent], T0, token="t")
    assert isinstance(named, Refuse) and named.kind is Refusal.CONFLICT and spent.operation_id in named.message


def test_an_agent_is_bounded_by_its_caps_and_gets_them_as_defaults() -> None:
    contract = make_contract()
    capped = replace(contract, agent=AgentLimits(max_deadline=timedelta(minutes=5), max_requests=3))
    over = admit(WatchRequest(capped, "j", agent=True, limits=Limits(max_requests=4)), None, [], T0, token="t")
    assert isinstance(over, Refuse) and over.kind is Refusal.LIMIT and "[agent].max_requests 3" in over.message
    made = admit(WatchRequest(capped, "j", agent=True), None, [], T0, token="t")
    assert isinstance(made, Create)
    assert made.record.plan.max_status_requests == 3 and made.record.deadline_at == T0 + timedelta(minutes=5)


def test_operation_ids_are_sanitised_from_the_contract_name() -> None:
    assert new_operation_id("my contract!", T0, "ab").startswith("my-contract-20250418-")
    assert new_operation_id("__", T0, "ab").startswith("op-")


def test_check_many_names_each_refused_request_and_each_repeat_by_its_place() -> None:
    requests = [ask("a", "op-1"), ask("b\x07"), ask("c"), ask("a"), ask("d", "op-1"), ask("e")]
    refused = check_many(requests, lambda index: f"line {index + 10}")
    assert [index for index, _ in refused] == [1, 3, 4]
    words = {
        index: refusal.message_for({"job_id": "job id", "operation_id": "operation id"}) for index, refusal in refused
    }
    assert "U+0007" in words[1]
    assert words[3] == "job id is given twice (also at line 10); give each once"
    assert words[4] == "operation id op-1 is given twice (also at line 10); give each once"
    assert all(refusal.kind is Refusal.INVALID for _, refusal in refused)


def test_the_same_job_under_another_contract_name_is_not_a_repeat() -> None:
    other = replace(CONTRACT, name="imports")
    assert repeated([ask("a"), WatchRequest(other, "a")]) == []
    assert [(i, e) for i, e, _ in repeated([ask("a"), ask("b"), ask("a")])] == [(2, 0)]


def test_an_agent_session_creates_at_most_max_operations_and_resumes_are_not_counted() -> None:
    """Issue 23: `[agent].max_operations`, 20 unless the contract says, is the one rule for every agent path."""
    assert CONTRACT.agent_max_operations == 20

    def agent(job: str, before: int) -> WatchRequest:
        return WatchRequest(CONTRACT, job, agent=True, created_before=before)

    assert isinstance(admit(agent("job-20", 19), None, [], T0, token="t"), Create)
    refused = admit(agent("job-21", 20), None, [], T0, token="t")
    assert isinstance(refused, Refuse) and refused.kind is Refusal.LIMIT and refused.operation_id is None
    [problem] = refused.problems
    assert (problem.field, problem.allowed) == ("max_operations", 20)
    assert "this agent session has created 20 operations of contract 'exports'" in refused.message
    existing = make_record(CONTRACT)
    assert isinstance(admit(agent(existing.job_id, 20), None, [existing], T0, token="t"), Resume)
    person = WatchRequest(CONTRACT, "job-21", created_before=500)  # not an agent: no such cap
    assert isinstance(admit(person, None, [], T0, token="t"), Create)
    capped = replace(CONTRACT, agent=AgentLimits(max_operations=1))
    assert isinstance(admit(WatchRequest(capped, "j", agent=True, created_before=1), None, [], T0, token="t"), Refuse)


def test_one_check_owns_watchability_and_the_credential_in_the_job() -> None:
    """Whether a contract may be watched at all, and whether the job as given carries the credential, are refused
    by admission's one `check`, whoever asks (the interfaces only say its refusal in their words)."""
    from pollwarden.core.admission import check, watchable_problem

    unsafe = replace(CONTRACT, safe_status=False)
    refused = check(WatchRequest(unsafe, "exp_71c"))
    assert refused is not None and refused.kind is Refusal.INVALID
    assert refused.message == watchable_problem(unsafe) and "safe_status = false" in refused.message
    assert watchable_problem(CONTRACT) is None and check(ask()) is None
    secret = "s3cr3t-token-0123456789"
    in_job = check(WatchRequest(CONTRACT, f"exp-{secret}", credential=secret))
    assert in_job is not None and in_job.message == "job_id contains the credential; give the provider's job id"
    handles = replace(CONTRACT, status_url_handles=True)
    url = f"{handles.origin}/jobs/{secret}"
    in_url = check(WatchRequest(handles, None, status_location=url, credential=secret))
    assert in_url is not None and "status_location contains the credential" in in_url.message
    assert secret not in in_url.message
