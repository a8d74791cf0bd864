"""Driving a shipped contract against its imitation through the real interfaces (CLI, worker, MCP).

Shipped schedules wait what the provider needs (an OpenAI batch is first checked after 30 s); a test tunes
them the way a user would, with a file that says `use = "NAME"` and replaces [schedule], [limits] and
[not_found] keys (the shipped states, fields, URLs and auth stay what they are).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pollwarden.home.operating import open_store
from tests.conftest import Ran, run_cli

FAST_SCHEDULE = {"first_check": "0s", "base_delay": "50ms", "max_delay": "100ms"}


def tuned(
    directory: Path,
    use: str,
    *,
    name: str | None = None,
    vars: dict[str, str] | None = None,
    schedule: dict[str, str] | None = None,
    limits: dict[str, str | int] | None = None,
    not_found: dict[str, str] | None = None,
) -> Path:
    """A `use` file for a shipped contract with fast polls (and whatever else the test tunes)."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [f"use = {json.dumps(use)}"]
    if name is not None:
        lines.append(f"name = {json.dumps(name)}")
    for table, values in (
        ("vars", vars),
        ("schedule", {**FAST_SCHEDULE, **(schedule or {})}),
        ("limits", limits),
        ("not_found", not_found),
    ):
        if values:
            lines.append(f"[{table}]")
            lines.extend(f"{key} = {json.dumps(value)}" for key, value in values.items())
    path = directory / f"{name or use}.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@dataclass(frozen=True)
class Watched:
    ran: Ran
    outcome: dict[str, Any]

    @property
    def code(self) -> int:
        return self.ran.code


def watch(
    contract: Path | str,
    *,
    base_url: str,
    home: Path,
    env: dict[str, str],
    job: str | None = None,
    operation: str = "op",
    vars: dict[str, str] | None = None,
    flags: tuple[str, ...] = (),
) -> Watched:
    """`pollwarden watch --contract C --var base_url=URL ... --json`, the outcome being its last line."""
    args = ["watch", "--contract", str(contract), "--var", f"base_url={base_url}", "--operation", operation, "--json"]
    for key, value in (vars or {}).items():
        args += ["--var", f"{key}={value}"]
    if job is not None:
        args += ["--job", job]
    ran = run_cli(*args, *flags, home=home, env=env)
    assert "Traceback" not in ran.stderr, ran.stderr
    lines = ran.stdout.strip().splitlines()
    outcome = json.loads(lines[-1]) if lines else {}
    return Watched(ran, outcome)


def assert_no_secret(secret: str, *texts: str) -> None:
    for text in texts:
        assert secret not in text, "a credential leaked into the output"


def fetch_result(operation: str, out: Path, *, home: Path, env: dict[str, str]) -> Ran:
    return run_cli("fetch-result", operation, "--out", str(out), home=home, env=env)


def enqueue(contract: Path | str, job: str, *, base_url: str, home: Path, env: dict[str, str], operation: str) -> Ran:
    """The operator installs the contract with its base_url (the workers run installed versions only), then it
    is enqueued."""
    installed = run_cli(
        "contracts", "install", str(contract), "--var", f"base_url={base_url}", "--by", "operator", home=home, env=env
    )
    assert installed.code == 0, installed.stderr
    return run_cli(
        "enqueue", "--contract", str(contract), "--var", f"base_url={base_url}", "--job", job,
        "--operation", operation, home=home, env=env,
    )  # fmt: skip


def run_worker_until_final(home: Path, env: dict[str, str], operations: list[str], within: float = 60.0) -> str:
    """A real worker process until every named operation is final, then stopped with SIGTERM; returns its log.

    The loop waits for another process (the worker) to do its work; it drives no time of ours.
    """
    log_path = home / "worker.log"
    with log_path.open("w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "pollwarden", "worker", "--concurrency", "2"],
            env={**os.environ, "POLLWARDEN_HOME": str(home), **env},
            stdout=subprocess.DEVNULL,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + within
        while True:
            store = open_store(home, keys="none")
            try:
                final = [op for op in operations if (s := store.get(op)) is not None and s.record.is_final]
            finally:
                store.close()
            if len(final) == len(operations):
                break
            assert worker.poll() is None, f"the worker exited early: {log_path.read_text()}"
            assert time.monotonic() < deadline, f"still active after {within}s: {log_path.read_text()}"
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    return log_path.read_text()


def record_of(home: Path, operation: str) -> dict[str, Any]:
    """The stored record, as `status --json` shows it."""
    ran = run_cli("status", operation, "--json", home=home)
    assert ran.code == 0, ran.stderr
    value: dict[str, Any] = json.loads(ran.stdout)
    return value


def choose_cancel(watched: Watched, *, home: Path, env: dict[str, str], by: str = "ops") -> Ran:
    """The stop's decision answered with its "cancel at provider" option, as a person would (`pollwarden decide`)."""
    decision = watched.outcome["decision"]
    option = next(i for i, o in enumerate(decision["options"], 1) if o["kind"] == "cancel")
    return run_cli("decide", decision["decision_id"], "--option", str(option), "--by", by, home=home, env=env)
