"""Shared fixtures: a real simulated provider on loopback and a contract file pointing at it."""

from __future__ import annotations

import contextlib
import json
import locale
import os
import re
import secrets
import signal
import subprocess
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

# pytest rewrites every test module's asserts and keeps the result in __pycache__ unless bytecode writing is off,
# as PYTHONDONTWRITEBYTECODE turns it off on the CI machine and here: then each worker rewrites and compiles all
# ~300 test modules again, ~13 s CPU a worker (collecting the suite took 27.8 s CPU, 14.8 s with the cache). The
# Makefile writes src's bytecode for the same reason; the processes the tests start keep the variable.
sys.dont_write_bytecode = False


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


FAST = (
    "tests/core/",
    "tests/events/",
    "tests/report/",
    "tests/audit/",
    "tests/actions/",
    "tests/store/",
    "tests/engine/",
    "tests/test_layout.py",
    "tests/test_vocabulary.py",
    "tests/test_clock.py",
    "tests/test_errors.py",
    "tests/test_deploy.py",
)
"""What `make test-fast` runs (`-m fast`), chosen by kind, not by a clock: the sans-I/O core and its events,
the audit chain, the stores on real SQLite and PostgreSQL, the engine in-process on loopback, and the checks of
the layout and the words. A directory listed here holds tests that start no process: a test in it that starts
one (a subprocess, the CLI through tests/prefork.py) fails (`_fast_tests_start_no_process`), so a test that runs
whole commands cannot join the inner loop unnoticed; it goes to a directory not listed (tests/e2e/, tests/cli/,
...) or marks its module slow. Everything else (end-to-end, isolation, hostile, providers, MCP, bench, console,
fleet, transport, the documents run as written) runs in `make test` only."""

SLOW = (
    "tests/engine/test_combine_providers.py",
    "tests/engine/test_learning.py",
)
"""Files of a fast directory that start no process but wait seconds each (a provider held to its timeout, a
hundred jobs' history): left to `make test`. A module may also mark itself (`pytestmark = pytest.mark.slow`)."""


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """`-m fast` does not import what it would deselect anyway: collecting the whole suite costs seconds."""
    if config.getoption("markexpr", "") != "fast":
        return None
    where = collection_path.relative_to(config.rootpath).as_posix()
    return not any(entry.startswith(where + "/") or where.startswith(entry) or where == entry for entry in FAST)


ONE_WORKER = ("tests/integrations/test_openai_agents.py", "tests/integrations/test_langgraph.py")
"""Files whose tests xdist hands to one worker: each imports, inside its tests, an agent framework that costs ~3 s of
CPU in every worker that imports it (at the files' top, every worker paid it when collecting)."""

_MODULE_FIXTURE = re.compile(r"""@pytest\.fixture\([^)]*scope=["'](?:module|package)["']""")


def _shares_a_fixture(path: str, rootdir: Path, known: dict[str, bool]) -> bool:
    """The module defines a fixture of module (or package) scope: its tests are one unit of work. Spread over the
    workers, each worker that ran one of them built the fixture again (a home of 10,000 operations, a benchmark run,
    a worker fleet: 5-11 s each), and a worker that ran them between other modules' tests built it again each
    time pytest tore it down."""
    if path not in known:
        try:
            known[path] = bool(_MODULE_FIXTURE.search((rootdir / path).read_text(encoding="utf-8")))
        except OSError:
            known[path] = False
    return known[path]


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`-n`'s default distribution (`load`), but the tests of `ONE_WORKER` as one unit of work, and those of each
    module with a module-scoped fixture as another. (`--dist loadgroup` with `xdist_group` marks would say so, but
    pytest-xdist 3.8 renames the test by `item._nodeid`, which pytest 9.2 no longer reads: the marks group nothing.)
    xdist's scope scheduler hands out the units with the most tests first, then the rest in collection order
    (`_HEAVY_FIRST`)."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    known: dict[str, bool] = {}

    class OneWorkerFor(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path in ONE_WORKER:
                return "ONE_WORKER"
            return path if _shares_a_fixture(path, config.rootpath, known) else nodeid

    return OneWorkerFor(config, log)


_HEAVY_FIRST = (
    "tests/docs/",
    "tests/bench/",
    "tests/e2e/",
    "tests/hostile/",
    "tests/console/",
    "tests/isolation/",
    "tests/mcp/",
    "tests/integrations/",
    "tests/providers/",
    "tests/transport/",
    "tests/fleet/",
    "tests/cli/",
    "tests/test_",
)
"""Where the tests that take seconds each live (whole processes and fleets, real servers and real deadlines): run
first, so that the last minute of a run is the many small in-process tests spread over every worker, not one worker
finishing a 30-second test while the others wait. (Within these, files keep their order; a file's tests stay
together.)"""


def _weight(item: pytest.Item) -> int:
    for rank, where in enumerate(_HEAVY_FIRST):
        if item.nodeid.startswith(where):
            return rank
    return len(_HEAVY_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_weight)  # stable: each file's tests keep their order
    for item in items:
        if item.nodeid.startswith(SLOW):
            item.add_marker(pytest.mark.slow)
        if item.nodeid.startswith(FAST) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.fast)


class StartsAProcess(AssertionError):
    pass


@pytest.fixture(autouse=True)
def _fast_tests_start_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule of `FAST`, kept by the test itself rather than by a timer: a fast test that starts a process fails."""
    if request.node.get_closest_marker("fast") is None:
        return

    def refused(*args: object, **kwargs: object) -> None:
        raise StartsAProcess(
            f"{request.node.nodeid} starts a process: a test in tests/conftest.py's FAST directories runs in"
            " `make test-fast` and must not; move it out of them or mark its module slow"
        )

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refused)
    monkeypatch.setattr(prefork, "run", refused)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def pytest_configure(config: pytest.Config) -> None:
    """The suite tests what the stop signals do to a watch and a worker, so it starts from their defaults, not from
    how it was launched: a shell that runs it in the background without job control (`(make test &)`, a script's
    `&`) hands it SIGINT ignored, `nohup` SIGHUP, and every process it starts inherits that (seen: five signal
    tests failed so, "SIGINT was SIG_IGN when the test began"). pollwarden itself keeps an ignored signal ignored,
    as `nohup` asks (the failures above were that)."""
    for signum in _STOP_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_IGN:
            signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)


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
