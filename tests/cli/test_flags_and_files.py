"""Items 16 and 22: every numeric and duration flag refused with exit 2 and a message that names it; --out
writes only a regular file, atomically."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from pollwarden.cli.decide import MAX_BODY_BYTES
from pollwarden.cli.parser import build_parser
from pollwarden.simulator import Simulator, Step
from tests.conftest import endless_file, run_cli, write_contract

HUGE = "99999999999999999999"


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("enqueue", "--max-requests", HUGE), "--max-requests"),
        (("enqueue", "--max-requests", "-1"), "--max-requests"),
        (("enqueue", "--deadline", "0s"), "--deadline"),
        (("watch", "--max-requests", HUGE), "--max-requests"),
        (("watch", "--max-transport-failures", HUGE), "--max-transport-failures"),
        (("simulate", "--time-scale", "nan"), "--time-scale"),
        (("simulate", "--time-scale", "inf"), "--time-scale"),
        (("simulate", "--time-scale", "0"), "--time-scale"),
        (("simulate", "--port", "99999"), "--port"),
        (("console", "--port", HUGE), "--port"),
        (("worker", "--metrics-port", "70000"), "--metrics-port"),
        (("worker", "--concurrency", HUGE), "--concurrency"),
        (("why", "op", "--seq", HUGE + HUGE), "--seq"),
        (("decide", "d1", "--option", HUGE, "--by", "a"), "--option"),
        (("submit", "--body", "b.json", "--max-requests", HUGE), "--max-requests"),
    ],
)
def test_bad_numbers_are_exit_2_naming_the_flag(args: tuple[str, ...], flag: str, tmp_path: Path, home: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", "http://127.0.0.1:9")
    extra: tuple[str, ...] = ("--contract", str(contract), "--job", "j") if args[0] in ("enqueue", "watch") else ()
    if args[0] == "submit":
        extra = ("--contract", str(contract))
    ran = run_cli(*args, *extra, home=home, timeout=30)
    assert ran.code == 2, (ran.stdout, ran.stderr)
    assert flag in ran.stderr and "Traceback" not in ran.stderr, ran.stderr
    assert not (home / "pollwarden.db").exists()  # nothing created


@pytest.mark.parametrize("rate", ["20000", "0", "-1", "nan"])
def test_a_provider_rate_out_of_range_says_the_range(rate: str, home: Path) -> None:
    """It said only how to write the flag, so `exports=20000`, written that way, looked right and was refused."""
    ran = run_cli("worker", "--provider-rate", f"exports={rate}", home=home, timeout=30)
    assert ran.code == 2, (ran.stdout, ran.stderr)
    assert "above 0 and at most 10000" in ran.stderr and "Traceback" not in ran.stderr, ran.stderr
    assert not (home / "pollwarden.db").exists()


def _exported_home(sim: Simulator, tmp_path: Path, home: Path) -> None:
    sim.add_job("ok-1", [Step(body={"state": "succeeded", "result_url": "https://files.example/r"})])
    contract = write_contract(tmp_path / "c.toml", sim.url)
    assert run_cli("watch", "--contract", str(contract), "--job", "ok-1", home=home).code == 0


def test_audit_export_refuses_what_is_not_a_regular_file(sim: Simulator, tmp_path: Path, home: Path) -> None:
    _exported_home(sim, tmp_path, home)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    target = tmp_path / "target.jsonl"
    target.write_text("keep me\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    cases = {
        str(tmp_path): "a directory",
        "/dev/null": "not a regular file",
        str(fifo): "not a regular file",
        str(link): "a symbolic link",
        str(tmp_path / "missing" / "x.jsonl"): "does not exist",
    }
    if os.geteuid() != 0:  # root writes anywhere
        cases[str(locked / "x.jsonl")] = "cannot write"
    for out, why in cases.items():
        ran = run_cli("audit", "export", "--out", out, home=home)
        assert ran.code == 2, (out, ran.stderr)
        assert "--out" in ran.stderr and why in ran.stderr and "Traceback" not in ran.stderr, ran.stderr
    assert target.read_text() == "keep me\n" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary left over
    assert os.path.exists("/dev/null") and not Path("/dev/null").is_file()


def test_audit_export_replaces_a_regular_file_and_verifies(sim: Simulator, tmp_path: Path, home: Path) -> None:
    _exported_home(sim, tmp_path, home)
    out = tmp_path / "export.jsonl"
    out.write_text("old\n")
    ran = run_cli("audit", "export", "--out", str(out), home=home)
    assert ran.code == 0, ran.stderr
    assert run_cli("audit", "verify", "--file", str(out), home=home).code == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_submit_body_nested_deeper_than_json_recurses_is_exit_2(tmp_path: Path, home: Path) -> None:
    # json.loads recurses once per level: a body file 100,000 arrays deep was a RecursionError traceback.
    contract = tmp_path / "c.toml"
    contract.write_text(
        'name = "jobs"\nstatus_url = "http://127.0.0.1:9/jobs/{job_id}"\n[states]\npending = ["running"]\n'
        'success = ["done"]\nfailure = ["failed"]\n[fields]\nstate = "state"\n'
        '[submit]\nurl = "http://127.0.0.1:9/jobs"\nencoding = "form"\n',
        encoding="utf-8",
    )
    body = tmp_path / "b.json"
    body.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    ran = run_cli("submit", "--contract", str(contract), "--body", str(body), home=home, timeout=30)
    assert ran.code == 2 and "--body" in ran.stderr and "Traceback" not in ran.stderr, ran.stderr
    assert not (home / "pollwarden.db").exists()  # nothing created


def test_a_submit_body_that_never_ends_is_exit_2_after_a_bounded_read(tmp_path: Path, home: Path) -> None:
    # `--body /dev/zero` read until memory ran out.
    contract = tmp_path / "c.toml"
    contract.write_text(
        'name = "jobs"\nstatus_url = "http://127.0.0.1:9/jobs/{job_id}"\n[states]\npending = ["running"]\n'
        'success = ["done"]\nfailure = ["failed"]\n[fields]\nstate = "state"\n[submit]\nurl = "http://127.0.0.1:9/jobs"\n',
        encoding="utf-8",
    )
    with endless_file(tmp_path / "body.json", MAX_BODY_BYTES) as wrote_all:
        ran = run_cli("submit", "--contract", str(contract), "--body", str(tmp_path / "body.json"), home=home)
    assert ran.code == 2 and f"larger than {MAX_BODY_BYTES} bytes" in ran.stderr, ran.stderr
    assert not wrote_all.is_set()
    assert not (home / "pollwarden.db").exists()  # nothing created


@pytest.mark.parametrize(
    "args",
    [
        ("audit", "verify", "--checkpoint", "x" * 5000),
        ("mcp", "--contracts", "x" * 5000),
        ("status", "--home", "x" * 5000),
    ],
)
def test_a_path_too_long_for_the_file_system_is_exit_2_not_a_traceback(args: tuple[str, ...], home: Path) -> None:
    # `Path.exists()` and `is_dir()` raise ENAMETOOLONG (only a missing file is False): that was exit 1.
    ran = run_cli(*args, home=home)
    assert ran.code == 2 and "Traceback" not in ran.stderr, ran.stderr
    assert "too long" in ran.stderr, ran.stderr


def test_audit_repair_mends_only_a_regular_file(tmp_path: Path, home: Path) -> None:
    """`audit repair /dev/zero` read one endless line until memory ran out; a FIFO stands in for it (opening
    one for reading waits for a writer, so the old code never even got to read)."""
    fifo = tmp_path / "export.jsonl"
    os.mkfifo(fifo)
    ran = run_cli("audit", "repair", "--file", str(fifo), home=home, timeout=30)
    assert ran.code == 2 and f"{fifo} is not a regular file" in ran.stderr, ran.stderr
    assert "Traceback" not in ran.stderr


def test_a_witness_setting_that_never_ends_is_an_error_after_a_bounded_read(tmp_path: Path, home: Path) -> None:
    from pollwarden.home.directory import ensure_home, witness_config_path
    from pollwarden.home.operating import MAX_WITNESS_SETTING_BYTES, configured_witness
    from pollwarden.store.base import StoreError

    ensure_home(home)
    limit = f"larger than {MAX_WITNESS_SETTING_BYTES} bytes"
    with (
        endless_file(witness_config_path(home), MAX_WITNESS_SETTING_BYTES) as wrote_all,
        pytest.raises(StoreError, match=limit),
    ):
        configured_witness(home)
    assert not wrote_all.is_set()


# --- issue 23: a malformed --db is exit 2 on every command that takes it ------------------------------------------


def _commands_with(flag: str) -> list[tuple[str, ...]]:
    """Every command (and sub-command) whose parser takes `flag`, read from the parser itself."""
    found: list[tuple[str, ...]] = []

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, (*words, name))
            elif flag in action.option_strings and words:
                found.append(words)

    walk(build_parser(), ())
    return found


BAD_DATABASES = {
    "postgresql://x:hunter2pw@[::1": "a [ in its host is not closed",
    "postgresql://h:99999/db": "port is not a number from 1 to 65535",
    "postgresql://hunter2pw:%zz@h/db": "a % is not followed by two hex digits",
    "postgresql://u:hunter2pw@[zz]/db": "host in brackets is not an IPv6 address",
    "": "the database is empty",
    " ": "the database is empty",  # once a SQLite file named " " in the working directory (committed by mistake)
}


@pytest.mark.parametrize("command", _commands_with("--db"), ids=" ".join)
def test_a_malformed_db_url_is_exit_2_on_every_command_that_takes_it(command: tuple[str, ...], home: Path) -> None:
    ran = run_cli(*command, "--db", "postgresql://x:hunter2pw@[::1", home=home, timeout=30)
    assert ran.code == 2, (ran.stdout, ran.stderr)
    assert "argument --db: the PostgreSQL URL is malformed: a [ in its host is not closed" in ran.stderr
    assert "Traceback" not in ran.stderr and "hunter2pw" not in ran.stderr + ran.stdout
    assert not home.exists() or not (home / "pollwarden.db").exists()


@pytest.mark.parametrize(
    ("db", "why"), BAD_DATABASES.items(), ids=["ipv6-open", "port", "percent", "ipv6-bad", "empty", "blank"]
)
def test_each_malformed_db_says_what_is_wrong_from_the_flag_and_from_the_environment(
    db: str, why: str, home: Path
) -> None:
    for ran in (
        run_cli("status", "--db", db, home=home, timeout=30),
        run_cli("worker", "--db", db, home=home, timeout=30),
    ):
        assert ran.code == 2 and why in ran.stderr and "--db" in ran.stderr, ran.stderr
        assert "Traceback" not in ran.stderr and "hunter2pw" not in ran.stderr
    if db:  # an empty POLLWARDEN_DB means "not set", as it always has
        ran = run_cli("status", home=home, env={"POLLWARDEN_DB": db}, timeout=30)
        assert ran.code == 2 and why in ran.stderr and "Traceback" not in ran.stderr, ran.stderr
        assert "hunter2pw" not in ran.stderr
    if db and not db.strip():  # no SQLite file of that name where the commands ran (this process's directory)
        assert not Path(db).exists() and not Path(db + "-writer.lock").exists()


# --- issue 23: a credential over plain http off the loopback is refused at load -------------------------------------


@pytest.mark.parametrize("command", [("watch", "--job", "j"), ("enqueue", "--job", "j"), ("submit",)], ids=" ".join)
def test_a_contract_sending_its_credential_over_plain_http_is_exit_2_naming_the_key(
    command: tuple[str, ...], tmp_path: Path, home: Path
) -> None:
    contract = tmp_path / "c.toml"
    contract.write_text(
        'name = "jobs"\nstatus_url = "http://jobs.example/jobs/{job_id}"\n[states]\npending = ["running"]\n'
        'success = ["done"]\nfailure = ["failed"]\n[fields]\nstate = "state"\n[auth]\nsecret_env = "JOBS_TOKEN"\n'
        '[submit]\nurl = "http://jobs.example/jobs"\n',
        encoding="utf-8",
    )
    body = tmp_path / "b.json"
    body.write_text("{}", encoding="utf-8")
    extra = ("--body", str(body)) if command[0] == "submit" else ()
    ran = run_cli(*command, "--contract", str(contract), *extra, home=home, env={"JOBS_TOKEN": "tok-123456"})
    assert ran.code == 2, (ran.stdout, ran.stderr)
    assert "status_url: http://jobs.example would receive the credential over plain http" in ran.stderr
    assert "allow_plain_http = true" in ran.stderr and "Traceback" not in ran.stderr
    assert not (home / "pollwarden.db").exists()  # nothing created


@pytest.mark.parametrize("host", ["\u00e9\u202e", "a" * 300], ids=["bidi", "label-too-long"])
@pytest.mark.parametrize(
    "command",
    [("simulate", "--port", "0", "--host"), ("console", "--port", "0", "--host"), ("worker", "--metrics-host")],
    ids=["simulate", "console", "worker"],
)
def test_a_host_the_resolver_cannot_be_asked_about_is_exit_2_naming_the_flag(
    command: tuple[str, ...], host: str, home: Path
) -> None:
    """Issue 23's parser fuzz: a bind address IDNA cannot encode was a TypeError or UnicodeError traceback."""
    ran = run_cli(*command, host, home=home, timeout=30)
    assert ran.code == 2 and f"argument {command[-1]}:" in ran.stderr, ran.stderr
    assert "is not a host name or IP address" in ran.stderr and "Traceback" not in ran.stderr
