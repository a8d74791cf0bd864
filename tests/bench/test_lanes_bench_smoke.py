"""The lanes benchmark's smoke version, so it cannot silently rot: one short adverse run on SQLite, whose worker
polls the healthy provider and stops. No figure is judged here (the ratio is the benchmark's job)."""

from __future__ import annotations

import pytest

from bench import lanes_bench

pytestmark = pytest.mark.slow


def test_one_short_adverse_run_polls_the_healthy_provider_and_stops() -> None:
    measured = lanes_bench.run("sqlite", adverse=True, operations=20, delay=0.5, seconds=1.0, warmup=3.0, tree=None)
    assert measured.adverse and measured.polls > 0 and measured.seconds >= 1.0
