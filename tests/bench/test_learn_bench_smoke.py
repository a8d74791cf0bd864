"""The learnt-schedule benchmark's smoke version, so it cannot silently rot: a few hundred jobs of one workload.
Counts are judged (they come from the simulated clock, not from timing): learning sends fewer requests than
the plain backoff and keeps the p95 lag near its target; nothing beats the oracle, which keeps the target."""

from __future__ import annotations

from pathlib import Path

from bench import learn


def test_learning_sends_fewer_requests_than_the_plain_backoff_on_the_simulated_clock() -> None:
    times = learn.durations(learn.WORKLOADS["lognormal median 60s, sigma 0.5"], 400, seed=3)
    plain = learn.run(times, 30.0, learning=False, seed=3)
    learnt = learn.run(times, 30.0, learning=True, seed=3)
    fixed = learn.fixed(times, 30.0)
    best = learn.oracle(times, 30.0, learn.MAX_DELAY)
    assert learnt.requests < 0.75 * plain.requests
    assert learnt.p95 <= 33.0 < plain.p95  # the first 20 jobs, before anything is learnt, are the backoff's
    assert fixed.p95 <= 31.6
    assert best.p95 <= 30.0
    assert best.requests <= min(learnt.requests, fixed.requests, plain.requests)


def test_the_tuned_backoff_keeps_the_target_with_the_largest_cap_that_does() -> None:
    times = learn.durations(learn.WORKLOADS["Pareto (scale 20s, shape 1.5)"], 300, seed=5)
    cap, found = learn.tuned(times, 30.0, seed=5)
    assert found.p95 <= 30.0
    assert learn.run(times, 30.0, learning=False, seed=5, max_delay=cap + 1).p95 > 30.0


def test_the_section_names_every_workload_and_schedule_and_replaces_only_itself(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\n{learn.MARK_START}\nold\n{learn.MARK_END}\n\n## After\n", encoding="utf-8")
    assert learn.main(["--jobs", "60", "--out", str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    for name in learn.WORKLOADS:
        assert text.count(f"| {name} |") == 7
        assert f"- {name}: learnt " in text
    assert "old" not in text and text.startswith("# Benchmarks") and text.endswith("## After\n")
