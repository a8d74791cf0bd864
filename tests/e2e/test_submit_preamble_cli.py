"""`pollwarden submit` refuses what needs no store before one is opened, as every watch's preamble does (issue 25):
a contract no watch may poll, limits a watch may not ask for, a duration it cannot read. Exit 2, and nothing was
created (no home, no installed contract, no audit event), no token command run, nothing sent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pollwarden.simulator import Simulator
from tests.conftest import run_cli, token_command_auth, write_contract


@pytest.mark.parametrize(
    ("unsafe", "flags", "said"),
    [
        (True, (), "safe_status = false"),
        (False, ("--deadline", "soon"), "--deadline: cannot read duration 'soon'"),
        (False, ("--useful-for", "2h"), "--useful-for 2h is longer than the deadline 1m"),
    ],
)
def test_a_refused_submission_opens_no_home_and_runs_no_token_command(
    sim: Simulator, tmp_path: Path, unsafe: bool, flags: tuple[str, ...], said: str
) -> None:
    mark = tmp_path / "ran"
    script = tmp_path / "token.py"  # run by this interpreter (`token_command_auth`)
    script.write_text(f"open({str(mark)!r}, 'w').close()\nprint('tok-submit-9a7e')\n", encoding="utf-8")
    contract = write_contract(tmp_path / "c.toml", sim.url, extra=token_command_auth(script))
    text = contract.read_text(encoding="utf-8") + f'\n[submit]\nurl = "{sim.url}/jobs"\njob_id = "job_id"\n'
    if unsafe:
        text = text.replace("safe_status = true", "safe_status = false", 1)
    contract.write_text(text, encoding="utf-8")
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"scenario": "happy"}), encoding="utf-8")
    home = tmp_path / "home"
    ran = run_cli("submit", "--contract", str(contract), "--body", str(body), *flags, home=home)
    assert ran.code == 2, ran.stdout + ran.stderr
    assert said in ran.stderr and "Traceback" not in ran.stderr
    assert not home.exists(), "a refused submission created the home (and installed its contract)"
    assert not mark.exists(), "a refused submission ran the token command"
    assert [r for r in sim.requests() if r.method == "POST"] == []
