"""`enqueue --jobs-file`: the file format, and every bad file refused with its lines named, exit 2, nothing created.

The refusals run the real command in this process (`cli.app.main`): everything here is decided before a store is
opened, so a bad file must leave no home, no database, no key behind.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from pollwarden.cli import jobs_file
from pollwarden.cli.app import main
from pollwarden.cli.common import UsageError
from pollwarden.simulator import contract_text


def test_the_format_skips_blanks_and_comments_and_strips_what_is_not_the_id() -> None:
    data = b"\xef\xbb\xbfexp_1\r\n\n   \n# a comment\n  \t# indented comment\n\texp_2  \nexp 3\nexp_4"
    parsed = jobs_file.parse_jobs("f", data)
    assert [(job.number, job.job_id) for job in parsed.jobs] == [(1, "exp_1"), (6, "exp_2"), (7, "exp 3"), (8, "exp_4")]
    assert parsed.problems == []
    assert jobs_file.parse_jobs("f", b"").jobs == [] and jobs_file.parse_jobs("f", b"\n").jobs == []


def test_bytes_that_are_not_utf8_are_named_by_line_and_byte() -> None:
    parsed = jobs_file.parse_jobs("f", b"ok\nab\xffc\nok2\n\xc3\n")
    assert parsed.problems == [
        (2, "is not UTF-8 text (byte 3 of the line)"),
        (4, "is not UTF-8 text (byte 1 of the line)"),
    ]
    assert [job.job_id for job in parsed.jobs] == ["ok", "ok2"]


def test_too_many_ids_or_bytes_are_refused_before_anything_is_admitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_file, "MAX_JOBS", 3)
    with pytest.raises(UsageError, match="4 job ids; at most 3 per file"):
        jobs_file.parse_jobs("f", b"a\nb\nc\nd\n")
    monkeypatch.setattr(jobs_file, "MAX_BYTES", 8)
    path = tmp_path / "big.txt"
    path.write_bytes(b"a\n" * 5)
    with pytest.raises(UsageError, match="larger than 8 bytes"):
        jobs_file.read_jobs_file(str(path))
    assert [job.job_id for job in jobs_file.read_jobs_file("-", io.BytesIO(b"x\ny\n")).jobs] == ["x", "y"]


def test_operation_prefix_numbers_the_job_ids_and_must_make_valid_ids() -> None:
    assert jobs_file.operation_ids("nightly", 3) == ["nightly-1", "nightly-2", "nightly-3"]
    assert jobs_file.operation_ids(None, 2) == [None, None]
    for bad in ("-x", "a b", "x" * 126):  # 126 + "-100" is 130 characters: too long for the last id
        with pytest.raises(UsageError, match="--operation-prefix"):
            jobs_file.operation_ids(bad, 100)


@pytest.fixture
def contract(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("POLLWARDEN_HOME", str(home))
    monkeypatch.setenv("JF_TOKEN", "s3cr3t-token-0123456789")
    monkeypatch.delenv("POLLWARDEN_DB", raising=False)
    path = tmp_path / "c.toml"
    path.write_text(contract_text("http://127.0.0.1:9", secret_env="JF_TOKEN"), encoding="utf-8")
    return path


def _enqueue(
    contract: Path, data: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str]:
    path = tmp_path / "jobs.txt"
    path.write_bytes(data)
    code = main(["enqueue", "--contract", str(contract), "--jobs-file", str(path), *extra])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and captured.out == ""
    return code, captured.err.replace(str(path), "FILE")


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"a\nb\x07c\n", ["FILE:2: job id contains the invisible or control character U+0007"]),
        (b"a\nb\nc\n  b\n", ["FILE:4: job id is given twice (also at line 2); give each once"]),
        (b"a\n\xfe\n", ["FILE:2: is not UTF-8 text (byte 1 of the line)"]),
        (b"x" * 513 + b"\n", ["FILE:1: job id is 513 characters long; at most 512 are accepted"]),
        (b"ok\nid-s3cr3t-token-0123456789\n", ["FILE:2: job id contains the credential; give the provider's job id"]),
        ("a\u202eb\n".encode(), ["FILE:1: job id contains the invisible"]),
        (
            b"ok\n\x1b[2J\n# fine\nok\n\xff\n",
            ["FILE:2: job id contains", "FILE:4: job id is given twice (also at line 1)", "FILE:5: is not UTF-8"],
        ),
    ],
)
def test_a_bad_file_names_each_bad_line_and_enqueues_nothing(
    contract: Path, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, said: list[str]
) -> None:
    code, err = _enqueue(contract, data, tmp_path, capsys, "--operation-prefix", "bulk")
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == len(said) + 1, err
    assert all(line.startswith(f"pollwarden: {words}") for line, words in zip(lines, said, strict=False)), err
    assert (
        lines[-1] == f"pollwarden: error: --jobs-file FILE: {len(said)} bad line{'s' * (len(said) > 1)} (listed"
        " above); nothing was enqueued"
    )
    assert "s3cr3t" not in err
    assert not home.exists() or not any(home.iterdir())  # no database, no keys: nothing was created


def test_more_bad_lines_than_are_shown_are_counted(
    contract: Path, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _enqueue(contract, b"bad\x01\n" * 150, tmp_path, capsys)
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == jobs_file.SHOWN_PROBLEMS + 2 and lines[-2] == "pollwarden: ... and 50 more bad lines"
    assert "150 bad lines" in lines[-1]


@pytest.mark.parametrize(
    ("data", "extra", "words"),
    [
        (b"# only a comment\n\n", (), "holds no job ids"),
        (b"a\n", ("--job", "j"), "--job cannot be given with it"),
        (b"a\n", ("--operation", "op"), "--operation cannot be given with it"),
        (b"a\n", ("--operation-prefix=-bad",), "--operation-prefix -bad: with -<n> appended"),
        (b"a\n", ("--deadline", "0s"), "--deadline"),
    ],
)
def test_a_file_with_nothing_to_do_or_a_flag_that_does_not_fit_is_exit_2(
    contract: Path,
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    data: bytes,
    extra: tuple[str, ...],
    words: str,
) -> None:
    code, err = _enqueue(contract, data, tmp_path, capsys, *extra)
    assert code == 2 and words in err, err
    assert not home.exists() or not any(home.iterdir())


def test_a_missing_file_and_a_prefix_without_a_file_are_exit_2(
    contract: Path, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["enqueue", "--contract", str(contract), "--jobs-file", str(tmp_path / "none.txt")]) == 2
    assert "none.txt: No such file or directory" in capsys.readouterr().err
    assert main(["enqueue", "--contract", str(contract), "--job", "j", "--operation-prefix", "p"]) == 2
    assert "--operation-prefix names the operations of a --jobs-file" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ok\nok\n")))
    assert main(["enqueue", "--contract", str(contract), "--jobs-file", "-"]) == 2
    assert "standard input:2: job id is given twice (also at line 1)" in capsys.readouterr().err
    assert not home.exists() or not any(home.iterdir())


def test_two_spellings_of_one_numeric_id_are_one_job_and_a_non_number_is_named(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23: under `[fields] job_id_type = "integer"` (GitHub's run ids) `042` and `+42.0` are run 42."""
    monkeypatch.setenv("POLLWARDEN_HOME", str(home))
    monkeypatch.delenv("POLLWARDEN_DB", raising=False)
    contract = tmp_path / "runs.toml"
    contract.write_text('use = "github-actions-run"\n[vars]\nrepo = "acme/app"\n', encoding="utf-8")
    code, err = _enqueue(contract, b"42\n042\n+42.0\n4.2\n43\n", tmp_path, capsys)
    assert code == 2
    assert err.splitlines()[:3] == [
        "pollwarden: FILE:2: job id is given twice (also at line 1); give each once",
        "pollwarden: FILE:3: job id is given twice (also at line 1); give each once",
        "pollwarden: FILE:4: job id must be a whole number, like 42 (contract 'github-actions-run' says"
        ' [fields].job_id_type = "integer")',
    ]
    assert not home.exists() or not any(home.iterdir())
