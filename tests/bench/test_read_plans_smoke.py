"""The read-plans benchmark's smoke version, so it cannot silently rot: a tiny run times every read. No figure is
judged here (the plans are judged by tests/store/test_read_plans.py and test_claim_plan.py)."""

from __future__ import annotations

from bench import read_plans


def test_a_tiny_run_times_every_read() -> None:
    figures = read_plans.run(operations=30, due=20, held=5, calls=3)
    assert len(figures) == 7 and all(ms > 0 for ms in figures.values())
