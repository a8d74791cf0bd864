from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from pollwarden.audit import (
    GENESIS_HASH,
    AuditCipher,
    AuditRecord,
    ExportFormatError,
    export,
    public_key_text,
    read_checkpoint_file,
    read_export,
    seal_record,
    verify,
    write_checkpoint_file,
    write_export,
)
from tests.conftest import endless_file

from .conftest import Signer, at_for, build_log

EXPORTED_AT = "2025-03-01T13:00:00Z"


@pytest.fixture
def exported(tmp_path: Path, cipher: AuditCipher, signer: Signer) -> tuple[Path, list[AuditRecord], Signer]:
    records = build_log(cipher, "op_a", 5) + build_log(cipher, "op_b", 3)
    signer.head(records[:5])
    signer.head(records[5:])
    path = tmp_path / "audit.jsonl"
    assert write_export(path, records, signer.issued, signer.public, exported_at=EXPORTED_AT) == 8
    return path, records, signer


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def test_round_trip(exported: tuple[Path, list[AuditRecord], Signer]) -> None:
    path, records, signer = exported
    read_records, read_cps, public = read_export(path)
    assert read_records == records
    assert read_cps == signer.issued
    assert public_key_text(public) == public_key_text(signer.public)
    assert verify(read_records, read_cps, public).ok


def test_file_layout(exported: tuple[Path, list[AuditRecord], Signer]) -> None:
    path, records, signer = exported
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    lines = lines_of(path)
    header = json.loads(lines[0])
    assert header == {
        "format": "pollwarden-audit-export",
        "version": 4,
        "exported_at": EXPORTED_AT,
        "public_key": public_key_text(signer.public),
        "logs": [
            {"log_id": "op_a", "records": 5, "head_hash": records[4].this_hash},
            {"log_id": "op_b", "records": 3, "head_hash": records[7].this_hash},
        ],
        "heads": 0,
    }
    first = json.loads(lines[1])
    assert first["type"] == "record"
    assert base64.b64decode(first["ciphertext"]) == records[0].ciphertext
    assert [json.loads(line)["type"] for line in lines[1:]] == ["record"] * 8 + ["checkpoint"] * 2
    assert sorted(p.name for p in path.parent.iterdir()) == ["audit.jsonl"]


def test_payload_plaintext_never_reaches_the_file(tmp_path: Path, cipher: AuditCipher, signer: Signer) -> None:
    secret = "sk-live-3b9f1d2a77"
    record = seal_record(
        cipher, log_id="op", seq=1, at=at_for(1), kind="call", prev_hash=GENESIS_HASH, payload={"token": secret}
    )
    path = tmp_path / "x.jsonl"
    write_export(path, [record], [signer.head([record])], signer.public, exported_at=EXPORTED_AT)
    raw = path.read_bytes()
    assert secret.encode() not in raw
    assert base64.b64encode(secret.encode()) not in raw


def test_flipped_ciphertext_in_the_file_is_pinned(exported: tuple[Path, list[AuditRecord], Signer]) -> None:
    path, _, _ = exported
    lines = lines_of(path)
    row = json.loads(lines[3])  # op_a record 3
    data = bytearray(base64.b64decode(row["ciphertext"]))
    data[20] ^= 0x01
    row["ciphertext"] = base64.b64encode(bytes(data)).decode()
    lines[3] = json.dumps(row)
    write_lines(path, lines)
    report = verify(*read_export(path))
    assert [(p.log_id, p.seq) for p in report.problems] == [("op_a", 3)]
    assert "hash mismatch" in report.problems[0].what


def test_deleted_record_line_is_pinned(exported: tuple[Path, list[AuditRecord], Signer]) -> None:
    path, _, _ = exported
    lines = lines_of(path)
    del lines[2]  # op_a record 2
    write_lines(path, lines)
    report = verify(*read_export(path))
    assert [(p.log_id, p.seq, p.what) for p in report.problems] == [
        ("op_a", 2, "record 2 missing: seq jumps from 1 to 3")
    ]


def test_tail_lines_removed_consistently_are_caught_by_the_checkpoint(
    exported: tuple[Path, list[AuditRecord], Signer],
) -> None:
    path, _, _ = exported
    lines = lines_of(path)
    del lines[4:6]  # op_a records 4 and 5, each a whole line
    write_lines(path, lines)
    report = verify(*read_export(path))
    assert [(p.log_id, p.seq) for p in report.problems] == [("op_a", 4)]
    assert "truncated" in report.problems[0].what


def test_torn_tail_without_newline(exported: tuple[Path, list[AuditRecord], Signer]) -> None:
    path, _, _ = exported
    raw = path.read_bytes()
    path.write_bytes(raw[:-1])  # every byte of the last line is there, only its newline is not
    total = raw.count(b"\n")
    with pytest.raises(ExportFormatError, match=f"torn tail at line {total}: the last line has no newline"):
        read_export(path)


def test_torn_tail_cut_mid_line(exported: tuple[Path, list[AuditRecord], Signer]) -> None:
    path, _, _ = exported
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) - 40])
    total = raw.count(b"\n")
    with pytest.raises(ExportFormatError, match=f"torn tail at line {total}"):
        read_export(path)


def test_last_line_with_newline_but_invalid_json_is_a_torn_tail(
    exported: tuple[Path, list[AuditRecord], Signer],
) -> None:
    path, _, _ = exported
    lines = lines_of(path)
    lines[-1] = lines[-1][:30]
    write_lines(path, lines)
    with pytest.raises(ExportFormatError, match=f"torn tail at line {len(lines)}"):
        read_export(path)


def test_invalid_json_in_the_middle_names_the_line(exported: tuple[Path, list[AuditRecord], Signer]) -> None:
    path, _, _ = exported
    lines = lines_of(path)
    lines[2] = lines[2][:-5]
    write_lines(path, lines)
    with pytest.raises(ExportFormatError, match="line 3: invalid JSON") as caught:
        read_export(path)
    assert "torn" not in str(caught.value)


@pytest.mark.parametrize(
    ("line_number", "mutate", "message"),
    [
        (1, lambda o: {**o, "format": "something-else"}, "line 1: not a pollwarden-audit-export"),
        (1, lambda o: {**o, "version": 5}, "line 1: unsupported version 5"),
        (1, lambda o: {**o, "version": 1.0}, "line 1: unsupported version 1.0"),
        (1, lambda o: {**o, "public_key": "AAAA"}, "line 1: field 'public_key' decodes to 3 bytes"),
        (2, lambda o: {**o, "type": "note"}, "line 2: unknown line type 'note'"),
        (2, lambda o: {k: v for k, v in o.items() if k != "this_hash"}, "line 2: record lacks field.*this_hash"),
        (2, lambda o: {**o, "seq": "1"}, "line 2: field 'seq' must be an integer"),
        (2, lambda o: {**o, "ciphertext": "!!"}, "line 2: field 'ciphertext' is not valid base64"),
        (2, lambda o: {**o, "kind": 5}, "line 2: field 'kind' must be a string"),
        (10, lambda o: {**o, "counter": -1}, "line 10: checkpoint field 'counter' must be a non-negative integer"),
    ],
)
def test_malformed_lines_name_the_line_and_problem(
    exported: tuple[Path, list[AuditRecord], Signer],
    line_number: int,
    mutate: object,
    message: str,
) -> None:
    path, _, _ = exported
    lines = lines_of(path)
    assert callable(mutate)
    lines[line_number - 1] = json.dumps(mutate(json.loads(lines[line_number - 1])))
    write_lines(path, lines)
    with pytest.raises(ExportFormatError, match=message):
        read_export(path)


def test_empty_and_missing_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(ExportFormatError, match="line 1: the file is empty"):
        read_export(empty)
    with pytest.raises(ExportFormatError, match="cannot read"):
        read_export(tmp_path / "missing.jsonl")


def test_failed_export_leaves_the_previous_file_and_no_temp_files(
    exported: tuple[Path, list[AuditRecord], Signer],
) -> None:
    path, records, signer = exported
    before = path.read_bytes()

    def broken() -> Iterator[AuditRecord]:
        yield records[0]
        raise RuntimeError("database went away")

    with pytest.raises(RuntimeError, match="database went away"):
        write_export(path, broken(), signer.issued, signer.public, exported_at=EXPORTED_AT)
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["audit.jsonl"]


def test_checkpoint_file_round_trip_and_rollback(
    tmp_path: Path, exported: tuple[Path, list[AuditRecord], Signer]
) -> None:
    path, records, signer = exported
    kept = tmp_path / "audit.checkpoint.json"
    write_checkpoint_file(kept, signer.issued[-1])
    trusted = read_checkpoint_file(kept)
    assert trusted == signer.issued[-1]
    assert json.loads(kept.read_text())["format"] == "pollwarden-audit-checkpoint"
    assert verify(*read_export(path), trusted_checkpoint=trusted).ok

    # The log grows and is checkpointed again elsewhere; then the old export comes back.
    newer = signer.head(records[5:])
    write_checkpoint_file(kept, newer)
    report = verify(*read_export(path), trusted_checkpoint=read_checkpoint_file(kept))
    assert [p.log_id for p in report.problems] == ["op_b"]
    assert f"rollback: the log is older than checkpoint #{newer.counter} kept elsewhere" in report.problems[0].what


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "invalid JSON"),
        ('{"format": "other", "version": 1}', "not a pollwarden-audit-checkpoint"),
        ('{"format": "pollwarden-audit-checkpoint", "version": 1, "seq": 1}', "lacks field"),
    ],
)
def test_bad_checkpoint_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "cp.json"
    path.write_text(content)
    with pytest.raises(ExportFormatError, match=message):
        read_checkpoint_file(path)


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_export_verifies_in_a_fresh_process_with_no_keys_at_all(
    exported: tuple[Path, list[AuditRecord], Signer], tmp_path: Path
) -> None:
    path, _, _ = exported
    script = (
        "import sys; from pathlib import Path; from pollwarden.audit import read_export, verify\n"
        "report = verify(*read_export(Path(sys.argv[1])))\n"
        "print(report.ok, report.records, report.checkpoints)\n"
    )
    empty_home = tmp_path / "empty-home"
    empty_home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLLWARDEN_")}
    env["POLLWARDEN_HOME"] = str(empty_home)
    env["HOME"] = str(empty_home)
    result = subprocess.run(
        [sys.executable, "-c", script, str(path)], env=env, capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.split() == ["True", "8", "2"]
    assert list(empty_home.iterdir()) == []


def test_export_under_another_key_fails_against_a_pinned_checkpoint(
    tmp_path: Path, exported: tuple[Path, list[AuditRecord], Signer], cipher: AuditCipher
) -> None:
    # A forger rewrites the whole export with a fresh signing key: self-consistent, but not against the
    # checkpoint kept elsewhere.
    path, _, signer = exported
    trusted = signer.issued[0]
    forger = Signer(Ed25519PrivateKey.generate())
    forged = build_log(cipher, "op_a", 5)
    forger.head(forged)
    write_export(path, forged, forger.issued, forger.public, exported_at=EXPORTED_AT)
    assert verify(*read_export(path)).ok
    report = verify(*read_export(path), trusted_checkpoint=trusted)
    assert not report.ok
    assert "the log's key was replaced" in report.problems[0].what


def test_an_export_or_a_kept_file_that_never_ends_is_refused_after_a_bounded_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `audit verify --file /dev/zero` (or `--checkpoint /dev/zero`) read one endless line until memory ran out.
    monkeypatch.setattr(export, "MAX_LINE_BYTES", 1 << 20)
    monkeypatch.setattr(export, "MAX_KEPT_FILE_BYTES", 1 << 20)
    endless = endless_file(tmp_path / "export.jsonl", 1 << 20)
    with endless as wrote_all, pytest.raises(ExportFormatError, match="line 1: longer than 1048576 bytes"):
        read_export(tmp_path / "export.jsonl")
    assert not wrote_all.is_set()
    endless = endless_file(tmp_path / "head.json", 1 << 20)
    with endless as wrote_all, pytest.raises(ExportFormatError, match=r"checkpoint file .* is larger than 1048576"):
        read_checkpoint_file(tmp_path / "head.json")
    assert not wrote_all.is_set()


def test_an_export_that_fails_to_read_midway_is_a_format_error_naming_it() -> None:
    # Reading /proc/self/mem from its start fails with EIO once open: that was a traceback.
    with pytest.raises(ExportFormatError, match="cannot read /proc/self/mem"):
        read_export(Path("/proc/self/mem"))
