"""vertex-ai-batch-prediction against an imitation of Vertex AI's batchPredictionJobs.get, through the real CLI.

Bodies: the BatchPredictionJob resource (cloud.google.com/vertex-ai/docs/reference/rest/v1/
projects.locations.batchPredictionJobs) with googleapis/python-aiplatform @ 91cc8ce4 (v1.165.1)
aiplatform_v1/types/job_state.py (every JobState) and batch_prediction_job.py (outputInfo, completionStats,
partialFailures, error); the Gemini batch guide's job (a publisher model, JSONL in and out of Cloud Storage).
Errors in the google.rpc.Status model; a 429 RESOURCE_EXHAUSTED may carry a RetryInfo. Every documented value
is in tests/providers/fidelity/vertex-ai-batch-prediction.toml.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli

from .imitation import Answer, Imitation, JSONValue, google_error, ok
from .imitation_jobs import vertex
from .support import assert_no_secret, choose_cancel, tuned, watch
from .test_google_operation import ENV as ENV  # one Google access token, as for every Google API
from .test_google_operation import TOKEN as TOKEN

PROJECT, LOCATION, JOB = "123456789012", "us-central1", "1234567890123456789"
OUTPUT = "gs://reviews-batch/out/prediction-model-2024-06-01T10:00:00.000000Z"


def batch(state: str, **members: JSONValue) -> Answer:
    body: dict[str, JSONValue] = {
        "name": f"projects/{PROJECT}/locations/{LOCATION}/batchPredictionJobs/{JOB}",
        "displayName": "reviews-2024-06", "model": "publishers/google/models/gemini-2.5-flash",
        "inputConfig": {"instancesFormat": "jsonl", "gcsSource": {"uris": ["gs://reviews-batch/in.jsonl"]}},
        "outputConfig": {"predictionsFormat": "jsonl", "gcsDestination": {"outputUriPrefix": "gs://reviews-batch/out"}},
        "state": state, "createTime": "2024-06-01T10:00:00.000000Z", "updateTime": "2024-06-01T10:05:00.000000Z",
        **members,
    }  # fmt: skip
    return ok(body)


DONE = batch(
    "JOB_STATE_SUCCEEDED", outputInfo={"gcsOutputDirectory": OUTPUT}, completionStats={"successfulCount": "1000"}
)


@pytest.fixture
def provider() -> Iterator[Imitation]:
    with Imitation(vertex(TOKEN, project=PROJECT, location=LOCATION)) as imitation:
        yield imitation


@pytest.fixture
def contract(tmp_path: Path) -> Path:
    return tuned(tmp_path / "contracts", "vertex-ai-batch-prediction")


def vx_watch(contract: Path, provider: Imitation, home: Path, **kw: Any) -> Any:
    where = {"project": PROJECT, "location": LOCATION}
    return watch(contract, base_url=provider.url, home=home, env=ENV, job=kw.pop("job", JOB), vars=where, **kw)


def test_a_batch_from_queue_to_its_output_directory(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(
        JOB, batch("JOB_STATE_QUEUED"), batch("JOB_STATE_PENDING"), batch("JOB_STATE_RUNNING"),
        batch("JOB_STATE_UPDATING"), batch("JOB_STATE_RUNNING"), DONE,
    )  # fmt: skip
    watched = vx_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["result"] == {
        "output": OUTPUT, "completion_stats": {"successfulCount": "1000"}, "partial_failures": None,
    }  # fmt: skip
    seen = provider.seen(JOB)
    assert len(seen) == 6 and all(s.credential_ok for s in seen)
    path = f"/v1/projects/{PROJECT}/locations/{LOCATION}/batchPredictionJobs/{JOB}"
    assert all((s.method, s.path) == ("GET", path) for s in seen)
    assert_no_secret(TOKEN, watched.ran.stdout, watched.ran.stderr)


PARTIAL_FAILURES: list[JSONValue] = [{"code": 3, "message": "Failed to parse the input line 17"}]


@pytest.mark.parametrize(
    ("answer", "code", "reason"),
    [
        pytest.param(
            batch("JOB_STATE_PARTIALLY_SUCCEEDED", outputInfo={"gcsOutputDirectory": OUTPUT},
                  completionStats={"successfulCount": "990", "failedCount": "10"}, partialFailures=PARTIAL_FAILURES),
            0, None, id="partially-succeeded",
        ),
        pytest.param(
            batch("JOB_STATE_FAILED", error={"code": 3, "message": "The input file is empty"}), 3, "job_failed",
            id="failed",
        ),
        pytest.param(batch("JOB_STATE_CANCELLED", error={"code": 1, "message": "CANCELLED"}), 3, "job_cancelled",
                     id="cancelled"),
        pytest.param(batch("JOB_STATE_EXPIRED"), 3, "job_expired", id="expired"),
        pytest.param(batch("JOB_STATE_PAUSED"), 4, "job_needs_action", id="paused"),
        pytest.param(batch("JOB_STATE_UNSPECIFIED"), 4, "unknown_state", id="unspecified"),
        pytest.param(batch("JOB_STATE_SUCCEEDED"), 4, "result_invalid", id="succeeded-without-output"),
    ],
)  # fmt: skip
def test_documented_endings(
    provider: Imitation, contract: Path, home: Path, answer: Answer, code: int, reason: str | None
) -> None:
    provider.script(JOB, batch("JOB_STATE_RUNNING"), answer)
    watched = vx_watch(contract, provider, home)
    assert (watched.code, watched.outcome["reason"]) == (code, reason), watched.ran.stdout + watched.ran.stderr
    if code == 0:
        result = watched.outcome["result"]
        assert result["output"] == OUTPUT and result["partial_failures"] == PARTIAL_FAILURES
        assert result["completion_stats"] == {"successfulCount": "990", "failedCount": "10"}


def test_resource_exhausted_waits_its_retry_info(provider: Imitation, contract: Path, home: Path) -> None:
    retry: dict[str, JSONValue] = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}
    provider.script(JOB, google_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded", [retry]), DONE)
    watched = vx_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    first, second = provider.seen(JOB)
    assert (first.status, second.status) == (429, 200)
    assert second.at - first.at >= 0.9  # RetryInfo's 1 s is a floor under the next poll


def test_the_job_id_is_the_number_at_the_end_of_its_name(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(JOB, DONE)
    whole = f"projects/{PROJECT}/locations/{LOCATION}/batchPredictionJobs/{JOB}"
    ran = run_cli(
        "watch", "--contract", str(contract), "--var", f"base_url={provider.url}", "--var", f"project={PROJECT}",
        "--var", f"location={LOCATION}", "--job", whole, home=home, env=ENV,
    )  # fmt: skip
    assert ran.code == 2 and "Traceback" not in ran.stderr, ran.stderr
    assert provider.seen() == []
    padded = vx_watch(contract, provider, home, job=f"0{JOB}")  # an integer: the same job
    assert padded.code == 0, padded.ran.stdout + padded.ran.stderr


def test_cancel_is_the_jobs_cancel_method(provider: Imitation, tmp_path: Path, home: Path) -> None:
    path = f"/v1/projects/{PROJECT}/locations/{LOCATION}/batchPredictionJobs/{JOB}:cancel"
    provider.action("POST", path, ok({}))
    provider.script(JOB, batch("JOB_STATE_RUNNING"))
    contract = tuned(tmp_path / "c", "vertex-ai-batch-prediction", limits={"max_requests": 1})
    watched = vx_watch(contract, provider, home)
    assert watched.outcome["reason"] == "request_budget_exhausted", watched.outcome
    decided = choose_cancel(watched, home=home, env=ENV)
    assert decided.code == 0, decided.stdout + decided.stderr
    (cancel,) = provider.actions("POST")
    assert (cancel.path, cancel.headers["authorization"]) == (path, f"Bearer {TOKEN}")
