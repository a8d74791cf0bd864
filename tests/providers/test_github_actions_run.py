"""github-actions-run against an imitation of the GitHub REST API's workflow runs, through the real CLI.

Bodies: a real "Get a workflow run" body (docs.github.com/en/rest/actions/workflow-runs#get-a-workflow-run;
this copy from the mock in github.com/benjaminParisel/dashboard-github-actions `mock/run.ts`, trimmed) with
`status`/`conclusion` set to each documented value (the docs' enum lists: status queued, in_progress,
completed, waiting, requested, pending; conclusion success, failure, neutral, cancelled, skipped, timed_out,
action_required, stale, startup_failure). Rate limits: "Troubleshooting the REST API" and "Rate limits for
the REST API" (docs.github.com/rest/overview/troubleshooting): 403/429 with x-ratelimit-remaining 0 waits
until x-ratelimit-reset, in epoch seconds (docs/plans/part8-providers.md section 4).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from pollwarden.catalogue import shipped_contract
from pollwarden.core.contract.result import result_url_problem

from .imitation import Answer, Imitation, JSONValue, delivery, github, github_error, github_rate_limited, ok
from .support import assert_no_secret, fetch_result, tuned, watch

TOKEN = "ghp_imitation0123456789"
ENV = {"GITHUB_TOKEN": TOKEN}
REPO = "benjaminParisel/jo-summer"
RUN = "7655489328"


def run(status: str, conclusion: str | None, *, html: str = f"https://github.com/{REPO}/actions/runs/{RUN}") -> Answer:
    body: dict[str, JSONValue] = {
        "id": int(RUN), "name": "pages build and deployment with artifacts-next",
        "node_id": "WFR_kwLOK5vOUs8AAAAByE1_MA", "head_branch": "2020",
        "head_sha": "7cca04ca1bc835062e3a6401e28b0fe6d1710f76", "path": "dynamic/pages/pages-build-deployment",
        "display_title": "pages build and deployment with artifacts-next", "run_number": 3, "event": "dynamic",
        "status": status, "conclusion": conclusion, "workflow_id": 83269576,
        "url": f"https://api.github.com/repos/{REPO}/actions/runs/{RUN}", "html_url": html,
        "jobs_url": f"https://api.github.com/repos/{REPO}/actions/runs/{RUN}/jobs",
        "pull_requests": [], "created_at": "2024-01-25T13:51:40Z", "updated_at": "2024-01-25T13:52:31Z",
        "run_attempt": 1, "run_started_at": "2024-01-25T13:51:40Z",
    }  # fmt: skip
    return ok(body)


@pytest.fixture
def provider() -> Any:
    with Imitation(github(TOKEN, repo=REPO)) as imitation:
        yield imitation


@pytest.fixture
def contract(tmp_path: Path) -> Path:
    return tuned(tmp_path / "contracts", "github-actions-run")


def gh_watch(contract: Path, provider: Imitation, home: Path, **kw: Any) -> Any:
    return watch(
        contract,
        base_url=provider.url,
        home=home,
        env=kw.pop("env", ENV),
        job=kw.pop("job", RUN),
        vars={"repo": REPO},
        **kw,
    )


def test_a_run_to_success_and_its_page_fetched_without_the_token(
    provider: Imitation, contract: Path, home: Path, tmp_path: Path
) -> None:
    """The page on base_url's own host (as GitHub Enterprise Server serves it; github.com is the other host the
    contract names), fetched without the token: [result].credential = false."""
    page = f"{provider.url}/{REPO}/actions/runs/{RUN}"
    provider.file(f"/{REPO}/actions/runs/{RUN}", b"<html>run</html>", content_type="text/html", credential=False)
    provider.script(RUN, run("queued", None), run("in_progress", None), run("completed", "success", html=page))
    watched = gh_watch(contract, provider, home, operation="g1")
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["result"] == page
    for seen in provider.seen(RUN):
        assert (seen.method, seen.path) == ("GET", f"/repos/{REPO}/actions/runs/{RUN}")
        assert seen.headers["authorization"] == f"Bearer {TOKEN}"
        assert seen.headers["x-github-api-version"] == "2022-11-28"
        assert seen.headers["accept"] == "application/vnd.github+json"
    out = tmp_path / "run.html"
    fetched = fetch_result("g1", out, home=home, env=ENV)
    assert fetched.code == 0, fetched.stderr
    assert out.read_bytes() == b"<html>run</html>"
    (download,) = provider.downloads(f"/{REPO}/actions/runs/{RUN}")
    assert "authorization" not in download.headers  # credential = false: never the token, even on its origin
    assert_no_secret(TOKEN, watched.ran.stdout, watched.ran.stderr, fetched.stdout, fetched.stderr)
    shipped = shipped_contract("github-actions-run", {"repo": REPO})
    assert result_url_problem(shipped.result, shipped.origin, HTML) is None  # github.com itself is named


HTML = f"https://github.com/{REPO}/actions/runs/{RUN}"


def test_a_page_on_a_host_the_contract_does_not_name_is_never_fetched(
    provider: Imitation, contract: Path, home: Path, tmp_path: Path
) -> None:
    """Issue 23: an html_url on another host (a stand-in for an internal address) was downloaded."""
    with Imitation(delivery()) as elsewhere:
        page = f"{elsewhere.url}/{REPO}/actions/runs/{RUN}"
        elsewhere.file(f"/{REPO}/actions/runs/{RUN}", b"<html>internal</html>", credential=False)
        provider.script(RUN, run("completed", "success", html=page))
        assert gh_watch(contract, provider, home, operation="g1").code == 0
        out = tmp_path / "run.html"
        fetched = fetch_result("g1", out, home=home, env=ENV)
        assert fetched.code == 2, fetched.stdout + fetched.stderr
        assert "[result].hosts names (github.com); nothing was sent" in fetched.stderr
        assert elsewhere.seen() == [] and not out.exists()


@pytest.mark.parametrize(
    ("status", "conclusion", "code", "reason"),
    [
        ("completed", "neutral", 0, None),
        ("completed", "failure", 3, "job_failed"),
        ("completed", "timed_out", 3, "job_failed"),
        ("completed", "startup_failure", 3, "job_failed"),
        ("completed", "cancelled", 3, "job_cancelled"),
        ("completed", "skipped", 3, "job_cancelled"),
        ("completed", "stale", 3, "job_expired"),
        ("completed", "action_required", 4, "job_needs_action"),
        ("completed", None, 4, "unknown_state"),
        ("completed", "surprise", 4, "unknown_state"),
        ("paused", None, 4, "unknown_state"),
    ],
)
def test_status_and_conclusion_together(
    provider: Imitation, contract: Path, home: Path, status: str, conclusion: str | None, code: int, reason: str | None
) -> None:
    provider.script(RUN, run("waiting", None), run("requested", None), run("pending", None), run(status, conclusion))
    watched = gh_watch(contract, provider, home)
    assert watched.code == code, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["reason"] == reason
    assert watched.outcome["status_requests_used"] == provider.status_requests(RUN) == 4


def test_primary_rate_limit_403_waits_until_the_reset(provider: Imitation, contract: Path, home: Path) -> None:
    reset = int(time.time()) + 2
    provider.script(RUN, github_rate_limited(reset, status=403), run("completed", "success"))
    watched = gh_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr  # a rate limit, not a denial
    first, second = provider.seen(RUN)
    assert first.status == 403
    assert second.at >= reset, "polled again before x-ratelimit-reset"


def test_secondary_rate_limit_and_a_real_403(provider: Imitation, contract: Path, home: Path) -> None:
    secondary = github_error(
        403, "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
    )
    provider.script(RUN, Answer(403, secondary.body, {"retry-after": "1"}), run("completed", "success"))
    watched = gh_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr

    provider.script("1", github_error(403, "Resource not accessible by integration"))
    denied = gh_watch(contract, provider, home, job="1", operation="op2")
    assert (denied.code, denied.outcome["reason"]) == (4, "authorization_denied")


def test_a_403_with_retry_after_is_a_rate_limit_whatever_its_message(
    provider: Imitation, contract: Path, home: Path
) -> None:
    # "If the retry-after response header is present, you should not retry your request until after that many
    # seconds has elapsed" (Troubleshooting the REST API): GitHub's older secondary-limit message names an
    # "abuse detection mechanism", not a "secondary rate limit", and is still a wait, not a denial.
    abuse = github_error(
        403, "You have triggered an abuse detection mechanism. Please wait a few minutes before you try again."
    )
    provider.script(RUN, Answer(403, abuse.body, {"retry-after": "1"}), run("completed", "success"))
    watched = gh_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    first, second = provider.seen(RUN)
    assert second.at - first.at >= 1, "polled again before Retry-After"


def test_repo_var_is_required_and_checked(provider: Imitation, contract: Path, home: Path) -> None:
    missing = watch(contract, base_url=provider.url, home=home, env=ENV, job=RUN)
    assert missing.code == 2 and "repo" in missing.ran.stderr
    for bad in ("../etc", "owner/..", "owner//name", "own?er/x"):
        refused = watch(contract, base_url=provider.url, home=home, env=ENV, job=RUN, vars={"repo": bad})
        assert refused.code == 2, bad
    assert provider.seen() == []


def test_bad_credentials(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(RUN, run("completed", "success"))
    watched = gh_watch(contract, provider, home, env={"GITHUB_TOKEN": "ghp_wrong"})
    assert (watched.code, watched.outcome["reason"]) == (4, "authorization_denied")


def test_a_respelt_run_id_is_the_same_run_never_a_second_budget(
    provider: Imitation, contract: Path, home: Path
) -> None:
    """Issue 23: `042`, `+42` and `42.0` are run 42 to GitHub; they were three operations, three budgets."""
    provider.script(RUN, run("completed", "success"))
    first = gh_watch(contract, provider, home, operation="g1", job=f"0{RUN}")
    assert first.code == 0, first.ran.stdout + first.ran.stderr
    assert [seen.path for seen in provider.seen()] == [f"/repos/{REPO}/actions/runs/{RUN}"]  # the canonical id sent
    for respelt in (f"+{RUN}", f"{RUN}.0", f"00{RUN}.00"):
        again = gh_watch(contract, provider, home, operation="g2", job=respelt)
        assert again.code == 2 and "already watched by operation g1" in again.ran.stderr, again.ran.stderr
    resumed = gh_watch(contract, provider, home, operation="g1", job=f"+{RUN}.0")  # its own operation: resumed
    assert resumed.code == 0 and resumed.outcome["operation"] == "g1", resumed.ran.stdout + resumed.ran.stderr
    for bad in (f"{RUN}.5", f"-{RUN}", "run-1"):
        refused = gh_watch(contract, provider, home, operation="g3", job=bad)
        assert refused.code == 2 and "--job must be a whole number" in refused.ran.stderr, refused.ran.stderr
    assert len(provider.seen()) == 1


SECONDARY = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."


@pytest.mark.parametrize(
    ("status", "message"),
    [(403, SECONDARY), (429, SECONDARY), (429, "Too many requests")],
    ids=["secondary-403", "secondary-429", "any-429"],
)
def test_a_secondary_rate_limit_without_retry_after_waits_a_minute_whatever_the_schedule(
    provider: Imitation, tmp_path: Path, home: Path, status: int, message: str
) -> None:
    """Issue 24: GitHub asks for at least a minute and warns that integrations that keep retrying may be banned;
    the contract retried after about 41 s, and a `use` file's shorter max_delay shortened it further. The minute
    belongs to the signal (`min_wait`): with 100 ms delays and a 5 s deadline no second request fits, so the watch
    stops rate_limited at once, one request sent, rather than ask again before the minute."""
    contract = tuned(
        tmp_path / "fast", "github-actions-run", vars={"repo": REPO}, limits={"deadline": "5s"},
        schedule={"base_delay": "50ms", "max_delay": "100ms"},
    )  # fmt: skip
    provider.script(RUN, github_error(status, message), run("completed", "success"))
    watched = gh_watch(contract, provider, home)
    assert (watched.code, watched.outcome["reason"]) == (4, "rate_limited"), watched.ran.stdout + watched.ran.stderr
    assert "leaves no request before" in watched.outcome["detail"]
    assert provider.status_requests(RUN) == 1
