"""`pollwarden watch` end to end: the real CLI in a subprocess against a real provider on loopback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, write_contract

# scenario -> (exit code, reason or None, extra contract text, extra watch flags)
CASES: dict[str, tuple[int, str | None, str, tuple[str, ...]]] = {
    "happy": (0, None, "", ()),
    "retry_after": (0, None, "", ()),
    "rate_limited_retry_after": (0, None, "", ()),
    "flaky": (0, None, "", ()),
    "hint": (0, None, "", ()),
    "bad_hint": (0, None, "", ()),
    "not_found_then_ok": (0, None, '[not_found]\ngrace = "30s"\n', ()),
    "failed": (3, "job_failed", "", ()),
    "cancelled": (3, "job_cancelled", "", ()),
    "expired": (3, "job_expired", "", ()),
    "unknown_state": (4, "unknown_state", "", ()),
    "no_result": (4, "result_invalid", "", ()),
    "expired_running": (4, "contradictory_status", "", ()),
    "unauthorized": (4, "authorization_denied", "", ()),
    "forbidden": (4, "authorization_denied", "", ()),
    "rate_limited": (4, "rate_limited", "", ()),
    "down": (4, "provider_failure", "", ()),
    "reset": (4, "ambiguous_delivery", "", ()),
    "garbage": (4, "invalid_response", "", ()),
    "not_utf8": (4, "invalid_response", "", ()),
    "huge": (4, "invalid_response", "", ()),
    "redirect": (4, "integration_failure", "", ()),
    "teapot": (4, "integration_failure", "", ()),
    "not_found_then_ok-nograce": (4, "integration_failure", "", ()),
    "never": (4, "request_budget_exhausted", "", ("--max-requests", "4")),
    "slow": (4, "deadline_exceeded", "", ("--deadline", "1s")),
}


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_scenario_outcome(scenario: str, sim: Simulator, home: Path, tmp_path: Path) -> None:
    code, reason, extra, flags = CASES[scenario]
    contract = write_contract(tmp_path / "c.toml", sim.url, extra=extra)
    job = f"{scenario}-1"
    ran = run_cli("watch", "--contract", str(contract), "--job", job, "--operation", "op1", "--json", *flags, home=home)
    assert ran.code == code, ran.stderr + ran.stdout
    assert "Traceback" not in ran.stderr
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["reason"] == reason
    assert result["outcome"] == ("succeeded" if code == 0 else "stopped")
    # R13/R16: the provider never saw more requests than were reserved and counted.
    assert sim.request_count(job) == result["status_requests_used"]
    assert result["status_requests_used"] <= result["max_status_requests"]
    if code == 0:
        assert result["result"] == f"/results/{job}"


def test_json_line_has_the_documented_keys(sim: Simulator, home: Path, tmp_path: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    ran = run_cli("watch", "--contract", str(contract), "--job", "failed-2", "--json", home=home)
    assert ran.code == 3
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    for key in (
        "operation",
        "job",
        "outcome",
        "reason",
        "last_state",
        "http_status",
        "status_requests_used",
        "max_status_requests",
        "transport_failures_used",
        "max_transport_failures",
        "deadline_at",
        "result",
        "provider_error",
    ):
        assert key in result, key
    assert result["last_state"] == "failed"
    assert result["http_status"] == 200
    assert result["provider_error"] == {"code": "E_QUOTA", "message": "export quota exceeded"}  # a value, not a string


def test_retry_after_is_a_floor_on_the_wire(sim: Simulator, home: Path, tmp_path: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    ran = run_cli("watch", "--contract", str(contract), "--job", "retry_after-1", home=home)
    assert ran.code == 0, ran.stderr
    seen = sim.requests("retry_after-1")
    statuses = [r.status for r in seen]
    assert statuses[:2] == [200, 503]
    assert seen[2].at - seen[1].at >= 1.0, "the request after 'Retry-After: 1' came too early"


def test_http_date_retry_after_is_honoured(sim: Simulator, home: Path, tmp_path: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    ran = run_cli("watch", "--contract", str(contract), "--job", "retry_after_date-1", home=home)
    assert ran.code == 0, ran.stderr
    first, second = sim.requests("retry_after_date-1")[:2]
    # The date has whole-second precision and is at least 2 s ahead of the first answer.
    assert second.at - first.at >= 1.0


def test_timeout_is_ambiguous_delivery(sim: Simulator, home: Path, tmp_path: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url, timeout="300ms", max_transport_failures=1)
    ran = run_cli("watch", "--contract", str(contract), "--job", "timeout-1", "--json", home=home)
    assert ran.code == 4, ran.stderr
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["reason"] == "ambiguous_delivery"
    assert result["transport_failures_used"] == 1


def test_refused_connection_is_provider_failure(home: Path, tmp_path: Path) -> None:
    with Simulator() as gone:
        url = gone.url  # a port that was just ours and is now closed
    contract = write_contract(tmp_path / "c.toml", url, max_transport_failures=2)
    ran = run_cli("watch", "--contract", str(contract), "--job", "x", "--json", home=home)
    assert ran.code == 4, ran.stderr
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["reason"] == "provider_failure"
    assert result["transport_failures_used"] == 2
    assert result["status_requests_used"] == 2


def test_story_tells_retry_after_and_rejected_hints(sim: Simulator, home: Path, tmp_path: Path) -> None:
    sim.add_job(
        "exp_71c",
        [
            Step(body={"state": "queued"}),
            Step(status=503, headers={"Retry-After": "1"}),
            Step(body={"state": "running", "poll_after_seconds": -5}),
            Step(body={"state": "succeeded", "result_url": "https://x.example/r.csv"}),
        ],
    )
    contract = write_contract(tmp_path / "c.toml", sim.url)
    ran = run_cli("watch", "--contract", str(contract), "--job", "exp_71c", "--operation", "op", home=home)
    assert ran.code == 0, ran.stderr
    story = run_cli("story", "op", home=home)
    assert story.code == 0
    lines = story.stdout.splitlines()
    assert "watching job exp_71c" in lines[0]
    assert lines[1].endswith("(backoff)") and "polled, state queued" in lines[1]
    assert "received 503, Retry-After 1, next check" in lines[2] and lines[2].endswith("(provider's Retry-After)")
    assert any("rejected poll_after_seconds '-5': negative" in line for line in lines)
    assert lines[-1].endswith("polled, state succeeded, result validated, succeeded")
    as_json = json.loads(run_cli("story", "op", "--json", home=home).stdout)
    sources = [e["data"]["delay_source"] for e in as_json if e["kind"] == "decision" and e["data"]["delay_source"]]
    assert sources[:2] == ["local_backoff", "provider_retry_after"]


def test_status_lists_and_shows(sim: Simulator, home: Path, tmp_path: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    assert run_cli("watch", "--contract", str(contract), "--job", "happy-9", "--operation", "a", home=home).code == 0
    table = run_cli("status", home=home)
    assert table.code == 0 and "a" in table.stdout and "succeeded" in table.stdout
    one = json.loads(run_cli("status", "a", "--json", home=home).stdout)
    assert one["phase"] == "succeeded" and one["job"] == "happy-9"
    missing = run_cli("status", "nope", home=home)
    assert missing.code == 2 and "no operation 'nope'" in missing.stderr


def test_no_redirect_is_followed(sim: Simulator, home: Path, tmp_path: Path) -> None:
    target = Simulator()
    with target:
        sim.add_job("r", [Step(status=307, headers={"Location": f"{target.url}/jobs/happy-x"})])
        contract = write_contract(tmp_path / "c.toml", sim.url)
        ran = run_cli("watch", "--contract", str(contract), "--job", "r", "--json", home=home)
        assert ran.code == 4
        assert target.requests() == []
