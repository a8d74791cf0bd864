"""The console benchmark's smoke version, so it cannot silently rot: a small fleet on SQLite, every page fetched once,
the database's part of `/` timed statement by statement. No figure is judged here (timing is the benchmark's job)."""

from __future__ import annotations

import pytest

from bench import console


def test_every_page_is_fetched_and_the_lists_reads_are_timed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POLLWARDEN_DB", raising=False)
    assert console.main(["--operations", "300", "--decisions", "60", "--rounds", "1", "--statements"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("fleet: 300 operations, 60 open decisions") and "SQLite" in lines[0]
    listed = [line for line in lines if line.strip().startswith("/?") or line.strip().startswith("/ ")]
    assert len(listed) == 4 and all(" statements" in line and "database" in line for line in listed)
    assert any(line.strip().startswith("/decisions") and "database" not in line for line in lines)
