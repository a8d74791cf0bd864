"""What every hostile case is judged by, whatever drove it: findings are collected, then reported together.

A case that breaks three promises says so in one failure (traceback, wrong exit code and a leak), which is
what the pass/fail table of the suite needs; each finding names the command or file it came from.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from tests import prefork

from .cases import MAX_RSS_MB, Case, Secret
from .server import Request

COMMAND_TIMEOUT = 40.0  # far beyond any case's run; a hang fails the case instead of stalling the suite
_BARE_CR = re.compile(rb"\r(?!\n)")


@dataclass(frozen=True)
class Run:
    label: str
    code: int | None  # None: it hung and was killed
    stdout: str
    stderr: str
    seconds: float
    max_rss_mb: float


def run_bounded(*args: str, home: Path, env: dict[str, str], timeout: float = COMMAND_TIMEOUT) -> Run:
    """`python -m pollwarden ARGS` with its own peak memory (wait4), killed if it outlives `timeout`."""
    label = " ".join(args[:2]) if args and args[0] != "watch" else "watch"
    started = time.monotonic()
    try:
        ran = prefork.run(list(args), {**os.environ, "POLLWARDEN_HOME": str(home), **env}, timeout=timeout)
    except subprocess.TimeoutExpired as hung:
        out, err = (data if isinstance(data, bytes) else b"" for data in (hung.stdout, hung.stderr))
        return Run(label, None, _text(out), _text(err), time.monotonic() - started, 0.0)
    seconds = time.monotonic() - started
    return Run(label, ran.returncode, _text(ran.stdout), _text(ran.stderr), seconds, ran.max_rss_kb / 1024)


def _text(data: bytes) -> str:
    """Exactly what reached the stream: universal newlines (as `read_text` gave before) would turn the bare CR
    that `Findings.terminal` looks for into a newline, and a forged line would pass unseen."""
    return data.decode("utf-8", errors="replace")


def last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def outcome_of(phase: str | None, reason: str | None) -> str:
    if phase == "succeeded":
        return "succeeded"
    if phase == "stopped" and reason:
        return reason
    return f"not ended (phase {phase})"


def all_bytes_under(path: Path) -> dict[str, bytes]:
    """Every file, the SQLite -wal and -shm included, by its path relative to `path`."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def postgres_rows(url: str) -> dict[str, bytes]:
    """Every row of every table of the database, cast to text: what anyone with read access sees."""
    rows: dict[str, bytes] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            ).fetchall()
        ]
        for table in tables:
            query = sql.SQL("SELECT CAST(t AS text) FROM {} AS t").format(sql.Identifier(table))
            rows[f"postgres table {table}"] = "\n".join(str(r[0]) for r in conn.execute(query)).encode()
    return rows


@dataclass
class Findings:
    case: Case
    items: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.items.append(text)

    def command(self, run: Run) -> None:
        """No hang, no traceback, never exit 1."""
        if run.code is None:
            self.add(f"{run.label}: hung, killed after {run.seconds:.0f} s")
        if "Traceback" in run.stderr or "Traceback" in run.stdout:
            tail = [line for line in run.stderr.splitlines() if line.strip()][-1:] or ["?"]
            self.add(f"{run.label}: traceback ({tail[0][:160]})")
        if run.code == 1:
            self.add(f"{run.label}: exit 1 (internal error)")

    def outcome(self, outcome: str) -> None:
        if outcome not in self.case.outcomes:
            self.add(f"outcome {outcome!r}, expected one of {sorted(self.case.outcomes)}")

    def counted(self, requests: list[Request], used: int | None) -> None:
        if used is not None and len(requests) > used:
            self.add(f"the provider saw {len(requests)} requests, {used} were counted")
        slots = [r.headers.get("x-pollwarden-reservation") for r in requests]
        if len(set(slots)) != len(slots):
            self.add(f"a reservation slot was sent twice: {slots}")

    def bounded(self, requests: list[Request]) -> None:
        """Each request was cut by the client: it left before the 20 s script was over (cases.py)."""
        if not self.case.bounded:
            return
        for n, request in enumerate(requests, 1):
            if request.ended_at is None or not request.client_left:
                shown = "never ended" if request.seconds is None else f"was played out ({request.seconds:.1f} s)"
                self.add(f"request {n} {shown}: the 1 s timeout did not cut it")

    def memory(self, run: Run) -> None:
        if self.case.bomb and run.max_rss_mb > MAX_RSS_MB:
            self.add(f"{run.label}: peak memory {run.max_rss_mb:.0f} MB (bound {MAX_RSS_MB} MB)")

    def terminal(self, label: str, text: str) -> None:
        """Provider control characters must be neutralised before a person's terminal sees them."""
        data = text.encode("utf-8", errors="replace")
        found = [name for name, bad in (("ESC", b"\x1b" in data), ("BEL", b"\x07" in data)) if bad]
        if _BARE_CR.search(data):
            found.append("bare CR")
        if found:
            self.add(f"{label}: raw {', '.join(found)} reaches the terminal")

    def leaks(self, secret: Secret | None, where: dict[str, bytes]) -> None:
        if secret is None:
            return
        for form, value in secret.forms().items():
            places = sorted(label for label, data in where.items() if value in data)
            if places:
                shown = ", ".join(places[:6]) + (f" (+{len(places) - 6} more)" if len(places) > 6 else "")
                self.add(f"credential ({form}) found in: {shown}")

    def done(self) -> None:
        assert not self.items, f"{self.case.name}:\n  " + "\n  ".join(self.items)
