"""A credential fixed after a 401, end to end with the real CLI: the watch stops `authorization_denied`, the key is
fixed, a person chooses "check once with the credential configured now", and the operation goes on from that one
check (sent by `decide` itself, or by the resumed watch or a worker where `decide` has no credential); a check that
is refused again is the same stop with a new decision, never a loop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, write_contract

KEY = "SIM_TOKEN"
WRONG = {KEY: "pw-wrong-key-0c9d2e"}


def _watch(home: Path, env: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    ran = run_cli("watch", "--json", *args, home=home, env=env)
    assert "Traceback" not in ran.stderr, ran.stderr
    return ran.code, json.loads(ran.stdout.strip().splitlines()[-1])


def _denied(sim: Simulator, home: Path, tmp_path: Path, *, max_requests: int = 12) -> tuple[Path, str]:
    """A watch with the wrong key: one request, stopped `authorization_denied`, one open decision."""
    contract = write_contract(tmp_path / "c.toml", sim.url, secret_env=KEY, max_requests=max_requests)
    code, result = _watch(home, WRONG, "--contract", str(contract), "--job", "exp", "--operation", "op")
    assert (code, result["reason"]) == (4, "authorization_denied"), result
    assert sim.request_count("exp") == 1
    options = result["decision"]["options"]
    first = options[0]
    assert (first["number"], first["kind"], first["label"]) == (
        1,
        "recheck",
        "check once with the credential configured now",
    )
    assert "sends one check with the credential configured now" in options[0]["effect"]
    return contract, result["decision"]["decision_id"]


def test_the_key_fixed_decide_checks_once_and_the_resumed_watch_succeeds(
    guarded: Simulator, secret: str, home: Path, tmp_path: Path
) -> None:
    guarded.add_job("exp", [Step(body={"state": "running"}), Step(body={"state": "succeeded", "result_url": "/r/1"})])
    contract, decision = _denied(guarded, home, tmp_path)
    decided = run_cli("decide", decision, "--option", "1", "--by", "alice", "--json", home=home, env={KEY: secret})
    assert decided.code == 0, decided.stdout + decided.stderr
    answer = json.loads(decided.stdout)
    assert "checked once with the credential configured now (HTTP 200), job running" in answer["message"]
    assert answer["action"]["sent"] is True and answer["action"]["ok"] is True
    assert answer["resume"] and "watch --operation op" in answer["resume"]
    assert guarded.request_count("exp") == 2  # exactly the one check
    code, result = _watch(home, {KEY: secret}, "--contract", str(contract), "--operation", "op")
    assert code == 0 and result["result"] == "/r/1", result
    assert result["status_requests_used"] == guarded.request_count("exp") == 3
    story = run_cli("story", "op", home=home).stdout
    assert f"alice chose [1] check once with the credential configured now on {decision}" in story
    assert "one check with the credential configured now is due" in story
    for text in (story, decided.stdout, run_cli("story", "op", "--json", home=home).stdout):
        assert secret not in text and WRONG[KEY] not in text


def test_a_check_that_finds_the_job_done_succeeds_from_decide_itself(
    guarded: Simulator, secret: str, home: Path, tmp_path: Path
) -> None:
    guarded.add_job("exp", [Step(body={"state": "succeeded", "result_url": "/r/2"})])
    _denied(guarded, home, tmp_path, max_requests=1)  # the budget is spent by the refused request
    decision = json.loads(run_cli("decisions", "--json", home=home).stdout)[0]
    assert "the budget grows by one for it" in decision["options"][0]["effect"]
    ran = run_cli("decide", decision["decision_id"], "--option", "1", "--by", "alice", home=home,
                  env={KEY: secret})  # fmt: skip
    assert ran.code == 0, ran.stdout + ran.stderr
    assert "checked once with the credential configured now (HTTP 200): operation op succeeded" in ran.stdout
    status = json.loads(run_cli("status", "op", "--json", home=home).stdout)
    assert status["outcome"] == "succeeded" and status["result"] == "/r/2"
    assert (status["status_requests_used"], status["max_status_requests"]) == (2, 2)
    assert guarded.request_count("exp") == 2


def test_still_refused_stops_again_with_a_new_decision_and_never_loops(
    guarded: Simulator, secret: str, home: Path, tmp_path: Path
) -> None:
    guarded.add_job("exp", [Step(body={"state": "succeeded", "result_url": "/r/3"})])
    _, first = _denied(guarded, home, tmp_path)
    again = run_cli("decide", first, "--option", "1", "--by", "alice", home=home, env=WRONG)
    assert again.code == 4, again.stdout + again.stderr
    assert "(HTTP 401): operation op stopped again (authorization_denied); decision" in again.stdout
    assert guarded.request_count("exp") == 2  # one check, no retry, no loop
    opened = json.loads(run_cli("decisions", "--json", home=home).stdout)
    assert len(opened) == 1 and opened[0]["decision_id"] != first
    assert opened[0]["options"][0]["kind"] == "recheck"
    second = opened[0]["decision_id"]
    assert second in again.stdout
    stale = run_cli("decide", first, "--option", "1", "--by", "alice", home=home, env={KEY: secret})
    assert stale.code == 2 and guarded.request_count("exp") == 2  # a decided decision is never applied twice
    fixed = run_cli("decide", second, "--option", "1", "--by", "alice", home=home, env={KEY: secret})
    assert fixed.code == 0 and "succeeded" in fixed.stdout, fixed.stdout + fixed.stderr
    assert guarded.request_count("exp") == 3


def test_without_the_credential_decide_sends_nothing_and_the_resumed_watch_checks(
    guarded: Simulator, secret: str, home: Path, tmp_path: Path
) -> None:
    guarded.add_job("exp", [Step(body={"state": "succeeded", "result_url": "/r/4"})])
    contract, decision = _denied(guarded, home, tmp_path)
    assert KEY not in os.environ  # nor in `decide`'s, which inherits this process's
    ran = run_cli("decide", decision, "--option", "1", "--by", "alice", home=home)
    assert ran.code == 0, ran.stdout + ran.stderr
    assert "no credential can be read here, so the next watch of the operation sends it" in ran.stdout
    assert "Resume with: pollwarden watch --operation op" in ran.stdout
    assert guarded.request_count("exp") == 1
    code, result = _watch(home, {KEY: secret}, "--contract", str(contract), "--operation", "op")
    assert code == 0 and result["result"] == "/r/4" and result["status_requests_used"] == 2, result
    assert guarded.request_count("exp") == 2


def test_a_worker_started_with_the_fixed_key_sends_the_check(
    guarded: Simulator, secret: str, home: Path, tmp_path: Path
) -> None:
    guarded.add_job("exp", [Step(body={"state": "succeeded", "result_url": "/r/5"})])
    _, decision = _denied(guarded, home, tmp_path)
    assert run_cli("decide", decision, "--option", "1", "--by", "alice", home=home).code == 0
    assert guarded.request_count("exp") == 1
    log = (home / "worker.log").open("w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "pollwarden", "worker", "--processes", "1"],
        env={**os.environ, "POLLWARDEN_HOME": str(home), KEY: secret},
        stdout=subprocess.DEVNULL,
        stderr=log,
        stdin=subprocess.DEVNULL,
    )
    log.close()
    try:
        deadline = time.monotonic() + 60
        while json.loads(run_cli("status", "op", "--json", home=home).stdout)["phase"] == "active":
            assert time.monotonic() < deadline and worker.poll() is None, (home / "worker.log").read_text()
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0
    status = json.loads(run_cli("status", "op", "--json", home=home).stdout)
    assert status["outcome"] == "succeeded" and status["result"] == "/r/5"
    assert guarded.request_count("exp") == status["status_requests_used"] == 2
