"""The drift the one engine closed, each through the interface where it was reported (issue part 7, items 3, 5, 18)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pollwarden.simulator import Simulator
from tests.conftest import run_cli, write_contract
from tests.mcp.support import agent_contract, mcp_agent, run

pytestmark = pytest.mark.slow


def _status(home: Path, op: str) -> dict[str, object]:
    ran = run_cli("status", op, "--json", home=home)
    assert ran.code == 0, ran.stderr
    parsed: dict[str, object] = json.loads(ran.stdout.strip().splitlines()[-1])
    return parsed


def test_narrowing_a_limit_on_resume_keeps_the_usefulness_window(sim: Simulator, home: Path, tmp_path: Path) -> None:
    """Item 3: `watch --operation X --max-requests 1` used to set useful_until to null (a flag widened authority)."""
    contract = write_contract(tmp_path / "c.toml", sim.url, max_requests=3)
    first = run_cli("watch", "--contract", str(contract), "--job", "unknown_state-1", "--operation", "op",
                    "--useful-for", "50s", "--max-requests", "1", "--json", home=home)  # fmt: skip
    assert first.code == 4, first.stderr
    useful = _status(home, "op")["useful_until"]
    assert useful is not None
    again = run_cli("watch", "--operation", "op", "--max-requests", "1", "--json", home=home)
    assert again.code == 4, again.stderr
    assert _status(home, "op")["useful_until"] == useful


def test_watch_resumes_with_the_stored_contract_and_refuses_a_changed_one(
    sim: Simulator, home: Path, tmp_path: Path
) -> None:
    """Item 18: `--contract` is needed only to start; a contract file that changed meaning is still refused."""
    contract = write_contract(tmp_path / "c.toml", sim.url, max_requests=2)
    first = run_cli("watch", "--contract", str(contract), "--job", "never-1", "--operation", "op", home=home)
    assert first.code == 4, first.stderr
    resumed = run_cli("watch", "--operation", "op", home=home)
    assert resumed.code == 4 and "Traceback" not in resumed.stderr
    assert "operation op: job never-1" in resumed.stdout and "resumed with 2 used" in resumed.stdout
    changed = tmp_path / "changed.toml"
    changed.write_text(contract.read_text().replace('success = ["succeeded"]', 'success = ["succeeded", "done"]'))
    refused = run_cli("watch", "--contract", str(changed), "--operation", "op", home=home)
    assert refused.code == 2 and "differs from the one operation op was created with" in refused.stderr
    missing = run_cli("watch", "--operation", "nope", home=home)
    assert missing.code == 2 and "--contract FILE and --job ID" in missing.stderr


def test_the_same_job_again_never_gets_a_fresh_budget_from_any_interface(
    sim: Simulator, home: Path, tmp_path: Path
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url, max_requests=2)
    first = run_cli("watch", "--contract", str(contract), "--job", "never-7", "--json", home=home)
    assert first.code == 4
    op = json.loads(first.stdout.strip().splitlines()[-1])["operation"]
    again = run_cli("watch", "--contract", str(contract), "--job", "never-7", "--json", home=home)
    assert again.code == 4 and json.loads(again.stdout.strip().splitlines()[-1])["operation"] == op
    other_name = run_cli("watch", "--contract", str(contract), "--job", "never-7", "--operation", "fresh", home=home)
    assert other_name.code == 2 and f"already watched by operation {op}" in other_name.stderr
    enqueued = run_cli("enqueue", "--contract", str(contract), "--job", "never-7", home=home)
    assert enqueued.code == 0 and f"already enqueued as {op}" in enqueued.stdout
    assert sim.request_count("never-7") == 2


def test_start_watch_again_rejoins_the_operation_with_what_is_left_of_its_budget(
    sim: Simulator, tmp_path: Path
) -> None:
    """Item 5: four start_watch calls with [agent] max_requests = 3 used to give 12 provider requests."""
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, agent="\n[agent]\nmax_requests = 3\n")

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            ops = set()
            for _ in range(4):
                started = await agent.call("start_watch", contract="exports", job_id="never-3")
                assert started.ok, started.text
                op = started.data.get("operation_id") or started.data["operation"]["operation_id"]
                ops.add(op)
                await agent.call("wait_operation", operation_id=op, max_wait_seconds=20)
            assert len(ops) == 1
            assert sim.request_count("never-3") == 3
            after = await agent.call("start_watch", contract="exports", job_id="never-3")
            assert after.data["status"] == "stopped" and after.data["reason"] == "request_budget_exhausted"

    run(body)


def test_bytes_that_are_not_utf8_in_any_argument_are_exit_2_with_nothing_created(tmp_path: Path) -> None:
    """Found by review: such an id reached the store unvalidated and raised UnicodeEncodeError (exit 1)."""
    home = tmp_path / "home"
    for args in ([b"status", b"op\xff"], [b"watch", b"--contract", b"c.toml", b"--job", b"a\x85b"]):
        ran = subprocess.run(
            [sys.executable.encode(), b"-m", b"pollwarden", *args],
            capture_output=True,
            env={**os.environ, "POLLWARDEN_HOME": str(home)},
            timeout=60,
        )
        assert ran.returncode == 2 and b"not valid UTF-8" in ran.stderr and b"Traceback" not in ran.stderr
    assert not home.exists()


def test_a_job_id_that_contains_the_credential_is_refused_by_every_interface(sim: Simulator, tmp_path: Path) -> None:
    """Found by review: it would be sent in the status URL path, stored and printed."""
    import pollwarden

    home = tmp_path / "home"
    contract = write_contract(tmp_path / "c.toml", sim.url, secret_env="PW_ENGINE_SECRET")
    env = {"PW_ENGINE_SECRET": "s3cr3tTOKENxyz\n"}
    for command in ("watch", "enqueue"):
        ran = run_cli(command, "--contract", str(contract), "--job", "x-s3cr3tTOKENxyz", home=home, env=env)
        assert ran.code == 2 and "contains the credential" in ran.stderr, ran.stderr
        assert "s3cr3tTOKENxyz" not in ran.stdout + ran.stderr
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PW_ENGINE_SECRET", "s3cr3tTOKENxyz")
        with pytest.raises(pollwarden.WatchError, match="contains the credential"):
            pollwarden.watch_sync(contract, "s3cr3tTOKENxyz", home=home)
    assert sim.requests() == []


def test_a_refused_watch_creates_no_home(sim: Simulator, tmp_path: Path) -> None:
    """Exit 2 means nothing changed: not even a home, keys or an empty database (found by review)."""
    home = tmp_path / "fresh"
    contract = write_contract(tmp_path / "c.toml", sim.url)
    ran = run_cli("watch", "--contract", str(contract), "--job", "a\x1bb", home=home)
    assert ran.code == 2 and not home.exists()
