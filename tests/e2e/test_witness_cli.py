"""Heads kept elsewhere, through the CLI: `audit checkpoint --out`, `verify --checkpoint`, an HTTP witness,
and stores upgraded from schema 2 (before heads) on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
import shutil
import socket
import sqlite3
import threading
from pathlib import Path

import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from pollwarden import events as ev
from pollwarden.audit import GENESIS_HASH, load_or_create_keys, sign_head, write_head_file
from pollwarden.clock import utcnow
from pollwarden.home.outbox import delivering
from pollwarden.simulator import Simulator
from pollwarden.store.migrations import LATEST
from pollwarden.store.open import open_store
from pollwarden.store.witness import Witness
from tests.conftest import run_cli, write_contract
from tests.e2e.test_audit_cli import EXIT_TAMPERED, _verify
from tests.loopback import Answer, serving
from tests.store.undo import undone_after

pytestmark = pytest.mark.slow


def _watch(home: Path, contract: Path, job: str, operation: str, *extra: str) -> None:
    ran = run_cli("watch", "--contract", str(contract), "--job", job, "--operation", operation, *extra, home=home)
    assert ran.code == 0, ran.stderr


def _problems(report: dict[str, object]) -> list[dict[str, object]]:
    problems = report["problems"]
    assert isinstance(problems, list)
    return problems


@pytest.fixture
def contract(sim: Simulator, tmp_path: Path) -> Path:
    return write_contract(tmp_path / "c.toml", sim.url)


@pytest.fixture
def worked(home: Path, contract: Path, tmp_path: Path) -> tuple[Path, Path]:
    """One watch, then its head taken off the machine with `audit checkpoint --out FILE`."""
    _watch(home, contract, "happy-1", "op-a")
    kept = tmp_path / "elsewhere" / "head.json"
    kept.parent.mkdir()
    ran = run_cli("audit", "checkpoint", "--out", str(kept), home=home)
    assert ran.code == 0 and "signed head #" in ran.stdout, ran.stderr
    return home, kept


def test_a_store_that_grew_extends_the_head_kept_elsewhere(worked: tuple[Path, Path], contract: Path) -> None:
    home, kept = worked
    _watch(home, contract, "happy-2", "op-b")
    code, report = _verify(home, "--checkpoint", str(kept))
    assert code == 0, report
    assert report["trusted_checkpoint"] == str(kept) and report["logs"] == 3  # and the installed contract's


def test_a_log_deleted_after_the_head_was_kept_is_named(worked: tuple[Path, Path], contract: Path) -> None:
    home, kept = worked
    _watch(home, contract, "happy-2", "op-b")
    with sqlite3.connect(home / "pollwarden.db", isolation_level=None) as conn:
        for table in ("audit_records", "audit_checkpoints"):
            conn.execute(f"DELETE FROM {table} WHERE log_id = 'op-a'")
    conn.close()
    code, report = _verify(home, "--checkpoint", str(kept))
    assert code == EXIT_TAMPERED
    assert "op-a" in {p["log_id"] for p in _problems(report)}


def test_a_rollback_to_before_the_kept_head_is_caught(home: Path, contract: Path, tmp_path: Path) -> None:
    _watch(home, contract, "happy-1", "op-a")
    older = tmp_path / "older"
    older.mkdir()
    with sqlite3.connect(home / "pollwarden.db") as src, sqlite3.connect(older / "pollwarden.db") as dst:
        src.backup(dst)
    src.close()
    dst.close()
    shutil.copy(home / "audit-head.checkpoint", older / "audit-head.checkpoint")
    _watch(home, contract, "happy-2", "op-b")
    kept = tmp_path / "head.json"
    assert run_cli("audit", "checkpoint", "--out", str(kept), home=home).code == 0
    for name in ("pollwarden.db-wal", "pollwarden.db-shm"):
        (home / name).unlink(missing_ok=True)
    for name in ("pollwarden.db", "audit-head.checkpoint"):
        shutil.copy(older / name, home / name)
    assert _verify(home)[0] == 0, "the older pair alone is consistent"
    code, report = _verify(home, "--checkpoint", str(kept))
    assert code == EXIT_TAMPERED
    assert any("rollback" in str(p["what"]) for p in _problems(report))


def test_a_head_file_signed_by_another_key_fails_against_the_pinned_key(
    worked: tuple[Path, Path], tmp_path: Path
) -> None:
    home, kept = worked
    body = json.loads(kept.read_text())
    forged_key = Ed25519PrivateKey.generate()
    forged = sign_head(
        forged_key, counter=1, prev_hash=GENESIS_HASH, changes=[], logs=0, records=0, at=body["head"]["at"]
    )
    other = tmp_path / "forged.json"
    write_head_file(other, forged)
    pub = home / "keys" / "signing.pub"
    code, report = _verify(home, "--checkpoint", str(other), "--public-key", str(pub))
    assert code == EXIT_TAMPERED
    problems = _problems(report)
    assert problems[0]["log_id"] == "*"
    assert f"signed by key {forged.key_id[:12]}" in str(problems[0]["what"])


@pytest.mark.parametrize("field", ["counter", "head_hash", "signature"])
def test_a_malformed_head_file_is_a_usage_error_naming_the_field(
    worked: tuple[Path, Path], tmp_path: Path, field: str
) -> None:
    home, kept = worked
    body = json.loads(kept.read_text())
    del body["head"][field]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(body))
    ran = run_cli("audit", "verify", "--checkpoint", str(broken), home=home)
    assert ran.code == 2, ran.stdout + ran.stderr
    assert field in ran.stderr and "Traceback" not in ran.stderr


# -- an HTTPS-style witness (plain http is allowed to loopback only) --------------------------------


def test_an_http_witness_receives_the_newest_head_when_the_watch_ends(home: Path, contract: Path) -> None:
    with serving({("POST", "/heads"): Answer(204)}) as witness:
        ran = run_cli("audit", "witness", f"{witness.url}/heads", home=home)
        assert ran.code == 0, ran.stderr
        _watch(home, contract, "happy-2", "op-a")
        posted = [json.loads(seen.body) for seen in witness.seen if seen.path == "/heads"]
    assert posted, "the witness received no head"
    newest = json.loads(run_cli("audit", "checkpoint", "--out", "-", home=home).stdout)
    assert {(p["format"], p["version"]) for p in posted} == {("pollwarden-audit-head", 2)}
    assert posted[-1]["head"] == newest["head"]


def _refusing_port() -> int:
    """A loopback port nothing listens on: connections are refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_a_witness_that_is_down_never_fails_the_command_and_is_said(home: Path, contract: Path) -> None:
    ran = run_cli("audit", "witness", f"http://127.0.0.1:{_refusing_port()}/heads", home=home)
    assert ran.code == 0, ran.stderr
    _watch(home, contract, "happy-1", "op-a")  # closing, it gives the witness one chance (the test below)
    # The command succeeded; verifying is another matter: a configured witness that cannot be read is a finding.
    code, report = _verify(home)
    (problem,) = _problems(report)
    assert code == EXIT_TAMPERED and "cannot be read" in str(problem["what"]), report
    newest = json.loads(run_cli("audit", "checkpoint", "--out", "-", home=home).stdout)["head"]["counter"]
    listed = run_cli("outbox", home=home)  # and the outbox says which head it is still trying to give it
    assert f"head #{newest} for this home's witness: pending since" in listed.stdout, listed.stdout
    assert re.search(r"\d+ attempts? failed", listed.stdout), listed.stdout


def test_a_closing_drain_ends_at_the_first_refused_attempt_not_at_its_bound(tmp_path: Path) -> None:
    """A witness that is down costs a closing process one attempt: the next one is due after the bound, so the wait
    ends there. The bound is an hour here, so the drain returning at all is the proof; no duration is measured."""
    witness = Witness.parse(f"http://127.0.0.1:{_refusing_port()}/heads", "test")
    store = open_store(tmp_path / "w.db", keys=load_or_create_keys(tmp_path / "keys"), witness=witness)
    try:
        with delivering(store, "watch") as courier:
            store.append(
                "op", ev.WatchInterrupted.prepared({"by": "test"}), utcnow()
            )  # a commit: its head is queued for the witness
            draining = threading.Thread(target=courier.drain, args=(3600.0,), daemon=True)
            draining.start()
            draining.join(60)  # a guard: the refused connection ends it at once
            assert not draining.is_alive(), "the drain sat out its bound for a witness that refuses connections"
            (entry,) = store.outbox()
            assert entry.kind == "witness" and entry.attempts == 1 and entry.last_error, entry
    finally:
        store.close()


# -- stores upgraded from schema 2 ---------------------------------------------------------------


_SCHEMA_2_DUE_INDEX = "CREATE INDEX operations_due ON operations (next_poll_at) WHERE phase = 'active'"


_SCHEMA_8 = undone_after(7)
"""What schemas 8 and later added (the rows the audit vouches for, key rotations, settings, unreadable rows, the
console's indexes, push deliveries, pacing's due time, the learnt samples), undone."""


def _downgrade_sqlite(db: Path) -> None:
    """A store as schema 2 left it: today's records and checkpoints, no heads tables, schema 1's due index
    (schema 4 replaced it), no watcher columns (schema 5), no contracts registry nor its logs (schema 6), no outbox
    (schema 7), nothing of schemas 8 and 9, version 2."""
    with sqlite3.connect(db, isolation_level=None) as conn:
        conn.execute("DROP TABLE contracts")
        conn.execute("DELETE FROM audit_records WHERE log_id LIKE '@contract/%'")
        conn.execute("DELETE FROM audit_checkpoints WHERE log_id LIKE '@contract/%'")
        for statement in _SCHEMA_8:
            conn.execute(statement)
        conn.execute("DROP TABLE audit_heads")
        conn.execute("DROP TABLE audit_heads_pending")
        conn.execute("DROP INDEX operations_due_order")
        conn.execute(_SCHEMA_2_DUE_INDEX)
        for column in ("watcher", "watcher_since"):  # schema 5's
            conn.execute(f"ALTER TABLE operations DROP COLUMN {column}")
        conn.execute("DROP TABLE outbox")  # schema 7's
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    conn.close()


def _downgrade_postgres(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE contracts")
        conn.execute("DELETE FROM audit_records WHERE log_id LIKE '@contract/%'")
        conn.execute("DELETE FROM audit_checkpoints WHERE log_id LIKE '@contract/%'")
        for statement in _SCHEMA_8:
            conn.execute(statement.encode())
        conn.execute("DROP TABLE audit_heads")
        conn.execute("DROP TABLE audit_heads_pending")
        conn.execute("DROP INDEX operations_due_order")
        conn.execute(_SCHEMA_2_DUE_INDEX)
        conn.execute("ALTER TABLE operations DROP COLUMN watcher, DROP COLUMN watcher_since")
        conn.execute("DROP TABLE outbox")  # schema 7's
        conn.execute("DELETE FROM schema_migrations WHERE version > 2")


def _delete_heads(home: Path, db_args: tuple[str, ...]) -> None:
    if db_args:
        with psycopg.connect(db_args[1], autocommit=True) as pg:
            pg.execute("DELETE FROM audit_heads")
        return
    with sqlite3.connect(home / "pollwarden.db", isolation_level=None) as conn:
        conn.execute("DELETE FROM audit_heads")
    conn.close()


def test_a_schema_2_store_upgrades_and_its_first_head_covers_every_log(
    home: Path, contract: Path, db_args: tuple[str, ...]
) -> None:
    _watch(home, contract, "happy-1", "op-a", *db_args)
    _watch(home, contract, "happy-2", "op-b", *db_args)
    for operation in ("op-a", "op-b"):
        # Schema 2 signed a per-log checkpoint at each outcome; an export of one operation still signs one.
        out = home.parent / f"{operation}.jsonl"
        assert run_cli("audit", "export", *db_args, "--operation", operation, "--out", str(out), home=home).code == 0
    if db_args:
        _downgrade_postgres(db_args[1])
        refused = run_cli("audit", "checkpoint", *db_args, home=home)
        assert refused.code == 2 and "pollwarden db upgrade" in refused.stderr
        upgraded = run_cli("db", "upgrade", *db_args, home=home)
        applied = f"applied migrations {list(range(3, LATEST + 1))}"
        assert upgraded.code == 0 and applied in upgraded.stdout, upgraded.stdout
    else:
        _downgrade_sqlite(home / "pollwarden.db")  # SQLite upgrades itself when opened
    (home / "audit-head.checkpoint").unlink()  # schema 2 kept a per-log checkpoint there, not a head
    ran = run_cli("audit", "verify", *db_args, home=home)
    assert ran.code == 0, ran.stdout + ran.stderr
    assert "upgraded from schema 2" in ran.stdout
    code, report = _verify(home, *db_args)
    assert code == 0 and report["heads"] == 0
    signed = run_cli("audit", "checkpoint", *db_args, "--out", "-", home=home)
    assert signed.code == 0, signed.stderr
    head = json.loads(signed.stdout)
    assert head["head"]["logs"] == 2 and {log[0] for log in head["logs"]} == {"op-a", "op-b"}
    ran = run_cli("audit", "verify", *db_args, home=home)
    assert ran.code == 0 and "upgraded from schema 2" not in ran.stdout, ran.stdout
    assert _verify(home, *db_args)[1]["heads"] == 1
    # The mark is gone with the first head: deleting the heads now is tampering, not a store to re-cover.
    _delete_heads(home, db_args)
    code, report = _verify(home, *db_args)
    assert code == EXIT_TAMPERED
    assert {"op-a", "op-b"} <= {p["log_id"] for p in _problems(report)}


# -- the operations recipe in docs/audit.md, run as written ------------------------------------------

CRON_PREFIX = "# */5 * * * * "


def _recipe_blocks() -> tuple[list[str], str]:
    """The recipe's commands (the set-up lines and the mount cron line's command) and the later verify line."""
    text = (Path(__file__).parents[2] / "docs" / "audit.md").read_text()
    after = text.split("<!-- recipe:", 1)[1]
    blocks = after.split("```sh\n")[1:3]
    setup, later = (block.split("```", 1)[0].splitlines() for block in blocks)
    cron = [line.removeprefix(CRON_PREFIX) for line in setup if line.startswith(CRON_PREFIX)]
    commands = [line for line in setup if line and not line.startswith("#")]
    assert cron and commands and len(later) == 1
    return [cron[0], *commands], later[0]


def test_the_operations_recipe_works_as_written(home: Path, contract: Path, tmp_path: Path) -> None:
    """A local directory stands in for the other machine's volume mounted at /mnt/witness."""
    import os
    import subprocess
    import sys

    commands, verify_line = _recipe_blocks()
    other = tmp_path / "other-machine"
    other.mkdir()
    env = {
        **os.environ,
        "POLLWARDEN_HOME": str(home),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }

    def sh(line: str) -> subprocess.CompletedProcess[str]:
        literal = line.replace("/mnt/witness", str(other))
        return subprocess.run(["sh", "-c", literal], env=env, capture_output=True, text=True, timeout=60)

    _watch(home, contract, "happy-1", "op-a")
    for line in commands:
        done = sh(line)
        assert done.returncode == 0, (line, done.stderr)
    assert json.loads((other / "head.json").read_text())["format"] == "pollwarden-audit-head"
    assert (other / "signing.pub").exists() and not (other / "head.json.tmp").exists()
    _watch(home, contract, "happy-2", "op-b")
    done = sh(verify_line)
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(home / "pollwarden.db", isolation_level=None) as conn:
        conn.execute("DELETE FROM audit_records WHERE log_id = 'op-a'")
    conn.close()
    done = sh(verify_line)
    assert done.returncode == EXIT_TAMPERED and "log op-a" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("command", [("audit", "checkpoint"), ("audit", "export", "--out", "{tmp}/export.jsonl")])
def test_reading_the_log_of_a_home_that_has_none_creates_nothing(tmp_path: Path, command: tuple[str, ...]) -> None:
    home = tmp_path / "nowhere"
    ran = run_cli(*(word.format(tmp=tmp_path) for word in command), home=home)
    assert ran.code == 2 and "no audit log in" in ran.stderr and "Traceback" not in ran.stderr
    assert not home.exists() and not (tmp_path / "export.jsonl").exists()


def test_witness_locations_that_cannot_work_are_refused_and_nothing_is_saved(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for location, phrase in (
        ("relative/dir", "absolute path"),
        (str(tmp_path / "missing"), "is not a directory"),
        ("http://example.com/heads", "must be https://"),
        ("https://user:pw@example.com/heads", "no user, password"),
    ):
        ran = run_cli("audit", "witness", location, home=home)
        assert ran.code == 2 and phrase in ran.stderr, (location, ran.stderr)
        assert "pw" not in ran.stderr.replace(phrase, "")
    assert not (home / "audit-witness").exists()
    assert run_cli("audit", "witness", str(tmp_path), home=home).code == 0
    assert run_cli("audit", "witness", home=home).stdout.strip() == str(tmp_path)
    assert run_cli("audit", "witness", "--clear", home=home).code == 0
    assert run_cli("audit", "witness", home=home).stdout.strip() == "no witness configured"
