"""Every tamper issue 12 lists, done as an operator with file access would, on SQLite and on PostgreSQL.

Each starts from a copy of one store written by real watches (a copied SQLite file and home; a PostgreSQL
database made with `CREATE DATABASE ... TEMPLATE`, which copies it in milliseconds), tampers with it with
plain SQL and file operations (no key is needed for any of them), and runs `audit verify` through the CLI.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from pollwarden.simulator import Simulator
from tests.conftest import run_cli, write_contract
from tests.e2e.places import EXIT_TAMPERED, Place, _clone_database, _roll_back, _watch
from tests.store.conftest import create_database, drop_database

pytestmark = pytest.mark.slow


def _problem_logs(report: dict[str, object]) -> set[str]:
    problems = report["problems"]
    assert isinstance(problems, list)
    return {str(p["log_id"]) for p in problems}


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Place]]:
    """Per backend, a home and store with two operations (op-a, op-b), each checkpointed at its outcome."""
    base = tmp_path_factory.mktemp("tamper")
    made = {"sqlite": Place(base / "sqlite-home"), "postgres": Place(base / "pg-home", create_database(upgraded=True))}
    try:
        with Simulator() as sim:
            contract = write_contract(base / "c.toml", sim.url)
            for place in made.values():
                place.home.mkdir()
                _watch(place, contract, "flaky-1", "op-a")
                _watch(place, contract, "bad_hint-1", "op-b")
                code, report = place.verify()
                assert code == 0 and report["logs"] == 3, report  # and the installed contract's
        yield made
    finally:
        if made["postgres"].url:
            drop_database(made["postgres"].url)


@pytest.fixture(params=["sqlite", "postgres"])
def place(request: pytest.FixtureRequest, templates: dict[str, Place], tmp_path: Path) -> Iterator[Place]:
    """A private copy of the template store, so each tamper starts from the same intact log."""
    template = templates[request.param]
    home = tmp_path / "home"
    shutil.copytree(template.home, home)
    copy = Place(home, _clone_database(template.url) if template.url else None)
    try:
        yield copy
    finally:
        if copy.url:
            drop_database(copy.url)


def test_a_whole_operations_log_deleted_is_caught(place: Place) -> None:
    for table, column in (
        ("audit_records", "log_id"),
        ("audit_checkpoints", "log_id"),
        ("decisions", "operation_id"),
        ("operations", "operation_id"),
    ):
        place.execute(f"DELETE FROM {table} WHERE {column} = ?", "op-a")
    code, report = place.verify()
    assert code == EXIT_TAMPERED
    assert "op-a" in _problem_logs(report)
    code, text, _ = place.run("audit", "verify")
    assert code == EXIT_TAMPERED and "log op-a" in text


def test_a_log_cut_to_its_first_records_with_its_checkpoints_deleted_is_caught(place: Place) -> None:
    place.execute("DELETE FROM audit_records WHERE log_id = ? AND seq > 3", "op-b")
    place.execute("DELETE FROM audit_checkpoints WHERE log_id = ?", "op-b")
    code, report = place.verify()
    assert code == EXIT_TAMPERED
    assert _problem_logs(report) == {"op-b"}


def test_every_head_and_checkpoint_deleted_and_the_head_file_removed_is_caught(place: Place) -> None:
    place.execute("DELETE FROM audit_heads")
    place.execute("DELETE FROM audit_checkpoints")
    (place.home / "audit-head.checkpoint").unlink()
    code, report = place.verify()
    assert code == EXIT_TAMPERED
    # Nothing is left to say which head is missing, so each log is named with the records no head covers.
    problems = report["problems"]
    assert isinstance(problems, list)
    named = {p["log_id"] for p in problems}
    assert {log for log in named if not log.startswith("@contract/")} == {"op-a", "op-b"}
    assert len(named) == 3  # and the installed contract's log
    assert all("no signed head covers them" in p["what"] for p in problems)


@pytest.mark.parametrize("heads_too", [False, True], ids=["log-lines", "log-and-head-lines"])
def test_an_export_with_one_logs_lines_removed_is_caught(place: Place, tmp_path: Path, heads_too: bool) -> None:
    out = tmp_path / "export.jsonl"
    code, _, err = place.run("audit", "export", "--out", str(out))
    assert code == 0, err
    lines = out.read_text().splitlines()
    header = json.loads(lines[0])
    assert "op-a" in [entry["log_id"] for entry in header["logs"]]  # the header still lists it
    kept = [lines[0]]
    for line in lines[1:]:
        item = json.loads(line)
        if item.get("log_id") == "op-a" or (heads_too and item["type"] == "head"):
            continue
        kept.append(line)
    out.write_text("".join(line + "\n" for line in kept))
    (tmp_path / "export.jsonl.checkpoint").unlink()  # whoever edits the export removes the head beside it
    empty = tmp_path / "empty"
    empty.mkdir()
    ran = run_cli("audit", "verify", "--json", "--file", str(out), home=empty)
    assert ran.code == EXIT_TAMPERED, ran.stdout + ran.stderr
    assert "op-a" in _problem_logs(json.loads(ran.stdout))


# -- a rollback of the database and the home's head file together ---------------------------------


def test_a_rollback_of_the_database_and_the_head_file_is_caught_by_a_witness(
    fresh: Place, sim: Simulator, tmp_path: Path
) -> None:
    witness = tmp_path / "witness"
    witness.mkdir()
    code, _, err = fresh.run("audit", "witness", str(witness))
    assert code == 0, err
    _roll_back(fresh, sim, tmp_path)
    code, report = fresh.verify()
    assert code == EXIT_TAMPERED
    assert "rollback" in json.dumps(report["problems"]) and str(witness) in str(report["trusted_checkpoint"])


def _pinned_sentence() -> str:
    """The quoted sentence of the test below, as the docs must hold it."""
    doc = test_a_rollback_of_the_database_and_the_head_file_without_a_witness_is_not_detected.__doc__ or ""
    return next(part for part in doc.split("\n\n") if part.strip().startswith('"')).strip().strip('"')


def test_a_rollback_of_the_database_and_the_head_file_without_a_witness_is_not_detected(
    fresh: Place, sim: Simulator, tmp_path: Path
) -> None:
    """docs/audit.md, "What verify cannot detect", says so:

    "Without a witness, a rollback of the database together with `audit-head.checkpoint` is not detected:
    both sit in the same directory, and the older pair is a consistent, validly signed history."

    This test pins that statement; if verify ever catches it, the docs must say so instead.
    """
    docs = " ".join((Path(__file__).parents[2] / "docs" / "audit.md").read_text().split())
    assert " ".join(str(_pinned_sentence()).split()) in docs
    _roll_back(fresh, sim, tmp_path)
    code, report = fresh.verify()
    assert code == 0 and report["ok"] is True
    assert report["logs"] == 2  # the one operation and the contract its watch installed
