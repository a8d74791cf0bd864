"""Version 2 exports list each log's size and head in the header; the body must match them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pollwarden.audit import (
    AuditCipher,
    AuditRecord,
    ExportFormatError,
    LogHead,
    load_export,
    public_key_text,
    read_export,
    sign_checkpoint,
    write_export,
)
from pollwarden.audit.chain import GENESIS_HASH

from .conftest import Signer, build_log

EXPORTED_AT = "2025-03-01T13:00:00Z"


@pytest.fixture
def exported(tmp_path: Path, cipher: AuditCipher, signer: Signer) -> tuple[Path, list[AuditRecord]]:
    records = build_log(cipher, "op_a", 5) + build_log(cipher, "op_b", 3)
    signer.head(records[:5], 2)  # op_a is checkpointed only up to seq 2: its tail is the header's to guard
    signer.head(records[5:])
    path = tmp_path / "audit.jsonl"
    write_export(path, records, signer.issued, signer.public, exported_at=EXPORTED_AT)
    return path, records


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _log_of(line: str) -> str:
    log_id = json.loads(line).get("log_id")
    assert isinstance(log_id, str)
    return log_id


def test_the_header_lists_each_logs_size_and_head(exported: tuple[Path, list[AuditRecord]], signer: Signer) -> None:
    path, records = exported
    header = json.loads(lines_of(path)[0])
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
    contents = load_export(path)
    assert contents.version == 4
    assert contents.heads == {"op_a": LogHead(5, records[4].this_hash), "op_b": LogHead(3, records[7].this_hash)}
    assert contents.verify().ok


def test_a_log_only_checkpointed_and_empty_is_listed_with_no_records(tmp_path: Path, signer: Signer) -> None:
    path = tmp_path / "x.jsonl"
    empty = sign_checkpoint(signer.key, log_id="op_e", seq=0, head_hash=GENESIS_HASH, counter=1, at=EXPORTED_AT)
    write_export(path, [], [empty], signer.public, exported_at=EXPORTED_AT)
    assert json.loads(lines_of(path)[0])["logs"] == [{"log_id": "op_e", "records": 0, "head_hash": GENESIS_HASH}]
    assert load_export(path).verify().ok


def test_one_logs_lines_removed_while_the_header_still_lists_it(exported: tuple[Path, list[AuditRecord]]) -> None:
    path, _ = exported
    lines = lines_of(path)
    write_lines(path, [lines[0]] + [line for line in lines[1:] if _log_of(line) != "op_b"])
    report = load_export(path).verify()
    assert [(p.log_id, p.seq) for p in report.problems] == [("op_b", 1)]
    assert "the export header lists 3 records" in report.problems[0].what and "holds none" in report.problems[0].what


def test_a_log_cut_short_past_its_last_checkpoint(exported: tuple[Path, list[AuditRecord]]) -> None:
    path, _ = exported
    lines = lines_of(path)
    del lines[4:6]  # op_a records 4 and 5; its only checkpoint covers seq 2
    write_lines(path, lines)
    report = load_export(path).verify()
    assert [(p.log_id, p.seq) for p in report.problems] == [("op_a", 4)]
    assert "cut short" in report.problems[0].what and "records 4–5" in report.problems[0].what


def test_a_log_added_to_the_body(exported: tuple[Path, list[AuditRecord]], cipher: AuditCipher) -> None:
    path, _ = exported
    lines = lines_of(path)
    extra = path.with_name("extra.jsonl")
    write_export(extra, build_log(cipher, "op_c", 2), [], load_export(path).public_key, exported_at=EXPORTED_AT)
    added = lines_of(extra)[1:]
    write_lines(path, lines[:1] + added + lines[1:])
    report = load_export(path).verify()
    assert [(p.log_id, p.seq) for p in report.problems] == [("op_c", None)]
    assert "not in the export header" in report.problems[0].what


def test_records_added_to_a_log(exported: tuple[Path, list[AuditRecord]]) -> None:
    # Seen from the header's side: it lists 2 records of op_b, the body holds 3.
    path, _ = exported
    lines = lines_of(path)
    header = json.loads(lines[0])
    header["logs"][1]["records"] = 2
    lines[0] = json.dumps(header)
    write_lines(path, lines)
    report = load_export(path).verify()
    assert [(p.log_id, p.seq) for p in report.problems] == [("op_b", 3)]
    assert "the export header lists 2" in report.problems[0].what and "added" in report.problems[0].what


def test_a_rewritten_tail_of_the_same_size(exported: tuple[Path, list[AuditRecord]]) -> None:
    path, _ = exported
    lines = lines_of(path)
    header = json.loads(lines[0])
    header["logs"][0]["head_hash"] = "ab" * 32
    lines[0] = json.dumps(header)
    write_lines(path, lines)
    report = load_export(path).verify()
    assert [(p.log_id, p.seq) for p in report.problems] == [("op_a", 5)]
    assert "head" in report.problems[0].what


def test_a_version_1_export_verifies_as_before_and_says_it_has_no_sizes(
    exported: tuple[Path, list[AuditRecord]],
) -> None:
    path, _ = exported
    lines = lines_of(path)
    header = json.loads(lines[0])
    header["version"] = 1
    header["logs"] = ["op_a", "op_b"]
    # Today's exports: op_b's lines removed whole go unnoticed, exactly as they did.
    write_lines(path, [json.dumps(header)] + [line for line in lines[1:] if _log_of(line) != "op_b"])
    contents = load_export(path)
    assert contents.version == 1 and contents.heads is None
    assert contents.verify().ok
    assert len(read_export(path)[0]) == 5


@pytest.mark.parametrize(
    ("logs", "message"),
    [
        (["op_a", "op_b"], "field 'logs' must list objects"),
        ([{"log_id": "op_a", "records": 5}], "lacks 'head_hash'"),
        ([{"log_id": "", "records": 5, "head_hash": "00" * 32}], "'log_id' must be a non-empty string"),
        ([{"log_id": "op_a", "records": -1, "head_hash": "00" * 32}], "'records' must be a non-negative integer"),
        ([{"log_id": "op_a", "records": True, "head_hash": "00" * 32}], "'records' must be a non-negative integer"),
        ([{"log_id": "op_a", "records": 5, "head_hash": "XYZ"}], "'head_hash' must be 64 lowercase hex"),
        (
            [{"log_id": "op_a", "records": 5, "head_hash": "00" * 32}] * 2,
            "log 'op_a' is listed twice",
        ),
        ("op_a", "field 'logs' must be a list"),
    ],
)
def test_a_malformed_v2_header_names_line_1_and_the_field(
    exported: tuple[Path, list[AuditRecord]], logs: object, message: str
) -> None:
    path, _ = exported
    lines = lines_of(path)
    header = json.loads(lines[0])
    header["logs"] = logs
    lines[0] = json.dumps(header)
    write_lines(path, lines)
    with pytest.raises(ExportFormatError, match=f"line 1: .*{message}"):
        load_export(path)
