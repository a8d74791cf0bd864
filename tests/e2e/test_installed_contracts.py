"""Installed contracts only (issue 23): whoever can enqueue must not choose where the workers' credential goes or
what runs on them. Each test plays the attack as it was reported, against real processes on loopback:

- an enqueuer without the secret enqueues a contract naming the workers' credential variable and its own status
  URL: refused (exit 2, nothing created), so the worker sends nothing there;
- a row whose stored contract was swapped (written behind the engine's back) is refused by the worker with a
  recorded stop, by `watch --operation` likewise, and by `decide`'s cancel and `fetch-result` with exit 2: no
  request to the attacker, no token command run;
- `enqueue` never runs a contract's token command.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from pollwarden.core.contract.vars import text_digest
from pollwarden.core.reasons import Phase, StopReason
from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, token_command_auth, write_contract
from tests.e2e.conftest import store_of

pytestmark = pytest.mark.slow

KEY_ENV = "POLLWARDEN_TEST_FLEET_KEY"


def _marker_command(home: Path) -> tuple[Path, str]:
    """A token command that leaves a file behind when it runs, and prints a token."""
    marker = home / "token-command-ran"
    script = home / "make_token.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('ran')\nprint('tok-' + 'x' * 24)\n")
    return marker, token_command_auth(script)


def _evil_text(attacker: Simulator, home: Path) -> tuple[Path, str]:
    """The attacker's contract: its own status URL and a token command; named as the good one is."""
    marker, auth = _marker_command(home)
    return marker, write_contract(home / "evil.toml", attacker.url, extra=auth).read_text()


def _swap_contract(db: str, operation_id: str, text: str) -> None:
    """Write another contract into an operation's row, as someone with write access to the table would."""
    if db.startswith("postgresql://"):
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("UPDATE operations SET contract = %s WHERE operation_id = %s", (text, operation_id))
        return
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE operations SET contract = ? WHERE operation_id = ?", (text, operation_id))


def _run_worker_until_final(db: str, home: Path, operation_id: str, env: dict[str, str]) -> str:
    """A real worker process until the operation is final; its log."""
    log_path = home / "worker.log"
    with log_path.open("w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "pollwarden", "worker", "--processes", "1", "--db", db, "--concurrency", "4"],
            env={**os.environ, "POLLWARDEN_HOME": str(home), **env},
            stdout=subprocess.DEVNULL,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 60
        store = store_of(db, home)
        try:
            while True:
                stored = store.get(operation_id)
                assert stored is not None
                if stored.record.is_final:
                    break
                assert worker.poll() is None, f"the worker exited with {worker.returncode}: {log_path.read_text()}"
                assert time.monotonic() < deadline, "the operation never ended"
                time.sleep(0.1)
        finally:
            store.close()
    finally:
        worker.terminate()
        worker.wait(30)
    return log_path.read_text()


def test_an_enqueued_contract_that_was_never_installed_is_refused_and_nothing_is_created(
    sim: Simulator, home: Path
) -> None:
    with Simulator() as attacker:
        evil = write_contract(home / "evil.toml", attacker.url, secret_env=KEY_ENV)
        ran = run_cli("enqueue", "--contract", str(evil), "--job", "j1", home=home)
        assert ran.code == 2, ran.stderr
        assert "is not installed" in ran.stderr and "pollwarden contracts install" in ran.stderr
        assert "nothing" not in ran.stdout
        listed = run_cli("status", "--json", home=home)
        assert json.loads(listed.stdout or "[]") == []
        # A worker holding the credential finds nothing to do, and the attacker sees nothing.
        assert run_cli("contracts", "installed", "--json", home=home).stdout.strip() == "[]"
        assert attacker.requests() == []


def test_a_name_reused_with_another_digest_and_a_var_that_moves_the_contract_are_refused(
    sim: Simulator, home: Path
) -> None:
    good = write_contract(home / "exports.toml", sim.url)
    assert run_cli("contracts", "install", str(good), "--by", "alice", home=home).code == 0
    changed = write_contract(home / "exports2.toml", sim.url, max_requests=50)  # same name, another text
    ran = run_cli("enqueue", "--contract", str(changed), "--job", "j1", home=home)
    assert ran.code == 2 and "reused with another digest" in ran.stderr, ran.stderr
    assert run_cli("contracts", "install", "openai-batch", "--by", "alice", home=home).code == 0
    moved = run_cli(
        "enqueue", "--contract", "openai-batch", "--var", "base_url=http://127.0.0.1:9", "--job", "b1", home=home
    )
    assert moved.code == 2 and "reused with another digest" in moved.stderr, moved.stderr
    assert run_cli("enqueue", "--contract", "openai-batch", "--job", "b1", home=home).code == 0


def test_contracts_install_needs_a_name_for_the_audit(sim: Simulator, home: Path) -> None:
    good = write_contract(home / "exports.toml", sim.url)
    for by in ("", "  ", "eve\nmallory"):
        ran = run_cli("contracts", "install", str(good), "--by", by, home=home)
        assert ran.code == 2, (by, ran.stderr)
        assert "nothing was installed" in ran.stderr
    assert run_cli("contracts", "installed", "--json", home=home).stdout.strip() == "[]"


def test_enqueue_never_runs_a_token_command(sim: Simulator, home: Path) -> None:
    marker, auth = _marker_command(home)
    contract = write_contract(home / "exports.toml", sim.url, extra=auth)
    assert run_cli("contracts", "install", str(contract), "--by", "alice", home=home).code == 0
    ran = run_cli("enqueue", "--contract", str(contract), "--job", "j1", home=home)
    assert ran.code == 0, ran.stderr
    assert not marker.exists()


def _enqueued(db: str, sim: Simulator, home: Path, job: str, *, steps: list[Step], max_requests: int = 12) -> str:
    contract = write_contract(home / "exports.toml", sim.url, secret_env=KEY_ENV, max_requests=max_requests)
    sim.add_job(job, steps)
    assert run_cli("contracts", "install", str(contract), "--by", "alice", "--db", db, home=home).code == 0
    ran = run_cli(
        "enqueue", "--contract", str(contract), "--job", job, "--operation", f"op-{job}", "--db", db, home=home
    )
    assert ran.code == 0, ran.stderr
    return f"op-{job}"


def test_the_worker_refuses_a_swapped_contract_with_a_recorded_stop_and_sends_nothing(
    db: str, sim: Simulator, home: Path
) -> None:
    with Simulator() as attacker:
        operation = _enqueued(db, sim, home, "j1", steps=[Step(body={"state": "running"})])
        marker, evil = _evil_text(attacker, home)
        _swap_contract(db, operation, evil)
        log = _run_worker_until_final(db, home, operation, {KEY_ENV: "sk-fleet-credential"})
        assert attacker.requests() == [] and sim.requests("j1") == []
        assert not marker.exists()
        assert "contract_not_installed" in log and "sk-fleet-credential" not in log
        store = store_of(db, home)
        try:
            stored = store.get(operation)
            assert stored is not None
            record = stored.record
            assert (record.phase, record.reason) == (Phase.STOPPED, StopReason.INTEGRATION_FAILURE)
            assert "not installed" in (record.detail or "")
            (decision,) = store.decisions(operation, open_only=True)
            assert [o.kind.value for o in decision.request.options] == ["close"]  # nothing of the text is offered
        finally:
            store.close()
        story = run_cli("story", operation, "--db", db, home=home)
        assert "contract_not_installed" in story.stdout or "not installed" in story.stdout, story.stdout


def test_a_resume_refuses_a_swapped_contract_with_a_recorded_stop(sim: Simulator, home: Path) -> None:
    db = str(home / "pollwarden.db")
    with Simulator() as attacker:
        operation = _enqueued(db, sim, home, "j2", steps=[Step(body={"state": "running"})])
        marker, evil = _evil_text(attacker, home)
        _swap_contract(db, operation, evil)
        ran = run_cli("watch", "--operation", operation, "--json", home=home, env={KEY_ENV: "sk-fleet-credential"})
        assert ran.code == 4, ran.stderr
        final = json.loads(ran.stdout.splitlines()[-1])
        assert final["reason"] == "integration_failure" and "not installed" in final["detail"]
        assert attacker.requests() == [] and not marker.exists()


def test_decide_and_fetch_result_refuse_a_swapped_contract_with_exit_2(sim: Simulator, home: Path) -> None:
    db = str(home / "pollwarden.db")
    with Simulator() as attacker:
        done = _enqueued(db, sim, home, "ok-1", steps=[Step(body={"state": "succeeded", "result_url": "/r/ok-1"})])
        assert run_cli("watch", "--operation", done, home=home, env={KEY_ENV: "k"}).code == 0
        marker, evil = _evil_text(attacker, home)
        _swap_contract(db, done, evil)
        fetched = run_cli("fetch-result", done, "--out", str(home / "out.bin"), home=home, env={KEY_ENV: "k"})
        assert fetched.code == 2 and "not installed" in fetched.stderr, fetched.stderr
        assert not (home / "out.bin").exists()
        story = run_cli("story", done, "--json", home=home)
        assert "contract_refused" in [e["kind"] for e in json.loads(story.stdout)]
        assert attacker.requests() == [] and not marker.exists()


def test_a_decision_on_a_swapped_contract_is_refused_and_left_open(sim: Simulator, home: Path) -> None:
    db = str(home / "pollwarden.db")
    with Simulator() as attacker:
        operation = _enqueued(db, sim, home, "j3", steps=[Step(body={"state": "running"})], max_requests=1)
        stopped = run_cli("watch", "--operation", operation, "--json", home=home, env={KEY_ENV: "k"})
        assert stopped.code == 4, stopped.stderr  # request_budget_exhausted: a decision is open
        decision = json.loads(stopped.stdout.splitlines()[-1])["decision"]["decision_id"]
        marker, evil = _evil_text(attacker, home)
        _swap_contract(db, operation, evil)
        ran = run_cli("decide", decision, "--option", "1", "--by", "alice", home=home, env={KEY_ENV: "k"})
        assert ran.code == 2 and "not installed" in ran.stderr, ran.stderr
        store = store_of(db, home)
        try:
            assert [d.request.decision_id for d in store.decisions(operation, open_only=True)] == [decision]
        finally:
            store.close()
        assert attacker.requests() == [] and not marker.exists()


def test_on_postgres_a_role_without_rights_on_the_registry_cannot_install(home: Path, sim: Simulator) -> None:
    from tests.store.conftest import create_database, drop_database

    url = create_database(upgraded=True)
    role = f"enq_{os.getpid()}_{time.monotonic_ns() % 100000}"
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {role} LOGIN")
            conn.execute(f"GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO {role}")
            conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}")
            conn.execute(f"REVOKE INSERT, UPDATE ON contracts FROM {role}")
        enqueuer = url.replace("postgresql://postgres@", f"postgresql://{role}@")
        contract = write_contract(home / "exports.toml", sim.url)
        ran = run_cli("contracts", "install", str(contract), "--by", "mallory", "--db", enqueuer, home=home)
        assert ran.code == 2 and "permission denied" in ran.stderr and "GRANT" in ran.stderr, ran.stderr
        assert run_cli("contracts", "install", str(contract), "--by", "alice", "--db", url, home=home).code == 0
        queued = run_cli("enqueue", "--contract", str(contract), "--job", "j1", "--db", enqueuer, home=home)
        assert queued.code == 0, queued.stderr  # reading the registry is enough to enqueue an installed version
    finally:
        drop_database(url)
        with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
            conn.execute(f"DROP ROLE IF EXISTS {role}")


def test_a_version_installed_behind_the_engines_back_is_caught_by_audit_verify(
    db: str, sim: Simulator, home: Path
) -> None:
    """The registry's rows are vouched for by the signed heads: a version added by an INSERT (not `contracts
    install`, so with no audited event) is a row no head vouches for, exit 5 naming its log."""
    good = write_contract(home / "exports.toml", sim.url)
    assert run_cli("contracts", "install", str(good), "--by", "alice", "--db", db, home=home).code == 0
    assert run_cli("audit", "verify", "--db", db, home=home).code == 0
    with Simulator() as attacker:
        evil = write_contract(home / "evil.toml", attacker.url, secret_env=KEY_ENV).read_text()
    digest = text_digest(evil)
    if db.startswith("postgresql://"):
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO contracts (digest, name, text, installed_by, installed_at) VALUES (%s, %s, %s, %s, now())",
                (digest, "exports", evil, "alice"),
            )
    else:
        with sqlite3.connect(db) as conn:
            conn.execute(
                "INSERT INTO contracts (digest, name, text, installed_by, installed_at) VALUES (?, ?, ?, ?, ?)",
                (digest, "exports", evil, "alice", time.time()),
            )
    verified = run_cli("audit", "verify", "--db", db, home=home)
    assert verified.code == 5, verified.stdout + verified.stderr
    assert f"@contract/{digest}" in verified.stdout + verified.stderr
