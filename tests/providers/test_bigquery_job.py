"""bigquery-job against an imitation of BigQuery's jobs.get, through the real CLI.

Bodies: the Job resource (cloud.google.com/bigquery/docs/reference/rest/v2/Job: kind, id, jobReference,
configuration, status {state, errorResult, errors}) as python-bigquery reads it (google/cloud/bigquery/job/base.py
@ 24d45d0d: state PENDING/RUNNING/DONE, cancelled() is errorResult.reason "stopped"); the error reasons and
"Exceeded rate limits" (403 rateLimitExceeded) from cloud.google.com/bigquery/docs/error-messages. Every
documented value is in tests/providers/fidelity/bigquery-job.toml; here a job goes through its lifecycle.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .imitation import Answer, Imitation, JSONValue, ok
from .imitation_jobs import bigquery, bigquery_rate_limited
from .support import assert_no_secret, choose_cancel, tuned, watch
from .test_google_operation import ENV as ENV  # one Google access token, as for every Google API
from .test_google_operation import TOKEN as TOKEN

PROJECT, LOCATION = "my-project", "europe-west4"
JOB = "job_bQ2x9YtVd1nW"
REFERENCE: dict[str, JSONValue] = {"projectId": PROJECT, "jobId": JOB, "location": LOCATION}
TABLE: dict[str, JSONValue] = {"projectId": PROJECT, "datasetId": "_f2a5c1e4", "tableId": "anon3f1b"}


def job(state: str, **status: JSONValue) -> Answer:
    body: dict[str, JSONValue] = {
        "kind": "bigquery#job", "etag": "k5T0e1+1yA==", "id": f"{PROJECT}:{LOCATION}.{JOB}",
        "selfLink": f"https://bigquery.googleapis.com/bigquery/v2/projects/{PROJECT}/jobs/{JOB}?location={LOCATION}",
        "user_email": "etl@my-project.iam.gserviceaccount.com", "jobReference": REFERENCE,
        "configuration": {"jobType": "QUERY", "query": {"query": "SELECT COUNT(*) FROM sales.orders",
                                                         "destinationTable": TABLE, "useLegacySql": False}},
        "statistics": {"creationTime": "1718000000000", "startTime": "1718000000123"},
        "status": {"state": state, **status},
    }  # fmt: skip
    return ok(body)


INVALID: dict[str, JSONValue] = {
    "reason": "invalidQuery",
    "location": "query",
    "message": "Unrecognized name: order_total at [1:8]",
}
STOPPED: dict[str, JSONValue] = {
    "reason": "stopped",
    "message": "Job execution was cancelled: User requested cancellation",
}


@pytest.fixture
def provider() -> Iterator[Imitation]:
    with Imitation(bigquery(TOKEN, project=PROJECT, location=LOCATION)) as imitation:
        yield imitation


@pytest.fixture
def contract(tmp_path: Path) -> Path:
    return tuned(tmp_path / "contracts", "bigquery-job")


def bq_watch(contract: Path, provider: Imitation, home: Path, **kw: Any) -> Any:
    where = {"project": PROJECT, "location": LOCATION, **kw.pop("vars", {})}
    return watch(contract, base_url=provider.url, home=home, env=ENV, job=kw.pop("job", JOB), vars=where, **kw)


def test_a_query_job_to_done_with_its_destination_table(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(JOB, job("PENDING"), job("RUNNING"), job("DONE"))
    watched = bq_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["result"] == {
        "job": REFERENCE, "destination_table": TABLE, "destination_uris": None, "errors": None,
    }  # fmt: skip
    seen = provider.seen(JOB)
    assert len(seen) == 3 and all(s.credential_ok for s in seen)
    for s in seen:
        assert s.path == f"/bigquery/v2/projects/{PROJECT}/jobs/{JOB}"
        assert urllib.parse.parse_qs(s.query) == {"location": [LOCATION]}  # a regional job is found only so
        assert s.headers["authorization"] == f"Bearer {TOKEN}"
    assert_no_secret(TOKEN, watched.ran.stdout, watched.ran.stderr)


@pytest.mark.parametrize(
    ("answer", "code", "reason"),
    [
        pytest.param(job("DONE", errorResult=INVALID, errors=[INVALID]), 3, "job_failed", id="error-result"),
        pytest.param(job("DONE", errorResult=STOPPED, errors=[STOPPED]), 3, "job_cancelled", id="stopped"),
        pytest.param(job("DONE", errors=[INVALID]), 0, None, id="errors-without-an-error-result"),
        pytest.param(job("QUEUED"), 4, "unknown_state", id="undocumented"),
    ],
)
def test_how_a_done_job_ended(
    provider: Imitation, contract: Path, home: Path, answer: Answer, code: int, reason: str | None
) -> None:
    provider.script(JOB, job("RUNNING"), answer)
    watched = bq_watch(contract, provider, home)
    assert (watched.code, watched.outcome["reason"]) == (code, reason), watched.ran.stdout + watched.ran.stderr
    if reason == "job_failed":
        assert watched.outcome["provider_error"]["error_result"] == INVALID
    if code == 0:
        assert watched.outcome["result"]["errors"] == [INVALID]  # what the job survived is kept with its result


def test_exceeded_rate_limits_is_a_wait_not_a_refusal(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(JOB, bigquery_rate_limited(), bigquery_rate_limited(), job("DONE"))
    watched = bq_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert [s.status for s in provider.seen(JOB)] == [403, 403, 200]


def test_the_wrong_location_does_not_find_the_job(provider: Imitation, tmp_path: Path, home: Path) -> None:
    contract = tuned(tmp_path / "c", "bigquery-job", not_found={"grace": "0s"})
    provider.script(JOB, job("DONE"))
    watched = bq_watch(contract, provider, home, vars={"location": "US"})
    assert watched.code == 4, watched.ran.stdout + watched.ran.stderr
    assert [s.status for s in provider.seen()] == [404]


def test_project_and_location_are_required(provider: Imitation, contract: Path, home: Path) -> None:
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=JOB, vars={"project": PROJECT})
    assert watched.code == 2 and "var location is required" in watched.ran.stderr, watched.ran.stderr
    assert provider.seen() == []


def test_cancel_is_jobs_cancel_in_the_jobs_location(provider: Imitation, tmp_path: Path, home: Path) -> None:
    path = f"/bigquery/v2/projects/{PROJECT}/jobs/{JOB}/cancel"
    provider.action("POST", path, ok({"kind": "bigquery#jobCancelResponse", "job": {"jobReference": REFERENCE}}))
    provider.script(JOB, job("RUNNING"))
    contract = tuned(tmp_path / "c", "bigquery-job", limits={"max_requests": 1})
    watched = bq_watch(contract, provider, home)
    assert watched.outcome["reason"] == "request_budget_exhausted", watched.outcome
    decided = choose_cancel(watched, home=home, env=ENV)
    assert decided.code == 0, decided.stdout + decided.stderr
    (cancel,) = provider.actions("POST")
    assert (cancel.path, urllib.parse.parse_qs(cancel.query)) == (path, {"location": [LOCATION]})
    assert cancel.headers["authorization"] == f"Bearer {TOKEN}"
