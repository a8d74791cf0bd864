"""anthropic-message-batch against an imitation of the Message Batches API, through the real CLI.

Bodies: the API reference "Retrieve a Message Batch" example
(docs.anthropic.com/en/api/retrieving-message-batches), adapted per state with the nullability documented in
anthropic-sdk-python `src/anthropic/types/messages/message_batch.py` and `message_batch_request_counts.py`
("each count is zero until processing of the entire Message Batch has ended"); result lines from
`message_batch_individual_response.py` / `message_batch_result.py`; error bodies from
`types/shared/error_response.py` and `error_type.py` (see docs/plans/part8-providers.md section 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli

from .imitation import Answer, Imitation, JSONValue, anthropic, anthropic_error, ok
from .support import assert_no_secret, fetch_result, tuned, watch

KEY = "sk-ant-imitation-91be"
ENV = {"ANTHROPIC_API_KEY": KEY}
ID = "msgbatch_013Zva2CMHLNnXjNJJKqJ2EF"


def batch(status: str, *, cancel: bool = False, origin: str = "https://api.anthropic.com", **counts: int) -> Answer:
    ended = status == "ended"
    body: dict[str, JSONValue] = {
        "id": ID,
        "type": "message_batch",
        "processing_status": status,
        "request_counts": {
            "processing": 0 if ended else 100,
            "succeeded": 0,
            "errored": 0,
            "canceled": 0,
            "expired": 0,
            **counts,
        },
        "ended_at": "2024-09-24T19:02:11.512380Z" if ended else None,
        "created_at": "2024-09-24T18:37:24.100435Z",
        "expires_at": "2024-09-25T18:37:24.100435Z",
        "archived_at": None,
        "cancel_initiated_at": "2024-09-24T18:40:00.000000Z" if cancel else None,
        "results_url": f"{origin}/v1/messages/batches/{ID}/results" if ended else None,
    }
    return ok(body)


RESULTS = (
    b'{"custom_id": "my-second-request", "result": {"type": "succeeded", "message":'
    b' {"id": "msg_014VwiXbi91y3JMjcpyGBHX5",'
    b' "type": "message", "role": "assistant", "model": "claude-3-5-sonnet-20240620", "content": [{"type": "text",'
    b' "text": "Hello again!"}], "stop_reason": "end_turn", "stop_sequence": null, "usage": {"input_tokens": 11,'
    b' "output_tokens": 36}}}}\n'
    b'{"custom_id": "my-first-request", "result": {"type": "errored", "error": {"type": "error", "error":'
    b' {"type": "invalid_request_error", "message": "max_tokens: Field required"}, "request_id": "req_01"}}}\n'
)


@pytest.fixture
def provider() -> Any:
    with Imitation(anthropic(KEY)) as imitation:
        yield imitation


@pytest.fixture
def contract(tmp_path: Path) -> Path:
    return tuned(tmp_path / "contracts", "anthropic-message-batch")


def test_lifecycle_to_success_then_fetch_the_results(
    provider: Imitation, contract: Path, home: Path, tmp_path: Path
) -> None:
    provider.script(
        ID, batch("in_progress"), batch("in_progress"), batch("ended", origin=provider.url, succeeded=95, errored=5)
    )
    provider.file(f"/v1/messages/batches/{ID}/results", RESULTS, content_type="application/binary")
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=ID, operation="a1")
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["last_state"] == "ended"
    assert watched.outcome["result"] == f"{provider.url}/v1/messages/batches/{ID}/results"
    for seen in provider.seen(ID):
        assert (seen.method, seen.path) == ("GET", f"/v1/messages/batches/{ID}")
        assert seen.headers["x-api-key"] == KEY
        assert seen.headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in seen.headers

    out = tmp_path / "results.jsonl"
    fetched = fetch_result("a1", out, home=home, env=ENV)
    assert fetched.code == 0, fetched.stderr
    assert out.read_bytes() == RESULTS
    (download,) = provider.downloads(f"/v1/messages/batches/{ID}/results")
    assert download.headers["x-api-key"] == KEY
    assert_no_secret(KEY, watched.ran.stdout, watched.ran.stderr, fetched.stdout, fetched.stderr)


def test_results_url_on_another_origin_never_gets_the_key(
    provider: Imitation, contract: Path, home: Path, tmp_path: Path
) -> None:
    """Behind a gateway the batch still names api.anthropic.com: the results are fetched from the documented
    endpoint on base_url's origin, and the origin the batch names is never asked (nor given the key)."""
    with Imitation(anthropic(KEY)) as elsewhere:
        elsewhere.file(f"/v1/messages/batches/{ID}/results", RESULTS)
        provider.file(f"/v1/messages/batches/{ID}/results", RESULTS, content_type="application/binary")
        provider.script(ID, batch("ended", origin=elsewhere.url, succeeded=1))
        watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=ID, operation="a2")
        assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
        fetched = fetch_result("a2", tmp_path / "r.jsonl", home=home, env=ENV)
        assert fetched.code == 0, fetched.stderr
        assert (tmp_path / "r.jsonl").read_bytes() == RESULTS
        assert elsewhere.seen() == []
        assert_no_secret(KEY, fetched.stdout, fetched.stderr)


@pytest.mark.parametrize(
    ("answers", "code", "reason", "last_state"),
    [
        pytest.param([batch("ended", errored=100)], 3, "job_failed", "ended_all_errored", id="every-request-errored"),
        pytest.param(
            [batch("canceling", cancel=True), batch("ended", cancel=True, succeeded=40, canceled=60)],
            3,
            "job_cancelled",
            "ended_canceled",
            id="cancelled",
        ),
        pytest.param(
            [batch("ended", cancel=True, succeeded=100)], 0, None, "ended", id="cancel-asked-nothing-canceled"
        ),
        pytest.param([batch("ended", succeeded=90, expired=10)], 0, None, "ended", id="partly-expired"),
        pytest.param([batch("ended", succeeded=90, errored=5, expired=5)], 0, None, "ended", id="partly-errored"),
        pytest.param([batch("ended", expired=100)], 3, "job_expired", "ended_expired", id="all-expired"),
        pytest.param([batch("ended", errored=5, expired=5)], 3, "job_expired", "ended_expired", id="none-succeeded"),
        pytest.param(
            [batch("ended", canceled=10)], 4, "unknown_state", "ended_unexplained", id="canceled-without-cancel"
        ),
        pytest.param([batch("ended")], 4, "unknown_state", "ended_unexplained", id="ended-with-no-counts"),
        pytest.param([batch("archiving")], 4, "unknown_state", "archiving", id="undocumented-status"),
        pytest.param(
            [anthropic_error(400, "billing_error", "Your credit balance is too low")],
            4,
            "authorization_denied",
            None,
            id="billing",
        ),
        pytest.param(
            [anthropic_error(403, "permission_error", "not allowed")], 4, "authorization_denied", None, id="permission"
        ),
    ],
)
def test_documented_endings(
    provider: Imitation,
    contract: Path,
    home: Path,
    answers: list[Answer],
    code: int,
    reason: str | None,
    last_state: str | None,
) -> None:
    provider.script(ID, *answers)
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=ID)
    assert watched.code == code, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["reason"] == reason
    if last_state is not None:
        assert watched.outcome["last_state"] == last_state
    assert watched.outcome["status_requests_used"] == provider.status_requests(ID) == len(answers)


def test_all_errored_keeps_the_counts(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(ID, batch("ended", errored=100))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=ID)
    error = watched.outcome["provider_error"]
    assert error["request_counts"] == {"processing": 0, "succeeded": 0, "errored": 100, "canceled": 0, "expired": 0}


def test_rate_limit_then_overloaded_then_success(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(
        ID,
        Answer(
            429,
            anthropic_error(429, "rate_limit_error", "Number of requests has exceeded your rate limit").body,
            {"retry-after": "1"},
        ),
        anthropic_error(529, "overloaded_error", "Overloaded"),
        batch("ended", succeeded=1),
    )
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=ID)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    first, second, _ = provider.seen(ID)
    assert second.at - first.at >= 1.0, "the poll after retry-after: 1 came too early"


def test_wrong_key_is_an_authorization_stop(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(ID, batch("ended", succeeded=1))
    watched = watch(contract, base_url=provider.url, home=home, env={"ANTHROPIC_API_KEY": "sk-ant-wrong"}, job=ID)
    assert (watched.code, watched.outcome["reason"]) == (4, "authorization_denied")
    assert_no_secret("sk-ant-wrong", watched.ran.stdout, watched.ran.stderr)


def test_a_batch_that_ended_with_some_requests_expired_is_a_success_whose_results_are_fetched(
    provider: Imitation, contract: Path, home: Path, tmp_path: Path
) -> None:
    """Issue 24: 9,990 succeeded and 10 expired was `expired` (exit 3) and fetch-result refused the results file,
    so a pipeline submitted the batch again and paid twice. Every request of an ended batch is succeeded, errored,
    canceled or expired, and results_url covers them all: the succeeded ones are the output."""
    provider.script(ID, batch("in_progress"), batch("ended", origin=provider.url, succeeded=9990, expired=10))
    provider.file(f"/v1/messages/batches/{ID}/results", RESULTS, content_type="application/binary")
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=ID, operation="a9")
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    counts = {"processing": 0, "succeeded": 9990, "errored": 0, "canceled": 0, "expired": 10}
    assert watched.outcome["counts"] == counts
    fetched = fetch_result("a9", tmp_path / "results.jsonl", home=home, env=ENV)
    assert fetched.code == 0, fetched.stderr
    assert (tmp_path / "results.jsonl").read_bytes() == RESULTS
    assert "the result covers: canceled 0, errored 0, expired 10, processing 0, succeeded 9990" in fetched.stdout
    story = run_cli("story", "a9", home=home)
    assert "the result covers: canceled 0, errored 0, expired 10, processing 0, succeeded 9990" in story.stdout
    assert_no_secret(KEY, watched.ran.stdout, watched.ran.stderr, fetched.stdout, fetched.stderr)


def test_a_cancelled_batch_keeps_what_succeeded_before_the_cancel(
    provider: Imitation, contract: Path, home: Path, tmp_path: Path
) -> None:
    provider.script(
        ID, batch("canceling", cancel=True), batch("ended", cancel=True, origin=provider.url, succeeded=40, canceled=60)
    )
    provider.file(f"/v1/messages/batches/{ID}/results", RESULTS, content_type="application/binary")
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=ID, operation="a10")
    assert (watched.code, watched.outcome["reason"]) == (3, "job_cancelled"), watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["result"] == f"{provider.url}/v1/messages/batches/{ID}/results"
    fetched = fetch_result("a10", tmp_path / "part.jsonl", home=home, env=ENV)
    assert fetched.code == 0, fetched.stderr
    assert "a partial result: the finished part of a job that ended (job cancelled)" in fetched.stdout
    assert (tmp_path / "part.jsonl").read_bytes() == RESULTS


def test_an_ended_batch_with_nothing_succeeded_has_nothing_to_fetch(
    provider: Imitation, contract: Path, home: Path, tmp_path: Path
) -> None:
    provider.script(ID, batch("ended", origin=provider.url, errored=5, expired=5))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=ID, operation="a11")
    assert (watched.code, watched.outcome["reason"], watched.outcome["result"]) == (3, "job_expired", None)
    fetched = fetch_result("a11", tmp_path / "none.jsonl", home=home, env=ENV)
    assert fetched.code == 2 and provider.downloads(f"/v1/messages/batches/{ID}/results") == []
