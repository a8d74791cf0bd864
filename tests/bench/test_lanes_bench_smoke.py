"""The lanes benchmark's smoke version, so it cannot silently rot: one short adverse run on SQLite, whose worker
polls the healthy provider and stops. No figure is judged here (the ratio is the benchmark's job)."""

from __future__ import annotations

import pytest

from bench import lanes_bench

pytestmark = pytest.mark.slow


def test_one_short_adverse_run_polls_the_healthy_provider_and_stops() -> None:
    """No warm-up: the window opens at the worker's first healthy poll, not a guess at when it has started (a 3 s
    warm-up counted 0 polls in a full run at load 20; with none, every run did before the window waited)."""
    measured = lanes_bench.run("sqlite", adverse=True, operations=20, delay=0.5, seconds=1.0, warmup=0.0, tree=None)
    assert measured.adverse and measured.polls > 0 and measured.seconds >= 1.0
