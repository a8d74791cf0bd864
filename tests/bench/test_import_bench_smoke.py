"""The import benchmark's smoke version, so it cannot silently rot: one round of two cases, and its section of
docs/performance.md written beside another helper's. No figure is judged here (timing is the benchmark's job)."""

from __future__ import annotations

from pathlib import Path

from bench import import_bench


def test_one_round_measures_each_case_against_the_floor_and_writes_only_its_section(tmp_path: Path) -> None:
    api = next(case for case in import_bench.CASES if case.name == "API")
    floor, measured = import_bench.measure([import_bench.FLOOR, api], runs=1)
    assert floor.case is import_bench.FLOOR and measured.case is api
    assert measured.modules > floor.modules and measured.heavy == ()
    assert 0 < floor.rss_mb < measured.rss_mb and floor.wall_ms > 0 and measured.import_ms > 0

    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\n## Throughput\n\nanother helper's figures\n", encoding="utf-8")
    for _ in range(2):  # written twice: the second run replaces its own section, nothing else
        import_bench.write_section(
            doc, import_bench.section([floor, measured], "python -m bench.import_bench", 1, (0.5, 0.5))
        )
    text = doc.read_text(encoding="utf-8")
    assert text.count(import_bench.HEADING) == 1 and text.count("## Throughput\n\nanother helper's figures") == 1
    assert "| API |" in text and "target <= 150 ms" in text
