"""Shared fixtures: a real simulated provider on loopback and a contract file pointing at it."""

from __future__ import annotations

import locale
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pollwarden.simulator import Simulator, contract_text
from tests import prefork


def write_contract(path: Path, base_url: str, **options: Any) -> Path:
    """The simulator's contract, written where a CLI run can read it; options as `contract_text` takes them."""
    path.write_text(contract_text(base_url, **options), encoding="utf-8")
    return path


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str


def run_cli(*args: str, home: Path, env: dict[str, str] | None = None, timeout: float = 60) -> Ran:
    """The real console entry point in a subprocess: what a person or an agent would run (forked from a
    zygote that has done the import already, tests/prefork.py; a fresh interpreter when that cannot serve)."""
    full_env = {**os.environ, "POLLWARDEN_HOME": str(home), **(env or {})}
    ran = prefork.run(list(args), full_env, timeout=timeout)
    return Ran(ran.returncode, _text(ran.stdout), _text(ran.stderr))


def _text(data: bytes) -> str:
    """The locale's encoding, as `text=True` decodes, but not its universal newlines: a bare CR that reached the
    stream (a forged line, a countdown's redraw) stays a CR for the tests that look for one."""
    return data.decode(locale.getpreferredencoding(False))


def pytest_sessionfinish(session: pytest.Session) -> None:
    prefork.shutdown()


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        yield simulator


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path
