"""Shared fixtures: a real simulated provider on loopback and a contract file pointing at it."""

from __future__ import annotations

import contextlib
import json
import locale
import os
import secrets
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pollwarden.core.contract.parse import Contract
from pollwarden.simulator import Simulator, contract_text
from pollwarden.store.base import Store
from tests import prefork


def write_contract(path: Path, base_url: str, **options: Any) -> Path:
    """The simulator's contract, written where a CLI run can read it; options as `contract_text` takes them."""
    path.write_text(contract_text(base_url, **options), encoding="utf-8")
    return path


def install(store: Store, contract: Contract, by: str = "tests") -> None:
    """What an operator does before operations of `contract` are enqueued (`pollwarden contracts install`): for
    tests that create operations in a store directly, which a worker or a resume then runs."""
    from pollwarden.engine.installed import install as install_version

    install_version(store, contract, by=by, via="tests", source="tests", now=datetime.now(UTC))


def token_command_auth(script: Path, ttl: str = "50m") -> str:
    """A contract's [auth] table (`contract_text`'s `extra`) whose token command is `script`, run by this
    interpreter, its token kept `ttl`."""
    argv = json.dumps([sys.executable, str(script)])
    return f'\n[auth]\ntoken_command = {argv}\ntoken_ttl = "{ttl}"\n'


HANGING_TOKEN_COMMAND = """
import os, pathlib, sys, time
runs, hung, release = (pathlib.Path(arg) for arg in sys.argv[1:4])
n = int(runs.read_text()) if runs.exists() else 0
runs.write_text(str(n + 1))
if n:  # every refresh hangs, its pid in `hung`, until `release` exists (two minutes at most)
    hung.write_text(str(os.getpid()))
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
print("tok-HUNG-CONTRACT-0042")
"""


@dataclass(frozen=True)
class HangingToken:
    """A contract's [auth] table (`extra`) whose token command answers at once the first time and hangs on every
    refresh, until the test touches `release`; `hung` holds the hanging run's pid, `runs` how many there were."""

    extra: str
    runs: Path
    hung: Path
    release: Path

    def hanging(self) -> int | None:
        """The pid of the run that hangs, once it has said so."""
        text = self.hung.read_text() if self.hung.exists() else ""
        return int(text) if text.strip().isdigit() else None


def hanging_token(directory: Path, ttl: str = "1s") -> HangingToken:
    script, runs, hung, release = (directory / name for name in ("token.py", "runs", "hung", "release"))
    script.write_text(HANGING_TOKEN_COMMAND, encoding="utf-8")
    argv = json.dumps([sys.executable, str(script), str(runs), str(hung), str(release)])
    return HangingToken(f'\n[auth]\ntoken_command = {argv}\ntoken_ttl = "{ttl}"\n', runs, hung, release)


def process_alive(pid: int) -> bool:
    """The process exists and is no zombie (a container's init may never reap one)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def endless_file(path: Path, limit: int) -> Iterator[threading.Event]:
    """A FIFO at `path` that stands in for `/dev/zero` or a runaway pipe: its writer stops after 4 times `limit`
    bytes (setting the event it yields: the reader read everything) or once the reader has closed its end."""
    os.mkfifo(path)
    wrote_all = threading.Event()

    def endless() -> None:
        chunk = b"#" * 65536  # one endless line, as /dev/zero has
        with contextlib.suppress(BrokenPipeError), open(path, "wb") as out:
            for _ in range(4 * limit // len(chunk) + 1):
                out.write(chunk)
            wrote_all.set()

    writer = threading.Thread(target=endless, daemon=True)
    writer.start()
    yield wrote_all
    writer.join(60)
    assert not writer.is_alive(), "nothing opened the FIFO, or the reader neither read on nor closed it"


def run_cli(*args: str, home: Path, env: dict[str, str] | None = None, timeout: float = 60) -> Ran:
    """The real console entry point in a subprocess: what a person or an agent would run (forked from a
    zygote that has done the import already, tests/prefork.py; a fresh interpreter when that cannot serve)."""
    # Not the test runner's own COLUMNS (pytest-xdist's workers have COLUMNS=80): piped output follows COLUMNS
    # when it is set (`cli/terminal.py`), so a test that wants a width says so in `env`.
    inherited = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    full_env = {**inherited, "POLLWARDEN_HOME": str(home), **(env or {})}
    ran = prefork.run(list(args), full_env, timeout=timeout)
    return Ran(ran.returncode, _text(ran.stdout), _text(ran.stderr))


def _text(data: bytes) -> str:
    """The locale's encoding, as `text=True` decodes, but not its universal newlines: a bare CR that reached the
    stream (a forged line, a countdown's redraw) stays a CR for the tests that look for one."""
    return data.decode(locale.getpreferredencoding(False))


def pytest_sessionfinish(session: pytest.Session) -> None:
    prefork.shutdown()


SLOW = (
    "tests/e2e/",
    "tests/isolation/",
    "tests/hostile/",
    "tests/providers/",
    "tests/mcp/",
    "tests/bench/",
    "tests/console/test_console_browser.py",
    "tests/docs/test_examples.py::test_a_document_runs_as_written",
    "tests/engine/test_combine_providers.py",
    "tests/transport/test_token_refresh.py",
    "tests/test_prefork.py",
)
"""What `make test-fast` leaves out (`-m "not slow"`): the suites that run whole commands, fleets, users, MCP
sessions, every shipped contract or a browser, and single files of tests that wait seconds each; that is where
most of the suite's time goes. A module may also mark itself (`pytestmark = pytest.mark.slow`)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(SLOW):
            item.add_marker(pytest.mark.slow)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture(autouse=True)
def _signal_handlers_kept() -> Iterator[None]:
    """A test that leaves this process's stop signals handled otherwise than it found them fails, and they are put
    back: a SIGINT left ignored made a later test's Ctrl-C do nothing (seen once, in another test of the worker)."""
    before = {signum: signal.getsignal(signum) for signum in _STOP_SIGNALS}
    yield
    after = {signum: signal.getsignal(signum) for signum in _STOP_SIGNALS}
    changed = [signal.Signals(signum).name for signum in _STOP_SIGNALS if after[signum] != before[signum]]
    for signum, handler in before.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    assert not changed, f"the test left {', '.join(changed)} handled otherwise than it found them"


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        yield simulator


@pytest.fixture
def secret() -> str:
    return "pwsecret-" + secrets.token_hex(16)


@pytest.fixture
def guarded(secret: str) -> Iterator[Simulator]:
    """A provider that answers only with the right bearer token: a success means it saw the credential."""
    with Simulator(token=secret) as simulator:
        yield simulator


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path
