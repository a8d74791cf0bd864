"""The learnt fleet benchmark's smoke version, so it cannot silently rot: real `pollwarden enqueue` and `worker`
processes on loopback, 25 jobs of about 2 s a round (enough ended jobs to learn from). What is judged is what
does not depend on the machine's speed: every job of every round is found ended, each with at least one request,
and the section names both schedules and both rounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import learn_fleet

pytestmark = pytest.mark.slow


def test_both_schedules_see_every_job_end_and_the_section_replaces_only_itself(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# B\n\n{learn_fleet.MARK_START}\nold\n{learn_fleet.MARK_END}\n", encoding="utf-8")
    argv = ["--callers", "25", "--job-seconds", "2", "--out", str(doc)]
    assert learn_fleet.main(argv) == 0
    text = doc.read_text(encoding="utf-8")
    for name in learn_fleet.SCHEDULES:
        assert text.count(f"| {name} |") == 2
    assert "old" not in text and text.startswith("# B")
