"""`decide` as a person at a shell meets it: items 18, 19 and 21."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, write_contract

CANCEL_NEEDS_TOKEN = '\n[auth]\nsecret_env = "PW_CLI_UNSET_TOKEN"\n\n[cancel]\nurl = "{base}/jobs/{{job_id}}/cancel"\n'


def _stopped(sim: Simulator, tmp_path: Path, home: Path) -> tuple[str, dict[str, int]]:
    sim.add_job("slow-1", [Step(body={"state": "running"})])
    contract = write_contract(
        tmp_path / "c.toml", sim.url, max_requests=1, extra=CANCEL_NEEDS_TOKEN.format(base=sim.url)
    )
    ran = run_cli(
        "watch", "--contract", str(contract), "--job", "slow-1", "--operation", "op", home=home,
        env={"PW_CLI_UNSET_TOKEN": "t0ken-for-the-watch"},
    )  # fmt: skip
    assert ran.code == 4, ran.stderr
    opened = json.loads(run_cli("decisions", "--json", home=home).stdout)[0]
    return opened["decision_id"], {o["kind"]: o["number"] for o in opened["options"]}


def test_option_and_refuse_together_is_refused(sim: Simulator, tmp_path: Path, home: Path) -> None:
    decision, _ = _stopped(sim, tmp_path, home)
    ran = run_cli("decide", decision, "--option", "1", "--refuse", "--by", "alice", home=home)
    assert ran.code == 2
    assert "choose one: --option N" in ran.stderr and "--refuse" in ran.stderr
    assert json.loads(run_cli("decisions", "--json", home=home).stdout)[0]["decision_id"] == decision


def test_only_an_option_that_calls_the_provider_needs_the_credential(
    sim: Simulator, tmp_path: Path, home: Path
) -> None:
    decision, options = _stopped(sim, tmp_path, home)
    cancel = run_cli("decide", decision, "--option", str(options["cancel"]), "--by", "alice", home=home)
    assert cancel.code == 2 and "PW_CLI_UNSET_TOKEN" in cancel.stderr, cancel.stderr
    extend = run_cli("decide", decision, "--option", str(options["extend"]), "--by", "alice", home=home)
    assert extend.code == 0, extend.stderr
    assert "extended operation op" in extend.stdout


def test_the_resume_hint_runs_as_printed(sim: Simulator, tmp_path: Path, home: Path) -> None:
    decision, options = _stopped(sim, tmp_path, home)
    sim.add_job("slow-1", [Step(body={"state": "succeeded", "result_url": "https://files.example/r.csv"})])
    elsewhere = tmp_path / "not-the-home"
    elsewhere.mkdir()
    # The hint must carry --home: run it where POLLWARDEN_HOME points somewhere else.
    decided = run_cli(
        "decide", decision, "--option", str(options["extend"]), "--by", "alice", "--home", str(home), home=elsewhere
    )
    assert decided.code == 0, decided.stderr
    hint = next(line for line in decided.stdout.splitlines() if line.startswith("Resume with: "))
    words = shlex.split(hint.removeprefix("Resume with: ").split("  (")[0])
    assert words[:4] == ["pollwarden", "watch", "--operation", "op"]
    ran = subprocess.run(
        [sys.executable, "-m", *words],
        capture_output=True,
        text=True,
        timeout=60,
        env={"POLLWARDEN_HOME": str(elsewhere), "PATH": "/usr/bin:/bin", "PW_CLI_UNSET_TOKEN": "t0ken-for-the-watch"},
    )
    assert ran.returncode == 0, ran.stderr
    assert "succeeded" in ran.stdout
