"""The same commands on PostgreSQL (`--db URL`): watch, decide, resume, story, audit, export, db upgrade."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pollwarden.simulator import Simulator, Step
from pollwarden.store.migrations import LATEST
from tests.conftest import run_cli, write_contract
from tests.store.conftest import create_database, drop_database

pytestmark = pytest.mark.slow


@pytest.fixture
def url() -> Iterator[str]:
    made = create_database(upgraded=True)
    yield made
    drop_database(made)


def test_escalate_decide_resume_and_audit_on_postgres(url: str, sim: Simulator, home: Path, tmp_path: Path) -> None:
    sim.add_job(
        "exp", [Step(body={"state": "running"}, times=2), Step(body={"state": "succeeded", "result_url": "/r"})]
    )
    contract = write_contract(tmp_path / "c.toml", sim.url)
    ran = run_cli("watch", "--db", url, "--contract", str(contract), "--job", "exp", "--operation", "op",
                  "--max-requests", "2", "--json", home=home)  # fmt: skip
    assert ran.code == 4, ran.stderr
    decision = json.loads(ran.stdout.strip().splitlines()[-1])["decision"]["decision_id"]
    assert not (home / "pollwarden.db").exists(), "with --db nothing goes to the home's SQLite file"
    listed = json.loads(run_cli("decisions", "--db", url, "--json", home=home).stdout)
    assert [d["decision_id"] for d in listed] == [decision]
    assert run_cli("decide", decision, "--option", "1", "--by", "alice", "--db", url, home=home).code == 0
    again = run_cli("watch", "--contract", str(contract), "--operation", "op", "--json", home=home,
                    env={"POLLWARDEN_DB": url})  # fmt: skip
    assert again.code == 0, again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1])["status_requests_used"] == 3
    story = run_cli("story", "op", "--db", url, home=home).stdout
    assert "alice chose [1] extend" in story and story.rstrip().endswith("succeeded")
    verified = run_cli("audit", "verify", "--db", url, "--json", home=home)
    assert verified.code == 0 and json.loads(verified.stdout)["ok"] is True
    export = tmp_path / "export.jsonl"
    assert run_cli("audit", "export", "--db", url, "--out", str(export), home=home).code == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_cli("audit", "verify", "--file", str(export), home=empty).code == 0
    status = json.loads(run_cli("status", "op", "--json", "--db", url, home=home).stdout)
    assert status["phase"] == "succeeded"


def test_db_upgrade_and_the_refusal_before_it(sim: Simulator, home: Path, tmp_path: Path) -> None:
    url = create_database(upgraded=False)
    try:
        contract = write_contract(tmp_path / "c.toml", sim.url)
        refused = run_cli("watch", "--db", url, "--contract", str(contract), "--job", "happy-1", home=home)
        assert refused.code == 2 and "pollwarden db upgrade" in refused.stderr and "Traceback" not in refused.stderr
        assert sim.requests() == []
        upgraded = run_cli("db", "upgrade", "--db", url, home=home)
        assert upgraded.code == 0 and f"applied migrations {list(range(1, LATEST + 1))}" in upgraded.stdout
        assert "up to date" in run_cli("db", "upgrade", "--db", url, home=home).stdout
        ran = run_cli("watch", "--db", url, "--contract", str(contract), "--job", "happy-1", home=home)
        assert ran.code == 0, ran.stderr
    finally:
        drop_database(url)


def test_a_mistyped_database_url_is_refused_without_echoing_it(home: Path) -> None:
    ran = run_cli("status", "--db", "postgresq://user:hunter2@db/x", home=home)
    assert ran.code == 2 and "hunter2" not in ran.stderr and "Traceback" not in ran.stderr
