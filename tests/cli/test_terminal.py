"""What fits a terminal (`cli/terminal.py`): lines cut, never wrapped; tables that drop columns, never alignment."""

from __future__ import annotations

import io
import os
import pty

import pytest

from pollwarden.cli.catalogue import SHIPPED_COLUMNS
from pollwarden.cli.inspect import STATUS_COLUMNS
from pollwarden.cli.terminal import (
    MAX_TABLE_WIDTH,
    Column,
    FittedOut,
    WrappedOut,
    cell_width,
    fit,
    fit_middle,
    output_width,
    table,
    table_width,
    wrap,
)


def test_fit_cuts_with_an_ellipsis_and_counts_wide_characters_as_two() -> None:
    assert fit("short", 10) == "short"
    assert fit("a longer line", 8) == "a longe…" and cell_width(fit("a longer line", 8)) == 8
    assert cell_width("作业") == 4
    assert cell_width(fit("作业作业作业", 7)) <= 7
    assert fit("x", 0) == ""


def test_an_id_is_cut_in_the_middle_so_both_ends_show() -> None:
    cut = fit_middle("deploys-20261202-193332-0417", 20)
    assert cut.startswith("deploys-2") and cut.endswith("332-0417") and "…" in cut and cell_width(cut) <= 20


STATUS_ROW = (
    "deploys-20261202-193332-0417-abcdefgh",
    "active",
    "request_budget_exhausted",
    "running",
    "3/12",
    "overdue orphaned",
    "job-0123456789-abcdefghijkl",
    "watch on a-very-long-host-name.example.internal (pid 4242), gone (last check 3m ago)",
)


@pytest.mark.parametrize("width", [50, 60, 80, 100, 140])
def test_status_fits_every_width_and_keeps_its_columns_aligned(width: int) -> None:
    rows = [STATUS_ROW, ("op", "succeeded", "-", "succeeded", "1/12", "-", "j", "-")]
    drawn = table(STATUS_COLUMNS, rows, min(width, MAX_TABLE_WIDTH))
    assert all(cell_width(line) <= min(width, MAX_TABLE_WIDTH) for line in drawn.lines), drawn.lines
    heading = drawn.lines[0]
    for name in ("OPERATION", "PHASE", "FLAGS"):  # never dropped
        assert name in heading
    # Aligned: each kept column starts at the same place on every line.
    starts = [heading.index(word) for word in heading.split()]
    for line in drawn.lines[1:]:
        for start in starts[1:]:
            assert line[start - 2 : start] == "  " and line[start] != " ", (line, start)
    if width < 100:
        assert "OWNER" in drawn.hidden


def test_owner_text_cannot_break_the_alignment() -> None:
    """An owner's description as long as a host name allows is cut to its column, not pushed past the table."""
    wide = (*STATUS_ROW[:-1], "watch on db-1 \u4f5c\u4e1a (pid 4242), since 3m ago, polling now and more")
    for width in (80, 100):
        drawn = table(STATUS_COLUMNS, [wide, STATUS_ROW], width)
        assert all(cell_width(line) <= width for line in drawn.lines)
        assert "OWNER" in drawn.hidden or all(line.endswith("…") for line in drawn.lines[1:])


def test_contracts_fit_80_columns_dropping_the_docs_first() -> None:
    extra = "google (missing: pip install 'pollwarden[google]')"
    docs = "https://cloud.google.com/vertex-ai/docs"
    rows = [
        ["vertex-ai-batch-prediction", "Vertex AI batch prediction", "GOOGLE_TOKEN", "--var project=...", extra, docs]
    ]
    drawn = table(SHIPPED_COLUMNS, rows, 80)
    assert "DOCS" in drawn.hidden and all(cell_width(line) <= 80 for line in drawn.lines)
    assert "NEEDS" in drawn.lines[0]


def test_a_pipe_is_never_cut_and_a_table_follows_columns() -> None:
    out = io.StringIO()
    FittedOut(out).write("x" * 300 + "\n")
    assert out.getvalue() == "x" * 300 + "\n"
    os.environ.pop("COLUMNS", None)
    assert table_width(out) == MAX_TABLE_WIDTH


def test_on_a_terminal_every_line_and_every_redraw_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    leader, follower = pty.openpty()
    try:
        with os.fdopen(follower, "w", closefd=False) as stream:
            monkeypatch.setattr(os, "get_terminal_size", lambda fd: os.terminal_size((30, 24)))
            fitted = FittedOut(stream)
            fitted.write("first line that is long enough to wrap\n")
            fitted.write("\r\033[Kredraw " + "y" * 40)
            fitted.write(" and more")  # the same line goes on: nothing more fits
            fitted.write("\n")
            stream.flush()
        written = os.read(leader, 4096).decode()
    finally:
        os.close(leader)
        os.close(follower)
    pieces = [p.replace("\x1b[K", "") for row in written.replace("\r\n", "\n").split("\n") for p in row.split("\r")]
    assert all(cell_width(p) <= 29 for p in pieces), pieces
    assert "first line that is long enou…" in pieces


def test_a_column_limit_cuts_only_that_column() -> None:
    drawn = table([Column("A"), Column("B", limit=5)], [["a", "bbbbbbbbbb"]], 80)
    assert drawn.lines == ["A  B", "a  bbbb…"]


def test_prose_wraps_at_spaces_with_a_hanging_indent_and_keeps_every_character() -> None:
    line = "  [1] extend by 15m with 4 additional checks: waits until 2026-12-06T22:26:47Z at most; then stops"
    rows = wrap(line, 40)
    assert rows[0].startswith("  [1] extend") and all(row.startswith("    ") for row in rows[1:])
    assert all(cell_width(row) < 40 for row in rows)  # one column less than the width, as `fit`
    assert " ".join(rows).split() == line.split()
    assert wrap("short", 40) == ["short"]
    long = wrap("id " + "x" * 50, 20)  # a word longer than a row is broken, not cut
    assert "".join(r.strip() for r in long) == "id" + "x" * 50 and all(cell_width(r) < 20 for r in long)
    wide = wrap("作业" * 30, 21)
    assert all(cell_width(r) < 21 for r in wide) and "".join(r.strip() for r in wide) == "作业" * 30
    assert wrap("a  b " + "c" * 3, 80) == ["a  b ccc"]  # spaces as written


def test_wrapped_out_is_as_written_on_a_pipe_and_wraps_whole_lines_with_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    piped = io.StringIO()
    out = WrappedOut(piped)
    out.write("word " * 30)  # a part of a line waits for the rest
    out.write("end\n")
    assert piped.getvalue() == "word " * 30 + "end\n"
    monkeypatch.setenv("COLUMNS", "30")
    narrow = io.StringIO()
    out = WrappedOut(narrow)
    out.write("word " * 10)
    assert narrow.getvalue() == ""
    out.write("end\nlast " * 2)
    out.flush()
    lines = narrow.getvalue().split("\n")
    assert (
        all(cell_width(line) < 30 for line in lines)
        and narrow.getvalue().split() == ("word " * 10 + "end last end last").split()
    )


@pytest.mark.parametrize("columns", ["\u00b2", "9" * 5000, "0", "-80", "eighty"])
def test_a_columns_that_is_no_width_is_ignored_not_raised(monkeypatch: pytest.MonkeyPatch, columns: str) -> None:
    monkeypatch.setenv("COLUMNS", columns)  # '²' passes str.isdigit, and int() refuses it
    assert output_width(io.StringIO()) is None
    monkeypatch.setenv("COLUMNS", "72")
    assert output_width(io.StringIO()) == 72
