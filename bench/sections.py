"""One benchmark's section of a shared Markdown file (docs/benchmarks.md), kept between its own two markers, so
each benchmark rewrites only what it measured and `bench.conformance` keeps the others when it rewrites the file."""

from __future__ import annotations

from pathlib import Path


def write_section(path: Path, start: str, end: str, text: str) -> None:
    """Replace what lies between the markers `start` and `end` of a Markdown file with `text`, or add both at the
    end (the file is made if missing)."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    block = f"{start}\n{text}\n{end}"
    if start in old and end in old:
        new = old[: old.index(start)] + block + old[old.index(end) + len(end) :]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(new, encoding="utf-8")
