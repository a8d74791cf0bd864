"""The scrubber benchmark's smoke version, so it cannot silently rot: one short loop of every case in this tree.
No figure is judged here (timing is the benchmark's job)."""

from __future__ import annotations

from bench import scrub_bench


def test_every_case_is_measured_in_microseconds_per_answer() -> None:
    figures = scrub_bench.child(loops=5)
    assert set(figures) == set(scrub_bench.CASES)
    assert all(0 < value < 1e6 for value in figures.values())
