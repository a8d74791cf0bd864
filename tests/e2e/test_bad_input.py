"""Bad input: a clear one-line error naming what was wrong, exit 2, no traceback, nothing changed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from pollwarden.simulator import Simulator
from tests.conftest import run_cli, write_contract


def _assert_usage(ran_code: int, stderr: str, *phrases: str) -> None:
    assert ran_code == 2, stderr
    assert "Traceback" not in stderr
    for phrase in phrases:
        assert phrase in stderr, (phrase, stderr)


def test_missing_contract_file(home: Path, tmp_path: Path) -> None:
    ran = run_cli("watch", "--contract", str(tmp_path / "nope.toml"), "--job", "j", home=home)
    _assert_usage(ran.code, ran.stderr, "nope.toml does not exist")


@pytest.mark.parametrize(
    ("edit", "phrase"),
    [
        (lambda t: t.replace('base_delay = "100ms"', 'base_delay = "fast"'), "[schedule].base_delay"),
        (lambda t: t + "\n[bogus]\nx = 1\n", "bogus: unknown key"),
        (lambda t: t.replace('state = "state"', "state = 5"), "[fields].state: must be a string"),
        (lambda t: t.replace('name = "exports"\n', ""), "name: required key is missing"),
        (lambda t: t.replace("max_requests = 12", 'max_requests = "12"'), "[limits].max_requests"),
        (lambda t: t.replace("[states]", "[states\n"), "not valid TOML"),
        (lambda t: t.replace('failure = ["failed"]', 'failure = ["running"]'), "listed under both"),
        (
            lambda t: t.replace('base_delay = "100ms"', 'base_delay = "100ms"\nlag_target = "-3s"'),
            "[schedule].lag_target",
        ),
        (lambda t: t.replace('base_delay = "100ms"', 'base_delay = "100ms"\nlearn = "yes"'), "[schedule].learn"),
        (
            lambda t: t.replace('base_delay = "100ms"', 'base_delay = "100ms"\nlearn_key = "model[?"'),
            "[schedule].learn_key: 'model[?' is not a JMESPath expression",
        ),
        (lambda t: t.replace('base_delay = "100ms"', 'base_delay = "100ms"\nlearn_key = 7'), "[schedule].learn_key"),
        (
            lambda t: t.replace('state = "state"', 'state = "state"\nestimated_completion_at = "eta["'),
            "[fields].estimated_completion_at",
        ),
    ],
)
def test_bad_contract_names_the_key(edit: object, phrase: str, sim: Simulator, home: Path, tmp_path: Path) -> None:
    path = write_contract(tmp_path / "c.toml", sim.url)
    assert callable(edit)
    path.write_text(edit(path.read_text()))
    ran = run_cli("watch", "--contract", str(path), "--job", "happy-1", home=home)
    _assert_usage(ran.code, ran.stderr, phrase)
    assert sim.requests() == []


@pytest.mark.parametrize(
    ("flags", "phrase"),
    [
        (("--deadline", "soon"), "--deadline: cannot read duration 'soon'"),
        (("--base-delay", "0s"), "--base-delay: must be longer than zero"),
        (("--max-requests", "many"), "must be a whole number"),
        (("--operation", "../etc"), "--operation ../etc: use 1-128 letters"),
        (("--max-requests", "0"), "--max-requests: must be a whole number from 1"),
        (("--max-transport-failures", "0"), "--max-transport-failures: must be a whole number from 1"),
        (("--job", ""), "--job must be the provider's job id"),
        (("--useful-for", "2h", "--deadline", "1h"), "--useful-for 2h is longer than the deadline 1h"),
        (("--useful-for", "3h"), "--useful-for 3h is longer than the deadline 1m"),  # the contract's deadline
        (("--lag-target", "-3s"), "--lag-target: "),
        (("--lag-target", "0s"), "--lag-target: must be longer than zero"),
    ],
)
def test_bad_flags(flags: tuple[str, ...], phrase: str, sim: Simulator, home: Path, tmp_path: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    ran = run_cli("watch", "--contract", str(contract), "--job", "happy-1", *flags, home=home)
    _assert_usage(ran.code, ran.stderr, phrase)
    assert sim.requests() == []


def test_unsafe_status_endpoint_is_refused(sim: Simulator, home: Path, tmp_path: Path) -> None:
    # R22: a status request not declared safe to repeat is refused.
    path = write_contract(tmp_path / "c.toml", sim.url)
    path.write_text(path.read_text().replace("safe_status = true", "safe_status = false"))
    ran = run_cli("watch", "--contract", str(path), "--job", "happy-1", home=home)
    _assert_usage(ran.code, ran.stderr, "safe_status = false")
    assert sim.requests() == []


def test_missing_secret_is_named_not_guessed(sim: Simulator, home: Path, tmp_path: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url, secret_env="PW_TEST_TOKEN_UNSET")
    ran = run_cli("watch", "--contract", str(contract), "--job", "happy-1", home=home)
    _assert_usage(ran.code, ran.stderr, "PW_TEST_TOKEN_UNSET")


def _record(home: Path, operation: str) -> dict[str, object]:
    ran = run_cli("status", operation, "--json", home=home)
    assert ran.code == 0, ran.stderr
    data: dict[str, object] = json.loads(ran.stdout)
    return data


def test_resume_refuses_another_job_and_wider_limits(sim: Simulator, home: Path, tmp_path: Path) -> None:
    # R5, R41: a resume polls the job it started with; more authority is an approval, not a flag.
    contract = write_contract(tmp_path / "c.toml", sim.url)
    first = run_cli(
        "watch", "--contract", str(contract), "--job", "never-1", "--operation", "op", "--max-requests", "2", home=home
    )
    assert first.code == 4
    before = _record(home, "op")
    assert before["reason"] == "request_budget_exhausted"
    for flags, phrase in [
        (("--max-requests", "5"), "--max-requests 5 exceeds the approved 2"),
        (("--deadline", "2h"), "--deadline 2h would move the deadline"),
        (("--base-delay", "50ms"), "--base-delay 50ms differs"),
    ]:
        ran = run_cli("watch", "--contract", str(contract), "--operation", "op", *flags, home=home)
        _assert_usage(ran.code, ran.stderr, phrase, "approval")
    other = run_cli("watch", "--contract", str(contract), "--operation", "op", "--job", "never-2", home=home)
    _assert_usage(other.code, other.stderr, "watches job never-1, not never-2")
    assert "approval" not in other.stderr  # another job is a mistake, not a request for more authority
    assert _record(home, "op") == before
    assert sim.request_count("never-1") == 2


def test_resume_with_another_contract_meaning_is_refused(sim: Simulator, home: Path, tmp_path: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    assert run_cli("watch", "--contract", str(contract), "--job", "happy-1", "--operation", "op", home=home).code == 0
    changed = tmp_path / "c2.toml"
    changed.write_text(contract.read_text().replace('pending = ["queued", "running"]', 'pending = ["queued"]'))
    ran = run_cli("watch", "--contract", str(changed), "--operation", "op", home=home)
    _assert_usage(ran.code, ran.stderr, "differs from the one operation op was created with")


def test_equal_flags_resume_fine(sim: Simulator, home: Path, tmp_path: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    ran = run_cli(
        "watch", "--contract", str(contract), "--job", "happy-1", "--operation", "op", "--max-requests", "6", home=home
    )
    assert ran.code == 0
    again = run_cli(
        "watch",
        "--contract",
        str(contract),
        "--job",
        "happy-1",
        "--operation",
        "op",
        "--max-requests",
        "6",
        "--json",
        home=home,
    )
    assert again.code == 0, again.stderr
    assert sim.request_count("happy-1") == 4  # the finished operation sent nothing more


def test_unusable_database_is_a_clear_error(sim: Simulator, home: Path, tmp_path: Path) -> None:
    (home / "pollwarden.db").write_bytes(b"this is not sqlite" * 100)
    contract = write_contract(tmp_path / "c.toml", sim.url)
    ran = run_cli("watch", "--contract", str(contract), "--job", "happy-1", home=home)
    _assert_usage(ran.code, ran.stderr, "is not a usable pollwarden database")


def test_newer_schema_is_refused(sim: Simulator, home: Path, tmp_path: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    assert run_cli("watch", "--contract", str(contract), "--job", "happy-1", home=home).code == 0
    with sqlite3.connect(home / "pollwarden.db") as conn:
        conn.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    ran = run_cli("status", home=home)
    _assert_usage(ran.code, ran.stderr, "newer pollwarden")


def test_unknown_subcommand_and_missing_args(home: Path) -> None:
    ran = run_cli("frobnicate", home=home)
    _assert_usage(ran.code, ran.stderr, "invalid choice")
    ran = run_cli("watch", home=home)
    _assert_usage(ran.code, ran.stderr, "--contract")


def test_decisions_of_an_unknown_operation_is_a_usage_error(sim: Simulator, home: Path, tmp_path: Path) -> None:
    """Every other command says "no operation" with exit 2; `decisions nope` used to print "no open decisions"."""
    contract = write_contract(tmp_path / "c.toml", sim.url)
    assert run_cli("watch", "--contract", str(contract), "--job", "happy-1", "--operation", "op-1", home=home).code == 0
    ran = run_cli("decisions", "nope", home=home)
    _assert_usage(ran.code, ran.stderr, "no operation 'nope'")
    known = run_cli("decisions", "op-1", home=home)
    assert (known.code, known.stdout.strip()) == (0, "no open decisions for operation 'op-1'")
