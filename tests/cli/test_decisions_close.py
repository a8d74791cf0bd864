"""`pollwarden decisions close` (issue 28): the decisions about jobs the provider ended, closed in bulk by a person,
one audited decision each, with no prompt; everything else stays open, and a wrong flag changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, write_contract

CRASH = "health check failed: 3/5 pods CrashLoopBackOff"


def _watch(sim: Simulator, contract: Path, home: Path, job: str, body: dict[str, object], code: int) -> None:
    sim.add_job(job, [Step(body=body)])
    ran = run_cli("watch", "--contract", str(contract), "--job", job, "--operation", f"op-{job}", home=home)
    assert ran.code == code, (job, ran.stdout, ran.stderr)


def _fleet(sim: Simulator, tmp_path: Path, home: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url, max_requests=1)
    _watch(sim, contract, home, "failed-1", {"state": "failed", "error": CRASH}, 3)
    _watch(sim, contract, home, "failed-2", {"state": "failed", "error": "out of memory"}, 3)
    _watch(sim, contract, home, "cancelled-1", {"state": "cancelled"}, 3)
    _watch(sim, contract, home, "slow-1", {"state": "running"}, 4)  # its budget ran out: a real question


def _open(home: Path) -> dict[str, dict[str, object]]:
    return {d["operation"]: d for d in json.loads(run_cli("decisions", "--json", home=home).stdout)}


def test_an_ended_job_opens_a_decision_that_carries_the_providers_error(
    sim: Simulator, tmp_path: Path, home: Path
) -> None:
    _fleet(sim, tmp_path, home)
    opened = _open(home)
    assert sorted(opened) == ["op-cancelled-1", "op-failed-1", "op-failed-2", "op-slow-1"]  # nothing ends unseen
    assert opened["op-failed-1"]["provider_error"] == CRASH and opened["op-failed-1"]["reason"] == "job_failed"
    listed = run_cli("decisions", "--reason", "job_failed", home=home)
    assert listed.stdout.count("Provider error: ") == 2 and f"Provider error: {CRASH}" in listed.stdout
    assert "op-slow-1" not in listed.stdout and "op-cancelled-1" not in listed.stdout
    story = run_cli("story", "op-failed-1", home=home)
    assert f"the provider said: {CRASH}" in story.stdout, story.stdout


def test_close_closes_only_the_ended_jobs_decisions_one_audited_event_each(
    sim: Simulator, tmp_path: Path, home: Path
) -> None:
    _fleet(sim, tmp_path, home)
    words = ["decisions", "close", "--by", "alice", "--reason", "job_failed", "--note", "known outage"]
    closed = run_cli(*words, home=home)
    assert closed.code == 0, closed.stderr
    assert "closed 2 of 2 decisions" in closed.stdout and "op-failed-1" in closed.stdout
    assert sorted(_open(home)) == ["op-cancelled-1", "op-slow-1"]
    every = run_cli("decisions", "close", "--by", "bob", "--json", home=home)
    assert every.code == 0, every.stderr
    answer = json.loads(every.stdout)
    assert answer["closed"] == 1 and answer["left_open"] == 0
    assert [d["operation"] for d in answer["decisions"]] == ["op-cancelled-1"]
    assert sorted(_open(home)) == ["op-slow-1"]  # a question about a running job is never closed in bulk
    again = run_cli("decisions", "close", "--by", "bob", home=home)
    assert again.code == 0 and "no open decision about a job that ended" in again.stdout
    decided = json.loads(run_cli("decisions", "op-failed-1", "--all", "--json", home=home).stdout)
    assert [(d["status"], d["decided_by"], d["note"]) for d in decided] == [("decided", "alice", "known outage")]
    story = run_cli("story", "op-failed-1", home=home).stdout
    assert story.count("alice chose [") == 1 and "(known outage)" in story, story
    assert run_cli("audit", "verify", home=home).code == 0


def test_a_wrong_flag_is_refused_and_nothing_changes(sim: Simulator, tmp_path: Path, home: Path) -> None:
    _fleet(sim, tmp_path, home)
    for words, said in (
        (["decisions", "close"], "needs --by NAME"),
        (["decisions", "close", "--by", " "], "--by must name the person deciding"),
        (["decisions", "close", "--by", "al\x1bice"], "--by must be plain text"),
        (["decisions", "close", "--by", "alice", "--reason", "request_budget_exhausted"], "only decisions about jobs"),
        (["decisions", "close", "--by", "alice", "--reason", "\u202ex"], "--reason '\\u202ex'"),
        (["decisions", "close", "--by", "alice", "--all"], "--all does not go with"),
        (["decisions", "--by", "alice"], "--by and --note go with `pollwarden decisions close`"),
    ):
        ran = run_cli(*words, home=home)
        assert ran.code == 2, (words, ran.stdout, ran.stderr)
        assert said in ran.stderr, (words, ran.stderr)
        assert "Traceback" not in ran.stderr
    assert len(_open(home)) == 4
