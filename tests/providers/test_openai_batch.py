"""openai-batch against an imitation of the OpenAI Batch API, through the real CLI, worker and fetch-result.

Bodies are copied from (see docs/plans/part8-providers.md section 1 for the full provenance):
- the API reference "The batch object" example (platform.openai.com/docs/api-reference/batch/object):
  `COMPLETED`;
- the Batch guide's example (platform.openai.com/docs/guides/batch): `VALIDATING`;
- the API reference "Cancel batch" response: `CANCELLING`;
- openai-python `src/openai/types/batch.py`, `batch_error.py` (the `errors` shape): `FAILED`;
- the production body quoted in github.com/ProjectTech4DevAI/kaapi-backend/issues/723 (every request
  failed, `output_file_id` null): `ALL_FAILED`;
- the output file's JSONL line shape from the Batch guide ("Retrieving the results").
Error bodies and rate-limit headers: openai-python `_exceptions.py`, `_base_client.py`, and the
"Error codes" guide (tests/providers/imitation.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli

from .imitation import Answer, Imitation, JSONValue, ok, openai, openai_insufficient_quota, openai_rate_limited
from .support import assert_no_secret, fetch_result, tuned, watch

KEY = "sk-imitation-4f1c2e"
ENV = {"OPENAI_API_KEY": KEY}
NOW = int(time.time())
EXPIRES = NOW + 23 * 3600

COMPLETED: dict[str, JSONValue] = {
    "id": "batch_abc123", "object": "batch", "endpoint": "/v1/completions", "errors": None,
    "input_file_id": "file-abc123", "completion_window": "24h", "status": "completed",
    "output_file_id": "file-cvaTdG", "error_file_id": "file-HOWS94",
    "created_at": 1711471533, "in_progress_at": 1711471538, "expires_at": 1711557933,
    "finalizing_at": 1711493133, "completed_at": 1711493163, "failed_at": None, "expired_at": None,
    "cancelling_at": None, "cancelled_at": None,
    "request_counts": {"total": 100, "completed": 95, "failed": 5},
    "metadata": {"customer_id": "user_123456789", "batch_description": "Nightly eval job"},
}  # fmt: skip
VALIDATING: dict[str, JSONValue] = {
    "id": "batch_abc123", "object": "batch", "endpoint": "/v1/chat/completions", "errors": None,
    "input_file_id": "file-abc123", "completion_window": "24h", "status": "validating",
    "output_file_id": None, "error_file_id": None, "created_at": NOW, "in_progress_at": None,
    "expires_at": EXPIRES, "completed_at": None, "failed_at": None, "expired_at": None,
    "request_counts": {"total": 0, "completed": 0, "failed": 0}, "metadata": None,
}  # fmt: skip
CANCELLING: dict[str, JSONValue] = {
    "id": "batch_abc123", "object": "batch", "endpoint": "/v1/chat/completions", "errors": None,
    "input_file_id": "file-abc123", "completion_window": "24h", "status": "cancelling",
    "output_file_id": None, "error_file_id": None, "created_at": NOW, "in_progress_at": NOW,
    "expires_at": EXPIRES, "finalizing_at": None, "completed_at": None, "failed_at": None,
    "expired_at": None, "cancelling_at": NOW, "cancelled_at": None,
    "request_counts": {"total": 100, "completed": 23, "failed": 1},
}  # fmt: skip
ALL_FAILED: dict[str, JSONValue] = {
    "id": "batch_69c3c347282c81908ede48ecc95bf201", "object": "batch", "endpoint": "/v1/responses",
    "completion_window": "24h", "status": "completed", "input_file_id": "file-2qvouj6sKUCGTbu3odouhk",
    "created_at": 1774437191, "in_progress_at": 1774437194, "finalizing_at": 1774437322,
    "completed_at": 1774437324, "expires_at": 1774523591, "output_file_id": None,
    "error_file_id": "file-QzTKe9srv1bbmpX5MwCTZx", "errors": None,
    "request_counts": {"completed": 0, "failed": 9, "total": 9},
}  # fmt: skip
FAILED: dict[str, JSONValue] = {
    "id": "batch_abc123", "object": "batch", "status": "failed", "output_file_id": None,
    "errors": {"object": "list", "data": [{"code": "invalid_json_line", "line": 1,
               "message": "This line is not parseable as valid JSON.", "param": None}]},
    "failed_at": 1711471540, "created_at": 1711471533, "expires_at": 1711557933,
    "request_counts": {"total": 0, "completed": 0, "failed": 0},
}  # fmt: skip
OUTPUT_JSONL = (
    b'{"id": "batch_req_123", "custom_id": "request-2", "response": {"status_code": 200, "request_id": "req_123",'
    b' "body": {"id": "chatcmpl-123", "object": "chat.completion", "choices": []}}, "error": null}\n'
    b'{"id": "batch_req_456", "custom_id": "request-1", "response": {"status_code": 200, "request_id": "req_789",'
    b' "body": {"id": "chatcmpl-abc", "object": "chat.completion", "choices": []}}, "error": null}\n'
)


def state(base: dict[str, JSONValue], status: str, **changes: Any) -> Answer:
    return ok({**base, "status": status, **changes})


@pytest.fixture
def provider() -> Any:
    with Imitation(openai(KEY)) as imitation:
        yield imitation


@pytest.fixture
def contract(tmp_path: Path) -> Path:
    return tuned(tmp_path / "contracts", "openai-batch")


def test_lifecycle_to_success_then_fetch_the_output_file(
    provider: Imitation, contract: Path, home: Path, tmp_path: Path
) -> None:
    provider.script(
        "batch_abc123",
        ok(VALIDATING),
        state(VALIDATING, "in_progress", in_progress_at=NOW),
        state(VALIDATING, "finalizing", finalizing_at=NOW),
        ok(COMPLETED),
    )
    provider.file("/v1/files/file-cvaTdG/content", OUTPUT_JSONL, content_type="application/octet-stream")
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job="batch_abc123", operation="b1")
    assert watched.code == 0, watched.ran.stderr
    assert watched.outcome["outcome"] == "succeeded"
    assert watched.outcome["result"] == "file-cvaTdG"
    assert watched.outcome["status_requests_used"] == provider.status_requests("batch_abc123") == 4
    for seen in provider.seen("batch_abc123"):
        assert (seen.method, seen.path, seen.body) == ("GET", "/v1/batches/batch_abc123", b"")
        assert seen.headers["authorization"] == f"Bearer {KEY}"
        assert seen.headers["user-agent"].startswith("pollwarden/")

    out = tmp_path / "output.jsonl"
    fetched = fetch_result("b1", out, home=home, env=ENV)
    assert fetched.code == 0, fetched.stderr
    assert out.read_bytes() == OUTPUT_JSONL
    (download,) = provider.downloads("/v1/files/file-cvaTdG/content")
    assert download.headers["authorization"] == f"Bearer {KEY}"
    assert_no_secret(KEY, watched.ran.stdout, watched.ran.stderr, fetched.stdout, fetched.stderr)


@pytest.mark.parametrize(
    ("answers", "code", "reason", "last_state"),
    [
        pytest.param(
            [ok(ALL_FAILED)], 3, "job_failed", "completed_without_output", id="completed-every-request-failed"
        ),
        pytest.param(
            [ok({**COMPLETED, "output_file_id": ""})], 3, "job_failed", "completed_without_output", id="empty-output-id"
        ),
        pytest.param([ok(VALIDATING), ok(FAILED)], 3, "job_failed", "failed", id="failed-validation"),
        pytest.param(
            [ok(CANCELLING), state(CANCELLING, "cancelled", cancelled_at=NOW)],
            3,
            "job_cancelled",
            "cancelled",
            id="cancelled",
        ),
        pytest.param(
            [state(VALIDATING, "in_progress"), state(VALIDATING, "expired", expired_at=NOW)],
            3,
            "job_expired",
            "expired",
            id="expired",
        ),
        pytest.param([state(VALIDATING, "paused")], 4, "unknown_state", "paused", id="undocumented-state"),
        pytest.param(
            [state(VALIDATING, "in_progress", expires_at=NOW - 3600)],
            4,
            "contradictory_status",
            "in_progress",
            id="running-after-expiry",
        ),
        pytest.param([ok({**VALIDATING, "status": None})], 4, "invalid_response", None, id="status-null"),
        pytest.param([ok({"id": "batch_abc123"})], 4, "invalid_response", None, id="status-missing"),
        pytest.param([openai_insufficient_quota()], 4, "authorization_denied", None, id="insufficient-quota"),
    ],
)
def test_documented_endings(
    provider: Imitation,
    contract: Path,
    home: Path,
    answers: list[Answer],
    code: int,
    reason: str,
    last_state: str | None,
) -> None:
    provider.script("batch_abc123", *answers)
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job="batch_abc123")
    assert watched.code == code, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["reason"] == reason
    if last_state is not None:
        assert watched.outcome["last_state"] == last_state
    assert watched.outcome["status_requests_used"] == provider.status_requests("batch_abc123") == len(answers)
    assert_no_secret(KEY, watched.ran.stdout, watched.ran.stderr)


def test_failure_keeps_the_providers_reasons(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script("batch_abc123", ok(FAILED))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job="batch_abc123")
    assert watched.code == 3
    assert watched.outcome["provider_error"] == [
        {"code": "invalid_json_line", "line": 1, "message": "This line is not parseable as valid JSON."}
    ]
    provider.script("all_failed", ok(ALL_FAILED))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job="all_failed", operation="op2")
    assert watched.outcome["provider_error"] == {
        "request_counts": {"completed": 0, "failed": 9, "total": 9},
        "error_file_id": "file-QzTKe9srv1bbmpX5MwCTZx",
    }


def test_finalizing_past_the_expiry_is_not_contradictory(provider: Imitation, contract: Path, home: Path) -> None:
    """An expiring batch finalizes before it says expired; only validating/in_progress carry the expiry."""
    provider.script("batch_abc123", state(VALIDATING, "finalizing", expires_at=NOW - 3600), ok(COMPLETED))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job="batch_abc123")
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr


def test_rate_limit_waits_retry_after_ms(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script("batch_abc123", openai_rate_limited(600), ok(COMPLETED))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job="batch_abc123")
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    first, second = provider.seen("batch_abc123")
    assert (first.status, second.status) == (429, 200)
    assert second.at - first.at >= 0.6, "the poll after retry-after-ms: 600 came too early"


def test_wrong_key_is_an_authorization_stop_and_never_leaks(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script("batch_abc123", ok(COMPLETED))
    wrong = "sk-wrong-7d0e11"
    watched = watch(contract, base_url=provider.url, home=home, env={"OPENAI_API_KEY": wrong}, job="batch_abc123")
    assert watched.code == 4
    assert watched.outcome["reason"] == "authorization_denied"
    assert provider.status_requests("batch_abc123") == 1
    assert_no_secret(wrong, watched.ran.stdout, watched.ran.stderr)


def test_unknown_batch_stops_after_the_grace(provider: Imitation, tmp_path: Path, home: Path) -> None:
    contract = tuned(tmp_path / "c", "openai-batch", not_found={"grace": "300ms"})
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job="batch_nope")
    assert watched.code == 4
    assert watched.outcome["reason"] == "integration_failure"
    assert provider.status_requests("batch_nope") >= 2  # within the grace a 404 is "not visible yet"


@pytest.mark.parametrize(
    ("ending", "reason", "counts"),
    [
        pytest.param("expired", "job_expired", {"total": 10000, "completed": 9990, "failed": 0}, id="expired"),
        pytest.param("cancelled", "job_cancelled", {"total": 100, "completed": 30, "failed": 2}, id="cancelled"),
    ],
)
def test_the_finished_part_of_an_ended_batch_is_kept_and_fetched(
    provider: Imitation, contract: Path, home: Path, tmp_path: Path, ending: str, reason: str, counts: dict[str, int]
) -> None:
    """Issue 24: an expired or cancelled batch's output file (its finished part) was dropped and could not be
    fetched. It stays a stop (exit 3), with the output file and the provider's counts in the outcome."""
    ended = state(VALIDATING, ending, output_file_id="file-part1", error_file_id=None, request_counts=counts)
    provider.script("batch_abc123", state(VALIDATING, "in_progress", in_progress_at=NOW), ended)
    provider.file("/v1/files/file-part1/content", OUTPUT_JSONL, content_type="application/octet-stream")
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job="batch_abc123", operation="p1")
    assert watched.code == 3, watched.ran.stdout + watched.ran.stderr
    assert (watched.outcome["reason"], watched.outcome["result"]) == (reason, "file-part1")
    assert watched.outcome["counts"] == counts

    out = tmp_path / "part.jsonl"
    fetched = fetch_result("p1", out, home=home, env=ENV)
    assert fetched.code == 0, fetched.stderr
    assert out.read_bytes() == OUTPUT_JSONL
    told = ", ".join(f"{name} {value}" for name, value in sorted(counts.items()))
    assert f"a partial result: the finished part of a job that ended ({reason.replace('_', ' ')}): {told}" in (
        fetched.stdout
    )
    (download,) = provider.downloads("/v1/files/file-part1/content")
    assert download.headers["authorization"] == f"Bearer {KEY}"

    status = run_cli("status", "p1", home=home)
    assert "partial result" in status.stdout and told in status.stdout, status.stdout
    story = run_cli("story", "p1", home=home)
    assert f"kept the finished part as a partial result: file-part1 ({told})" in story.stdout, story.stdout
    assert_no_secret(KEY, watched.ran.stdout, fetched.stdout, fetched.stderr, status.stdout, story.stdout)


def test_an_ended_batch_without_an_output_file_has_nothing_to_fetch(
    provider: Imitation, contract: Path, home: Path, tmp_path: Path
) -> None:
    provider.script("batch_abc123", state(VALIDATING, "expired", expired_at=NOW))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job="batch_abc123", operation="p2")
    assert (watched.code, watched.outcome["result"]) == (3, None), watched.ran.stdout + watched.ran.stderr
    fetched = fetch_result("p2", tmp_path / "none.jsonl", home=home, env=ENV)
    assert fetched.code == 2 and "has no validated result (job_expired)" in fetched.stderr, fetched.stderr
    assert not (tmp_path / "none.jsonl").exists() and provider.downloads("/v1/files/None/content") == []
