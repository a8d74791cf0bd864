"""The dead-holder look benchmark's smoke version, so it cannot silently rot: every case of a tiny run claims
(nothing: nothing is due) at some rate. No figure is judged here (the ratio is the benchmark's job)."""

from __future__ import annotations

import pytest

from bench import probe_bench

pytestmark = pytest.mark.slow


def test_a_tiny_run_measures_every_case() -> None:
    rates, commits = probe_bench.run(backlog=30, held=6, seconds=0.05, rounds=1)
    assert len(rates) == 6 and commits > 0
    assert all(rate > 0 for rate in rates.values())
