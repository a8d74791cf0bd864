"""databricks-run against an imitation of the Databricks Jobs API 2.1 runs/get, through the real CLI.

Bodies: the runs/get answer (docs.databricks.com/api/workspace/jobs/getrun: job_id, run_id, run_page_url,
state {life_cycle_state, result_state, state_message, user_cancelled_or_timedout}, status {state,
termination_details}) with the values of databricks-sdk-py databricks/sdk/service/jobs.py @ 9ae22415 (v0.133.0):
RunLifeCycleState, RunResultState, TerminationCodeCode. Errors `{"error_code", "message"}`: an unknown run is a
400 INVALID_PARAMETER_VALUE (errors/overrides.py), a 429 REQUEST_LIMIT_EXCEEDED carries Retry-After
(errors/customizer.py). Every documented value is in tests/providers/fidelity/databricks-run.toml.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli

from .imitation import Answer, Imitation, JSONValue, ok
from .imitation_jobs import databricks, databricks_error
from .support import assert_no_secret, tuned, watch

TOKEN = "dapi0123456789abcdef0123456789abcdef"
ENV = {"DATABRICKS_TOKEN": TOKEN}
RUN = "455644833"
PAGE = f"https://my-workspace.cloud.databricks.com/#job/11223344/run/{RUN}"


def run(life: str, result: str | None = None, message: str = "", **extra: JSONValue) -> Answer:
    state: dict[str, JSONValue] = {
        "life_cycle_state": life,
        "state_message": message,
        "user_cancelled_or_timedout": False,
    }
    if result is not None:
        state["result_state"] = result
    body: dict[str, JSONValue] = {
        "job_id": 11223344, "run_id": int(RUN), "number_in_job": int(RUN), "creator_user_name": "etl@example.com",
        "run_page_url": PAGE, "run_type": "JOB_RUN", "run_name": "nightly-etl", "start_time": 1625060460483,
        "setup_duration": 0, "execution_duration": 0, "cleanup_duration": 0, "attempt_number": 0,
        "tasks": [{"run_id": 2112892, "task_key": "ingest", "state": state}], "state": state, **extra,
    }  # fmt: skip
    return ok(body)


@pytest.fixture
def provider() -> Iterator[Imitation]:
    with Imitation(databricks(TOKEN)) as imitation:
        yield imitation


@pytest.fixture
def contract(tmp_path: Path) -> Path:
    return tuned(tmp_path / "contracts", "databricks-run")


def db_watch(contract: Path, provider: Imitation, home: Path, **kw: Any) -> Any:
    return watch(contract, base_url=provider.url, home=home, env=ENV, job=kw.pop("job", RUN), **kw)


def test_a_run_from_its_queue_to_success(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(
        RUN,
        run("QUEUED", message="Queued due to reaching maximum concurrent runs"),
        run("PENDING", message="Waiting for cluster"),
        run("RUNNING"),
        run("TERMINATING", "SUCCESS"),
        run("TERMINATED", "SUCCESS", end_time=1625060863413),
    )
    watched = db_watch(contract, provider, home, job="0455644833")  # an integer id: the same run
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["result"] == {
        "run_id": int(RUN), "job_id": 11223344, "run_page_url": PAGE, "result_state": "SUCCESS",
    }  # fmt: skip
    seen = provider.seen(RUN)
    assert len(seen) == 5 and all(s.credential_ok for s in seen)
    assert all((s.method, s.path, s.query) == ("GET", "/api/2.1/jobs/runs/get", f"run_id={RUN}") for s in seen)
    assert all(s.headers["authorization"] == f"Bearer {TOKEN}" for s in seen)
    assert_no_secret(TOKEN, watched.ran.stdout, watched.ran.stderr)


@pytest.mark.parametrize(
    ("answer", "code", "reason"),
    [
        pytest.param(
            run("TERMINATED", "FAILED", "Task ingest failed with message: boom"), 3, "job_failed", id="failed"
        ),
        pytest.param(run("TERMINATED", "TIMEDOUT", "Run timed out"), 3, "job_failed", id="timed-out"),
        pytest.param(run("TERMINATED", "CANCELED", "Run cancelled by user"), 3, "job_cancelled", id="canceled"),
        pytest.param(
            run("SKIPPED", None, "Skipping this run: 1 maximum concurrent run"), 3, "job_cancelled", id="skipped"
        ),
        pytest.param(
            run("TERMINATED", "MAXIMUM_CONCURRENT_RUNS_REACHED"), 3, "job_cancelled", id="max-concurrent-runs"
        ),
        pytest.param(run("INTERNAL_ERROR", "FAILED", "Notebook not found"), 3, "job_failed", id="internal-error"),
        pytest.param(run("TERMINATED", "SUCCESS_WITH_FAILURES"), 0, None, id="success-with-failures"),
        pytest.param(run("TERMINATED"), 4, "unknown_state", id="terminated-without-a-result-state"),
        pytest.param(run("WAITING_FOR_RETRY"), 0, None, id="waiting-for-retry-then-success"),
    ],
)
def test_how_a_run_ended(
    provider: Imitation, contract: Path, home: Path, answer: Answer, code: int, reason: str | None
) -> None:
    provider.script(RUN, run("BLOCKED"), answer, run("TERMINATED", "SUCCESS"))
    watched = db_watch(contract, provider, home)
    assert (watched.code, watched.outcome["reason"]) == (code, reason), watched.ran.stdout + watched.ran.stderr
    if reason in ("job_failed", "job_cancelled"):
        assert '"run_page_url"' in json.dumps(watched.outcome["provider_error"])  # where a person reads what happened


def test_request_limit_exceeded_waits_its_retry_after(provider: Imitation, contract: Path, home: Path) -> None:
    limited = databricks_error(429, "REQUEST_LIMIT_EXCEEDED", "Too many requests", Retry_After="1")
    provider.script(RUN, limited, run("TERMINATED", "SUCCESS"))
    watched = db_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    first, second = provider.seen(RUN)
    assert (first.status, second.status) == (429, 200)
    assert second.at - first.at >= 0.9  # Retry-After: 1 is a floor under the next poll


def test_an_unknown_run_is_a_400_that_stops_at_once(provider: Imitation, contract: Path, home: Path) -> None:
    watched = db_watch(contract, provider, home, job="999")
    assert watched.code == 4, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["reason"] == "integration_failure" and watched.outcome["http_status"] == 400
    assert [s.status for s in provider.seen("999")] == [400]  # once: a 400 is not retried


def test_a_bad_token_and_a_missing_workspace(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(RUN, run("RUNNING"))
    refused = watch(contract, base_url=provider.url, home=home, env={"DATABRICKS_TOKEN": "dapi-wrong"}, job=RUN)
    assert (refused.code, refused.outcome["reason"]) == (4, "authorization_denied"), refused.outcome
    ran = run_cli("watch", "--contract", str(contract), "--job", RUN, home=home, env=ENV)
    assert ran.code == 2 and "var base_url is required" in ran.stderr, ran.stderr
    ran = run_cli(
        "watch", "--contract", "databricks-run", "--var", f"base_url={provider.url}", "--job", "1a", home=home
    )
    assert ran.code == 2 and "Traceback" not in ran.stderr, ran.stderr
    assert len(provider.seen(RUN)) == 1
