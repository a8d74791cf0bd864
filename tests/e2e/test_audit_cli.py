"""The audit log end to end: written by real watches, tampered with in the real SQLite file, verified by the CLI."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from pollwarden import events as ev
from pollwarden.simulator import Simulator
from tests.conftest import run_cli, write_contract

EXIT_TAMPERED = 5


@pytest.fixture(scope="module")
def template_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two operations with a few dozen records between them, all checkpointed at their outcome."""
    base = tmp_path_factory.mktemp("audit")
    home = base / "home"
    with Simulator() as sim:
        contract = write_contract(base / "c.toml", sim.url)
        for op, job in (("op-a", "flaky-1"), ("op-b", "bad_hint-1")):
            ran = run_cli("watch", "--contract", str(contract), "--job", job, "--operation", op, home=home)
            assert ran.code == 0, ran.stderr
    return home


@pytest.fixture
def audited_home(template_home: Path, tmp_path: Path) -> Path:
    """A private copy per test, so each tamper starts from the same intact log."""
    home = tmp_path / "audited"
    shutil.copytree(template_home, home)
    return home


def _db(home: Path) -> sqlite3.Connection:
    return sqlite3.connect(home / "pollwarden.db", isolation_level=None)


def _verify(home: Path, *extra: str) -> tuple[int, dict[str, object]]:
    ran = run_cli("audit", "verify", "--json", *extra, home=home)
    assert "Traceback" not in ran.stderr
    assert ran.code in (0, EXIT_TAMPERED), ran.stderr
    report: dict[str, object] = json.loads(ran.stdout)
    return ran.code, report


def _first_problem(report: dict[str, object]) -> dict[str, object]:
    problems = report["problems"]
    assert isinstance(problems, list) and problems
    first: dict[str, object] = problems[0]
    return first


def test_intact_log_verifies(audited_home: Path) -> None:
    code, report = _verify(audited_home)
    assert code == 0
    assert report["ok"] is True
    assert report["logs"] == 3  # two operations and the contract their watches installed
    assert isinstance(report["records"], int) and report["records"] > 15


def test_flipped_ciphertext_byte(audited_home: Path) -> None:
    with _db(audited_home) as conn:
        blob = bytearray(
            conn.execute("SELECT ciphertext FROM audit_records WHERE log_id='op-a' AND seq=3").fetchone()[0]
        )
        blob[20] ^= 0x01
        conn.execute("UPDATE audit_records SET ciphertext=? WHERE log_id='op-a' AND seq=3", (bytes(blob),))
    code, report = _verify(audited_home)
    assert code == EXIT_TAMPERED
    problem = _first_problem(report)
    assert problem["log_id"] == "op-a" and problem["seq"] == 3
    assert "modified" in str(problem["what"])


def test_changed_hash(audited_home: Path) -> None:
    with _db(audited_home) as conn:
        conn.execute("UPDATE audit_records SET this_hash=? WHERE log_id='op-b' AND seq=2", ("ab" * 32,))
    code, report = _verify(audited_home)
    assert code == EXIT_TAMPERED
    problem = _first_problem(report)
    assert (problem["log_id"], problem["seq"]) == ("op-b", 2)
    assert "hash" in str(problem["what"])


def test_dropped_record(audited_home: Path) -> None:
    with _db(audited_home) as conn:
        conn.execute("DELETE FROM audit_records WHERE log_id='op-a' AND seq=4")
    code, report = _verify(audited_home)
    assert code == EXIT_TAMPERED
    problem = _first_problem(report)
    assert problem["seq"] == 4 and "missing" in str(problem["what"])


def test_swapped_records(audited_home: Path) -> None:
    with _db(audited_home) as conn:
        conn.execute("UPDATE audit_records SET seq=-1 WHERE log_id='op-a' AND seq=3")
        conn.execute("UPDATE audit_records SET seq=3 WHERE log_id='op-a' AND seq=4")
        conn.execute("UPDATE audit_records SET seq=4 WHERE log_id='op-a' AND seq=-1")
    code, report = _verify(audited_home)
    assert code == EXIT_TAMPERED
    assert _first_problem(report)["seq"] == 3


def test_spliced_from_another_operations_log(audited_home: Path) -> None:
    with _db(audited_home) as conn:
        row = conn.execute(
            "SELECT at, kind, prev_hash, ciphertext, this_hash FROM audit_records WHERE log_id='op-b' AND seq=5"
        ).fetchone()
        conn.execute(
            "UPDATE audit_records SET at=?, kind=?, prev_hash=?, ciphertext=?, this_hash=?"
            " WHERE log_id='op-a' AND seq=5",
            row,
        )
    code, report = _verify(audited_home)
    assert code == EXIT_TAMPERED
    problem = _first_problem(report)
    assert (problem["log_id"], problem["seq"]) == ("op-a", 5)
    assert "op-b" in str(problem["what"])


def test_cut_tail_is_caught_by_the_checkpoint(audited_home: Path) -> None:
    with _db(audited_home) as conn:
        last = conn.execute("SELECT MAX(seq) FROM audit_records WHERE log_id='op-a'").fetchone()[0]
        conn.execute("DELETE FROM audit_records WHERE log_id='op-a' AND seq >= ?", (last - 2,))
    code, report = _verify(audited_home)
    assert code == EXIT_TAMPERED
    assert "truncated" in str(_first_problem(report)["what"])


def test_rollback_to_an_older_valid_log_is_caught(sim: Simulator, audited_home: Path, tmp_path: Path) -> None:
    older = tmp_path / "older.db"
    shutil.copy(audited_home / "pollwarden.db", older)
    contract = write_contract(tmp_path / "c2.toml", sim.url)
    assert (
        run_cli("watch", "--contract", str(contract), "--job", "happy-3", "--operation", "op-c", home=audited_home).code
        == 0
    )
    assert _verify(audited_home)[0] == 0
    # Put the older, internally valid database back; the checkpoint kept beside it is newer.
    for suffix in ("-wal", "-shm"):
        (audited_home / f"pollwarden.db{suffix}").unlink(missing_ok=True)
    shutil.copy(older, audited_home / "pollwarden.db")
    code, report = _verify(audited_home)
    assert code == EXIT_TAMPERED
    assert any("rollback" in str(p["what"]) for p in report["problems"])  # type: ignore[attr-defined]


def test_export_verifies_on_an_empty_machine_and_detects_tamper(audited_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "export.jsonl"
    ran = run_cli("audit", "export", "--out", str(out), "--operation", "op-a", home=audited_home)
    assert ran.code == 0, ran.stderr
    assert (tmp_path / "export.jsonl.checkpoint").exists()
    empty = tmp_path / "empty-home"
    empty.mkdir()
    ran = run_cli("audit", "verify", "--file", str(out), home=empty, env={"HOME": str(empty)})
    assert ran.code == 0, ran.stdout + ran.stderr
    assert list(empty.iterdir()) == [], "verifying must not create keys or files"
    lines = out.read_text().splitlines()
    record = json.loads(lines[3])
    record["kind"] = "tampered"
    lines[3] = json.dumps(record)
    out.write_text("\n".join(lines) + "\n")
    ran = run_cli("audit", "verify", "--file", str(out), home=empty)
    assert ran.code == EXIT_TAMPERED and "record" in ran.stdout


def test_torn_export_is_named_and_repaired(audited_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "export.jsonl"
    assert run_cli("audit", "export", "--out", str(out), home=audited_home).code == 0
    data = out.read_bytes()
    out.write_bytes(data[: len(data) - 40])  # a copy cut off mid-line
    ran = run_cli("audit", "verify", "--file", str(out), home=audited_home)
    assert ran.code == 2 and "torn tail" in ran.stderr
    ran = run_cli("audit", "repair", "--file", str(out), home=audited_home)
    assert ran.code == 0 and "removed a torn last line" in ran.stdout
    # The cut removed the last checkpoint line; the rest still verifies against the checkpoint kept aside.
    ran = run_cli("audit", "verify", "--file", str(out), home=audited_home)
    assert ran.code in (0, EXIT_TAMPERED)
    assert "torn" not in ran.stderr


def test_verify_needs_no_decryption_key_but_story_does(audited_home: Path) -> None:
    (audited_home / "keys" / "audit.key").unlink()
    (audited_home / "keys" / "signing.key").unlink()
    assert _verify(audited_home)[0] == 0
    ran = run_cli("story", "op-a", home=audited_home)
    assert ran.code == 2 and "audit" in ran.stderr and "Traceback" not in ran.stderr


def test_why_replays_every_decision_the_same(audited_home: Path) -> None:
    # R44, R46: every decision recorded with its inputs, and reconstructed by `why`.
    story = json.loads(run_cli("story", "op-b", "--json", home=audited_home).stdout)
    decisions = [e["seq"] for e in story if e["kind"] == "decision"]
    assert len(decisions) >= 3
    for seq in decisions:
        ran = run_cli("why", "op-b", "--seq", str(seq), "--json", home=audited_home)
        assert ran.code == 0, ran.stderr
        explanation = json.loads(ran.stdout)
        assert explanation["same_today"] is True, explanation["differences"]
        assert explanation["inputs"]["observation"]["http_status"] == 200
    text = run_cli("why", "op-b", home=audited_home).stdout
    assert "rule 'success_validated'" in text and "today's core decides the same" in text
    bad = run_cli("why", "op-b", "--seq", "1", home=audited_home)
    assert bad.code == 2 and "is not a decision" in bad.stderr


def test_why_detects_a_decision_todays_core_would_not_make(audited_home: Path) -> None:
    """Re-encrypting a doctored decision needs the key; a key holder's lie is still caught by the replay."""
    from pollwarden.audit import load_or_create_keys
    from pollwarden.store.sqlite import SQLiteStore

    store = SQLiteStore(audited_home / "pollwarden.db", keys=load_or_create_keys(audited_home))
    try:
        events = store.events("op-a")
        decision = next(e for e in events if e.kind == "decision" and e.data["action"] == "wait")
        doctored = {**decision.data, "delay_source": "provider_poll_hint"}
        store.append("op-x-doctored", ev.DecisionEvent.prepared(doctored), decision.at)
    finally:
        store.close()
    with _db(audited_home) as conn:
        conn.execute(
            "INSERT INTO operations SELECT 'op-x-doctored', job_id, contract_name, phase, next_poll_at, deadline_at,"
            " status_requests_used, max_status_requests, record, contract, NULL, 0, NULL, created_at, updated_at,"
            " NULL, NULL, NULL, NULL"
            " FROM operations WHERE operation_id = 'op-a'"
        )
    ran = run_cli("why", "op-x-doctored", "--json", home=audited_home)
    assert ran.code == 0, ran.stderr
    explanation = json.loads(ran.stdout)
    assert explanation["same_today"] is False
    assert any(d.startswith("delay_source") for d in explanation["differences"])


# -- key pinning (--public-key) -------------------------------------------------------------------


def _other_public_key(tmp_path: Path) -> Path:
    from pollwarden.audit import public_key_text

    path = tmp_path / "other.pub"
    path.write_text(public_key_text(Ed25519PrivateKey.generate().public_key()) + "\n")
    return path


def _secrets_of(home: Path) -> list[str]:
    keys = home / "keys"
    return [(keys / name).read_text().strip() for name in ("signing.key", "audit.key")]


def test_the_pinned_key_verifies_the_store_and_an_export(audited_home: Path, tmp_path: Path) -> None:
    pub = audited_home / "keys" / "signing.pub"
    code, report = _verify(audited_home, "--public-key", str(pub))
    assert code == 0 and report["pinned_key"] == _key_id(pub)
    out = tmp_path / "export.jsonl"
    assert run_cli("audit", "export", "--out", str(out), home=audited_home).code == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    ran = run_cli("audit", "verify", "--file", str(out), "--public-key", str(pub), home=empty)
    assert ran.code == 0, ran.stdout + ran.stderr
    assert f"pinned key {_key_id(pub)}" in ran.stdout


def _key_id(pub: Path) -> str:
    from pollwarden.audit import key_id_of, read_public_key_file

    return key_id_of(read_public_key_file(pub))


def test_a_store_signed_by_another_key_is_not_the_pinned_one(audited_home: Path, tmp_path: Path) -> None:
    other = _other_public_key(tmp_path)
    ran = run_cli("audit", "verify", "--public-key", str(other), home=audited_home)
    assert ran.code == EXIT_TAMPERED, ran.stdout + ran.stderr
    assert "not the pinned key" in ran.stdout
    assert _key_id(audited_home / "keys" / "signing.pub") in ran.stdout and _key_id(other) in ran.stdout
    for secret in _secrets_of(audited_home):
        assert secret not in ran.stdout + ran.stderr


def test_an_export_signed_by_another_key_is_not_the_pinned_one(audited_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "export.jsonl"
    assert run_cli("audit", "export", "--out", str(out), home=audited_home).code == 0
    other = _other_public_key(tmp_path)
    ran = run_cli("audit", "verify", "--json", "--file", str(out), "--public-key", str(other), home=tmp_path)
    assert ran.code == EXIT_TAMPERED, ran.stdout + ran.stderr
    report = json.loads(ran.stdout)
    assert report["pinned_key"] == _key_id(other)
    assert any("not the pinned key" in p["what"] for p in report["problems"])
    for secret in _secrets_of(audited_home):
        assert secret not in ran.stdout + ran.stderr


@pytest.mark.parametrize(
    ("content", "phrase"),
    [(None, "cannot read"), (b"hello\n", "not valid base64"), (b"AAAA\n", "decodes to 3 bytes")],
)
@pytest.mark.parametrize("with_file", [False, True])
def test_a_bad_public_key_file_is_a_usage_error_naming_it(
    audited_home: Path, tmp_path: Path, content: bytes | None, phrase: str, with_file: bool
) -> None:
    key = tmp_path / "pinned.pub"
    if content is not None:
        key.write_bytes(content)
    extra: tuple[str, ...] = ()
    if with_file:
        out = tmp_path / "export.jsonl"
        assert run_cli("audit", "export", "--out", str(out), home=audited_home).code == 0
        extra = ("--file", str(out))
    ran = run_cli("audit", "verify", *extra, "--public-key", str(key), home=audited_home)
    assert ran.code == 2, ran.stdout + ran.stderr
    assert str(key) in ran.stderr and phrase in ran.stderr and "signing.pub" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_the_private_signing_key_given_as_the_pinned_key_is_refused(audited_home: Path) -> None:
    private = audited_home / "keys" / "signing.key"
    ran = run_cli("audit", "verify", "--public-key", str(private), home=audited_home)
    assert ran.code == 2 and "private signing key" in ran.stderr and "signing.pub" in ran.stderr
    assert private.read_text().strip() not in ran.stdout + ran.stderr


# -- exports carry each log's size and head ---------------------------------------------------------


def _export(home: Path, tmp_path: Path, *only: str) -> tuple[Path, list[str]]:
    out = tmp_path / "export.jsonl"
    ran = run_cli("audit", "export", "--out", str(out), *only, home=home)
    assert ran.code == 0, ran.stderr
    return out, out.read_text().splitlines()


def _verify_file(out: Path, home: Path) -> tuple[int, dict[str, object], str]:
    ran = run_cli("audit", "verify", "--json", "--file", str(out), home=home)
    assert ran.code in (0, EXIT_TAMPERED), ran.stderr
    text = run_cli("audit", "verify", "--file", str(out), home=home).stdout
    report: dict[str, object] = json.loads(ran.stdout)
    return ran.code, report, text


def _write(out: Path, lines: list[str]) -> None:
    out.write_text("".join(line + "\n" for line in lines))


def test_an_export_with_one_logs_lines_removed_is_caught(audited_home: Path, tmp_path: Path) -> None:
    out, lines = _export(audited_home, tmp_path)
    _write(out, lines[:1] + [line for line in lines[1:] if json.loads(line).get("log_id") != "op-b"])
    (tmp_path / "export.jsonl.checkpoint").unlink()  # whoever holds the files removes that one too
    code, report, text = _verify_file(out, audited_home)
    assert code == EXIT_TAMPERED
    problem = _first_problem(report)
    assert problem["log_id"] == "op-b" and "holds none" in str(problem["what"])
    assert "log op-b" in text


def test_an_export_with_a_log_cut_short_is_caught(audited_home: Path, tmp_path: Path) -> None:
    out, lines = _export(audited_home, tmp_path)
    op_a = [i for i, line in enumerate(lines) if i and json.loads(line).get("log_id") == "op-a"]
    records = [i for i in op_a if json.loads(lines[i])["type"] == "record"]
    # The last two records and every checkpoint of op-a go: no checkpoint in the file shows the cut.
    drop = set(records[-2:]) | {i for i in op_a if json.loads(lines[i])["type"] == "checkpoint"}
    _write(out, [line for i, line in enumerate(lines) if i not in drop])
    (tmp_path / "export.jsonl.checkpoint").unlink()  # and no checkpoint kept beside it either
    code, report, _ = _verify_file(out, audited_home)
    assert code == EXIT_TAMPERED
    problem = _first_problem(report)
    # The export's own signed heads show the cut first; its header's sizes would too (heads removed as well).
    assert problem["log_id"] == "op-a" and "truncated" in str(problem["what"])


def test_an_export_with_a_log_added_is_caught(audited_home: Path, tmp_path: Path) -> None:
    # An intact, validly signed log from the same store in the body, that the header does not list.
    out, lines = _export(audited_home, tmp_path)
    header = json.loads(lines[0])
    header["logs"] = [entry for entry in header["logs"] if entry["log_id"] != "op-b"]
    _write(out, [json.dumps(header), *lines[1:]])
    code, report, _ = _verify_file(out, audited_home)
    assert code == EXIT_TAMPERED
    problem = _first_problem(report)
    assert problem["log_id"] == "op-b" and "not in the export header" in str(problem["what"])


def test_an_export_written_today_without_sizes_verifies_as_before_and_says_so(
    audited_home: Path, tmp_path: Path
) -> None:
    # Exports of one operation still carry its per-log checkpoint, as every export did before signed heads.
    out, lines = _export(audited_home, tmp_path, "--operation", "op-a")
    header = json.loads(lines[0])
    header["version"] = 1
    header["logs"] = [entry["log_id"] for entry in header["logs"]]
    del header["heads"]
    _write(out, [json.dumps(header, separators=(",", ":")), *lines[1:]])
    code, report, text = _verify_file(out, audited_home)
    assert code == 0 and report["ok"] is True
    assert "the header carries no log sizes" in text
    assert any("no log sizes" in note for note in report["notes"])  # type: ignore[attr-defined]
