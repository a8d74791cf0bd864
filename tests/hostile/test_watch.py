"""Every hostile answer through `python -m pollwarden watch`, then through what a person reads about it."""

from __future__ import annotations

from pathlib import Path

import pytest

from .cases import CASES, Case, exit_code_for, write_contract
from .checks import Findings, Run, all_bytes_under, last_json, outcome_of, run_bounded
from .server import HostileServer

pytestmark = pytest.mark.slow

# What a person reads about an operation; each must be free of raw control characters and of the credential.
_READERS = (("status",), ("status", "{op}"), ("story", "{op}"), ("decisions",), ("why", "{op}"))
_JSON_READERS = (("status", "--json"), ("story", "{op}", "--json"), ("decisions", "--json"), ("why", "{op}", "--json"))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_watch(case: Case, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {case.secret.env: case.secret.value} if case.secret else {}
    findings = Findings(case)
    case.prime()
    with HostileServer() as server:
        server.add(case.job, case.script)
        contract = write_contract(tmp_path / "contracts", server.url, secret=case.secret)
        # The human form for control characters: that is what reaches a terminal; --json escapes them anyway.
        json_flag = () if case.terminal else ("--json",)
        watch = run_bounded(
            "watch", "--contract", str(contract), "--job", case.job, "--operation", case.job, *json_flag,
            home=home, env=env,
        )  # fmt: skip
        findings.command(watch)
        findings.memory(watch)
        server.wait_idle(timeout=30)
        requests = server.requests(case.job)

    status = run_bounded("status", case.job, "--json", home=home, env=env)
    record = last_json(status.stdout) if status.code == 0 else None
    if record is None:
        refused = watch.code == 2 and not requests
        outcome = "refused" if refused else f"nothing recorded (watch exit {watch.code}, status exit {status.code})"
    else:
        outcome = outcome_of(record.get("phase"), record.get("reason"))
        findings.counted(requests, record.get("status_requests_used"))
    findings.outcome(outcome)
    if outcome in case.outcomes and watch.code != exit_code_for(outcome):
        findings.add(f"watch exit {watch.code} for {outcome!r}, expected {exit_code_for(outcome)}")
    findings.bounded(requests)

    if case.secret is not None and requests:
        sent = requests[0].headers.get("authorization")
        if sent != f"{case.secret.scheme} {case.secret.value.strip()}":
            findings.add("the provider did not receive the credential as configured (scheme, stripped value)")

    runs: list[Run] = [watch, status]
    if case.terminal or case.secret is not None:
        readers = _READERS + (_JSON_READERS if case.secret is not None else ())
        runs += [run_bounded(*(a.format(op=case.job) for a in args), home=home, env=env) for args in readers]
    for run in runs[1:]:
        findings.command(run)
    if case.terminal:
        for run in runs:
            findings.terminal(f"{run.label} stdout", run.stdout)
            findings.terminal(f"{run.label} stderr", run.stderr)
    outputs = {f"{run.label} {name}": text.encode() for run in runs for name, text in (("out", run.stdout),
               ("err", run.stderr))}  # fmt: skip
    findings.leaks(case.secret, outputs | {f"home/{name}": data for name, data in all_bytes_under(home).items()})
    findings.done()
