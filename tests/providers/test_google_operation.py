"""google-operation against an imitation of a google.longrunning.Operation endpoint (Vertex AI), real CLI.

Bodies: the AutoML "Operation status" page (cloud.google.com/vision/automl/docs/operation-status) for
`PENDING`; the Operation resource reference (cloud.google.com/vertex-ai/docs/reference/rest/Shared.Types/
ListOperationsResponse#Operation, identical across services) for the done/response/error shapes; the
operations.cancel reference ("an Operation.error value with a google.rpc.Status.code of 1") for `CANCELLED`;
googleapis/python-api-core `google/api_core/operation.py` (`_set_result_from_operation`, `cancelled`) for
how the SDK reads them; the Google API error model for the 401/404/429 bodies (docs/plans/part8-providers.md
section 3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pollwarden.catalogue import shipped_contract
from tests.conftest import run_cli

from .imitation import Imitation, JSONValue, google, google_error, ok
from .support import assert_no_secret, tuned, watch

TOKEN = "ya29.imitation-access-token"
ENV = {"GOOGLE_OAUTH_ACCESS_TOKEN": TOKEN}
NAME = "projects/123456789012/locations/us-central1/datasets/1234567890/operations/5678901234"

PENDING: dict[str, JSONValue] = {
    "name": NAME,
    "metadata": {
        "@type": "type.googleapis.com/google.cloud.automl.v1.OperationMetadata",
        "createTime": "2019-07-26T21:10:18.338846Z",
        "updateTime": "2019-07-26T21:10:18.338846Z",
        "createModelDetails": {},
    },
}
DATASET: dict[str, JSONValue] = {
    "@type": "type.googleapis.com/google.cloud.aiplatform.v1.Dataset",
    "name": "projects/123456789012/locations/us-central1/datasets/1234567890",
}
DONE: dict[str, JSONValue] = {
    "name": NAME,
    "metadata": {
        "@type": "type.googleapis.com/google.cloud.aiplatform.v1.CreateDatasetOperationMetadata",
        "genericMetadata": {"createTime": "2024-05-01T10:00:00.123456Z", "updateTime": "2024-05-01T10:00:04.654321Z"},
    },
    "done": True,
    "response": DATASET,
}
FAILED_ERROR: dict[str, JSONValue] = {
    "code": 3,
    "message": "Invalid GCS path gs://bucket/missing.jsonl",
    "details": [
        {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "INVALID_ARGUMENT",
            "domain": "aiplatform.googleapis.com",
        }
    ],
}


@pytest.fixture
def provider() -> Any:
    with Imitation(google(TOKEN)) as imitation:
        yield imitation


@pytest.fixture
def contract(tmp_path: Path) -> Path:
    return tuned(tmp_path / "contracts", "google-operation")


def test_operation_name_keeps_its_slashes_and_the_response_is_the_result(
    provider: Imitation, contract: Path, home: Path
) -> None:
    provider.script(NAME, ok(PENDING), ok({**PENDING, "done": False}), ok(DONE))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=NAME)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["result"] == DATASET
    assert watched.outcome["last_state"] == "done"
    for seen in provider.seen(NAME):
        assert (seen.method, seen.path) == ("GET", f"/v1/{NAME}")
        assert seen.headers["authorization"] == f"Bearer {TOKEN}"
    assert_no_secret(TOKEN, watched.ran.stdout, watched.ran.stderr)


def test_empty_response_is_a_success(provider: Imitation, contract: Path, home: Path) -> None:
    """Delete-like methods answer google.protobuf.Empty; some services send {}."""
    empty: dict[str, JSONValue] = {"@type": "type.googleapis.com/google.protobuf.Empty"}
    cases: list[tuple[str, dict[str, JSONValue]]] = [("operations/empty-type", empty), ("operations/bare", {})]
    for job, response in cases:
        provider.script(job, ok({"name": job, "done": True, "response": response}))
        watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=job, operation=job.replace("/", "-"))
        assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
        assert watched.outcome["result"] == response


@pytest.mark.parametrize(
    ("body", "code", "reason", "last_state"),
    [
        pytest.param(
            {"name": NAME, "done": True, "error": {"code": 1, "message": "CANCELLED"}},
            3,
            "job_cancelled",
            "cancelled",
            id="cancelled",
        ),
        pytest.param({"name": NAME, "done": True, "error": FAILED_ERROR}, 3, "job_failed", "failed", id="failed"),
        pytest.param({"name": NAME, "done": True, "error": {}}, 3, "job_failed", "failed", id="empty-error"),
        pytest.param(
            {"name": NAME, "done": True, "error": {"code": "1"}},
            3,
            "job_failed",
            "failed",
            id="code-as-string-is-not-cancel",
        ),
        pytest.param(
            {"name": NAME, "done": True}, 4, "unknown_state", "done_without_result_or_error", id="done-with-neither"
        ),
        pytest.param(
            {"name": NAME, "done": False, "response": DATASET},
            4,
            "unknown_state",
            "not_done_but_has_result",
            id="not-done-with-result",
        ),
        pytest.param({"name": NAME, "done": "true"}, 4, "unknown_state", "done is true", id="done-as-string"),
    ],
)
def test_documented_endings(
    provider: Imitation, contract: Path, home: Path, body: dict[str, JSONValue], code: int, reason: str, last_state: str
) -> None:
    provider.script(NAME, ok(body))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=NAME)
    assert watched.code == code, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["reason"] == reason
    assert watched.outcome["last_state"] == last_state


def test_failure_keeps_code_message_and_details(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(NAME, ok({"name": NAME, "done": True, "error": FAILED_ERROR}))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=NAME)
    assert watched.outcome["provider_error"] == FAILED_ERROR


def test_dot_segments_in_the_name_are_refused_before_any_request(
    provider: Imitation, contract: Path, home: Path
) -> None:
    for job in ("projects/p/../../admin/operations/1", "/operations/1", "operations/./1"):
        watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=job)
        assert watched.code == 2, (job, watched.ran.stdout, watched.ran.stderr)
    assert provider.seen() == []


def test_quota_429_waits_and_a_401_stops(provider: Imitation, contract: Path, home: Path) -> None:
    quota = google_error(
        429, "RESOURCE_EXHAUSTED", "Quota exceeded for aiplatform.googleapis.com/online_prediction_requests",
        [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.2s"}],
    )  # fmt: skip
    provider.script(NAME, quota, ok(DONE))  # no Retry-After: the wait is the body's RetryInfo
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=NAME)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    first, second = provider.seen(NAME)
    assert second.at - first.at >= 1.2

    provider.script("operations/2", ok(DONE))
    stale = {"GOOGLE_OAUTH_ACCESS_TOKEN": "ya29.stale"}
    expired = watch(contract, base_url=provider.url, home=home, env=stale, job="operations/2", operation="op2")
    assert (expired.code, expired.outcome.get("reason")) == (4, "authorization_denied"), (
        expired.ran.stdout + expired.ran.stderr
    )


RUN_V2 = "projects/my-project/locations/europe-west1/operations/7c1d6a1e-5b1f-4f8a-9a1c-2e3f4a5b6c7d"


def test_an_operation_of_a_v2_api_is_watched_with_api_version(tmp_path: Path, home: Path) -> None:
    """Issue 24: `/v1/` was fixed in the status and cancel URLs, so a v2 API's operations (Cloud Run Admin v2:
    `GET https://run.googleapis.com/v2/{name}`) could not be watched, and a `use` file could not change it."""
    contract = tuned(tmp_path / "c", "google-operation", vars={"api_version": "v2"})
    done: dict[str, JSONValue] = {
        "name": RUN_V2,
        "metadata": {"@type": "type.googleapis.com/google.cloud.run.v2.Service", "name": "projects/p/services/s"},
        "done": True,
        "response": {"@type": "type.googleapis.com/google.cloud.run.v2.Service", "name": "projects/p/services/s"},
    }
    with Imitation(google(TOKEN, version="v2")) as run_admin:
        run_admin.script(RUN_V2, ok({"name": RUN_V2}), ok(done))
        watched = watch(contract, base_url=run_admin.url, home=home, env=ENV, job=RUN_V2)
        assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
        assert [seen.path for seen in run_admin.seen(RUN_V2)] == [f"/v2/{RUN_V2}"] * 2
    cancel = shipped_contract("google-operation", {"api_version": "v2"}).cancel
    assert cancel is not None and cancel.url_for(RUN_V2).endswith(f"/v2/{RUN_V2}:cancel")
    assert shipped_contract("google-operation").status_url_for(RUN_V2).endswith(f"/v1/{RUN_V2}")


@pytest.mark.parametrize("version", ["v1/../v2", "v1?alt=json", ""])
def test_an_api_version_that_would_change_the_path_is_refused(version: str, home: Path) -> None:
    ran = run_cli(
        "watch", "--contract", "google-operation", "--var", f"api_version={version}", "--job", NAME, home=home
    )
    assert ran.code == 2 and "api_version" in ran.stderr, ran.stderr
    assert "Traceback" not in ran.stderr
