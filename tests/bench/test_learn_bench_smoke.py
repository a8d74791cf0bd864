"""The learnt-schedule benchmark's smoke version, so it cannot silently rot: a few hundred jobs of one workload.
Counts are judged (they come from the simulated clock, not from timing): learning sends fewer requests than
the plain backoff and keeps the p95 lag near its target."""

from __future__ import annotations

from bench import learn


def test_learning_sends_fewer_requests_than_the_plain_backoff_on_the_simulated_clock() -> None:
    workload = learn.WORKLOADS["lognormal median 60s, sigma 0.5"]
    plain = learn.run(workload, 400, 30.0, learning=False, seed=3)
    learnt = learn.run(workload, 400, 30.0, learning=True, seed=3)
    fixed = learn.fixed(workload, 400, 30.0, seed=3)
    assert learnt.requests < 0.75 * plain.requests
    assert learnt.p95 <= 33.0 < plain.p95  # the first 20 jobs, before anything is learnt, are the backoff's
    assert fixed.p95 <= 31.6


def test_the_table_names_every_workload_and_schedule() -> None:
    text = learn.table(jobs=60, lag_target=30.0, seed=1)
    for name in learn.WORKLOADS:
        assert text.count(f"| {name} |") == 3
