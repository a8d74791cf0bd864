"""gitlab-pipeline against an imitation of GitLab's pipelines API, through the real CLI.

Bodies: "Get a single pipeline" (docs.gitlab.com/api/pipelines/#get-a-single-pipeline), its example trimmed to
the fields the contract reads, with `status` set to each value of GitLab's pipeline status enum
(gitlabhq/gitlabhq app/graphql/types/ci/pipeline_status_enum.rb: created, waiting_for_resource, preparing,
waiting_for_callback, pending, running, failed, success, canceling, canceled, skipped, manual, scheduled; see
tests/providers/fidelity/gitlab-pipeline.toml). Errors: `{"message": "401 Unauthorized"}` and
`{"message": "404 Not found"}`, as GitLab's API helpers render them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .imitation import Answer, Imitation, JSONValue, gitlab, gitlab_error, ok
from .support import assert_no_secret, tuned, watch

TOKEN = "glpat-imitation-8c1d0e"
ENV = {"GITLAB_TOKEN": TOKEN}
PROJECT = "278964"
PIPELINE = "987654"
WEB = f"https://gitlab.com/gitlab-org/gitlab/-/pipelines/{PIPELINE}"


def pipeline(status: str) -> Answer:
    body: dict[str, JSONValue] = {
        "id": int(PIPELINE), "iid": 12, "project_id": int(PROJECT), "status": status, "source": "push",
        "ref": "main", "sha": "a91957a858320c0e17f3a0eca7cfacbff50ea29a", "web_url": WEB,
        "created_at": "2016-08-11T11:28:34.085Z", "updated_at": "2016-08-11T11:32:35.169Z",
        "started_at": None, "finished_at": None, "duration": None, "queued_duration": 0.01, "coverage": None,
    }  # fmt: skip
    return ok(body)


@pytest.fixture
def provider() -> Any:
    with Imitation(gitlab(TOKEN, project=PROJECT)) as imitation:
        yield imitation


@pytest.fixture
def contract(tmp_path: Path) -> Path:
    return tuned(tmp_path / "contracts", "gitlab-pipeline", vars={"project": PROJECT})


def test_a_pipeline_through_every_waiting_status_to_success(provider: Imitation, contract: Path, home: Path) -> None:
    """Issue 24: waiting_for_callback, a current status, stopped the watch as unknown_state."""
    waiting = ("created", "waiting_for_resource", "preparing", "waiting_for_callback", "pending", "scheduled")
    provider.script(PIPELINE, *(pipeline(s) for s in waiting), pipeline("running"), pipeline("success"))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=PIPELINE)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert (watched.outcome["result"], watched.outcome["last_state"]) == (WEB, "success")
    assert watched.outcome["status_requests_used"] == provider.status_requests(PIPELINE) == len(waiting) + 2
    for seen in provider.seen(PIPELINE):
        assert (seen.method, seen.path) == ("GET", f"/api/v4/projects/{PROJECT}/pipelines/{PIPELINE}")
        assert seen.headers["private-token"] == TOKEN and "authorization" not in seen.headers
    assert_no_secret(TOKEN, watched.ran.stdout, watched.ran.stderr)


@pytest.mark.parametrize(
    ("answers", "code", "reason"),
    [
        pytest.param([pipeline("running"), pipeline("failed")], 3, "job_failed", id="failed"),
        pytest.param([pipeline("canceling"), pipeline("canceled")], 3, "job_cancelled", id="canceled"),
        pytest.param([pipeline("skipped")], 3, "job_cancelled", id="skipped"),
        pytest.param([pipeline("pending"), pipeline("manual")], 4, "job_needs_action", id="manual"),
        pytest.param([pipeline("blocked")], 4, "unknown_state", id="undocumented"),
        pytest.param([gitlab_error(403, "403 Forbidden")], 4, "authorization_denied", id="forbidden"),
    ],
)
def test_documented_endings(
    provider: Imitation, contract: Path, home: Path, answers: list[Answer], code: int, reason: str
) -> None:
    provider.script(PIPELINE, *answers)
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=PIPELINE)
    assert (watched.code, watched.outcome["reason"]) == (code, reason), watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["status_requests_used"] == provider.status_requests(PIPELINE) == len(answers)


def test_a_429_waits_retry_after(provider: Imitation, contract: Path, home: Path) -> None:
    """GitLab.com answers 429 with Retry-After (docs.gitlab.com/security/rate_limits)."""
    throttled = Answer(429, {"message": "Retry later"}, {"Retry-After": "1", "RateLimit-Remaining": "0"})
    provider.script(PIPELINE, throttled, pipeline("success"))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=PIPELINE)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    first, second = provider.seen(PIPELINE)
    assert second.at - first.at >= 1.0, "the poll after Retry-After: 1 came too early"


def test_a_wrong_token_is_an_authorization_stop(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(PIPELINE, pipeline("running"))
    watched = watch(contract, base_url=provider.url, home=home, env={"GITLAB_TOKEN": "glpat-wrong"}, job=PIPELINE)
    assert (watched.code, watched.outcome["reason"]) == (4, "authorization_denied")
    assert_no_secret("glpat-wrong", watched.ran.stdout, watched.ran.stderr)
