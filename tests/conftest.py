"""Shared fixtures: a real simulated provider on loopback and a contract file pointing at it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pollwarden.simulator import Simulator

CONTRACT = """\
name = "exports"
status_url = "{base}/jobs/{{job_id}}"
timeout = "{timeout}"
safe_status = true
{auth}
[states]
pending = ["queued", "running"]
success = ["succeeded"]
failure = ["failed"]
cancelled = ["cancelled"]
expired = ["expired"]

[fields]
state = "state"
result = "result_url"
error = "error"
expires_at = "expires_at"
poll_after_seconds = "poll_after_seconds"
next_check_at = "next_check_at"

[schedule]
base_delay = "{base_delay}"
max_delay = "{max_delay}"

[limits]
deadline = "{deadline}"
max_requests = {max_requests}
max_transport_failures = {max_transport_failures}
max_rate_limited = 3
{extra}
"""


def write_contract(
    path: Path,
    base_url: str,
    *,
    timeout: str = "2s",
    base_delay: str = "100ms",
    max_delay: str = "400ms",
    deadline: str = "1m",
    max_requests: int = 12,
    max_transport_failures: int = 3,
    secret_env: str | None = None,
    extra: str = "",
) -> Path:
    auth = f'\n[auth]\nsecret_env = "{secret_env}"\n' if secret_env else ""
    path.write_text(
        CONTRACT.format(
            base=base_url,
            timeout=timeout,
            base_delay=base_delay,
            max_delay=max_delay,
            deadline=deadline,
            max_requests=max_requests,
            max_transport_failures=max_transport_failures,
            auth=auth,
            extra=extra,
        ),
        encoding="utf-8",
    )
    return path


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str


def run_cli(*args: str, home: Path, env: dict[str, str] | None = None, timeout: float = 60) -> Ran:
    """The real console entry point in a subprocess: what a person or an agent would run."""
    full_env = {**os.environ, "POLLWARDEN_HOME": str(home), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "pollwarden", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return Ran(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        yield simulator


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path
