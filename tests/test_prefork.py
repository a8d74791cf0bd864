"""The suite's forked commands (tests/prefork.py) answer as fresh `python -m pollwarden` processes do."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import prefork


def _fresh(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, bytes, bytes]:
    ran = subprocess.run(
        [sys.executable, "-m", "pollwarden", *args], capture_output=True, env=env, cwd=cwd, timeout=300,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return ran.returncode, ran.stdout, ran.stderr


def _forked(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, bytes, bytes]:
    if os.environ.get("POLLWARDEN_TEST_FRESH") == "1":
        pytest.skip("POLLWARDEN_TEST_FRESH=1 runs every command fresh: nothing forked to compare")
    before = os.getcwd()
    os.chdir(cwd)
    try:
        forked = prefork.run(args, env, timeout=300)
    finally:
        os.chdir(before)
    assert forked.forked, "a fresh interpreter ran it: nothing was compared"
    return forked.returncode, forked.stdout, forked.stderr


@pytest.mark.parametrize(
    "args",
    [["--version"], ["status"], ["status", "nope"], ["frobnicate"], ["story", "op\udcff"], ["watch", "--json"]],
    ids=["version", "status", "unknown-operation", "usage", "not-utf8", "watch-without-contract"],
)
def test_a_forked_command_answers_byte_for_byte_as_a_fresh_one(args: list[str], tmp_path: Path) -> None:
    """Exit code, stdout and stderr; the home is relative, so the working directory and the environment
    (POLLWARDEN_HOME) must both be the caller's."""
    env = {**os.environ, "POLLWARDEN_HOME": "home"}
    (tmp_path / "fresh").mkdir()
    (tmp_path / "forked").mkdir()
    fresh = _fresh(args, env, tmp_path / "fresh")
    forked = _forked(args, env, tmp_path / "forked")
    assert forked == fresh
    assert forked[0] in (0, 2), forked
    assert (tmp_path / "forked" / "home").exists() == (tmp_path / "fresh" / "home").exists()


@pytest.mark.parametrize("fresh", [False, True], ids=["forked", "fresh"])
def test_a_command_past_its_timeout_is_killed_and_reported_as_subprocess_run_reports_it(
    fresh: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if fresh:
        monkeypatch.setenv("POLLWARDEN_TEST_FRESH", "1")
    elif os.environ.get("POLLWARDEN_TEST_FRESH") == "1":
        pytest.skip("POLLWARDEN_TEST_FRESH=1 runs every command fresh")
    env = {**os.environ, "POLLWARDEN_HOME": str(tmp_path)}
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as hung:
        prefork.run(["simulate", "--port", "0"], env, timeout=2 if fresh else 5)
    assert time.monotonic() - started < 60  # a guard: `simulate` runs until killed, so only the kill ends it
    assert isinstance(hung.value.stdout, bytes) and isinstance(hung.value.stderr, bytes)
    # A forked child prints its first line at once, well inside 5 s however loaded the machine; a fresh one has
    # an interpreter to start and may not have printed yet.
    if not fresh:
        assert b"simulated provider listening" in hung.value.stdout


@pytest.mark.parametrize(
    "startup", [{"PYTHONIOENCODING": "latin-1"}, {"LC_ALL": "C", "LANG": "C"}], ids=["latin-1", "C"]
)
def test_a_zygote_starts_as_a_fresh_interpreter_would_in_the_callers_environment(
    startup: dict[str, str], tmp_path: Path
) -> None:
    """Stdio encodings are fixed at start-up: the same environment, the same bytes for a non-ASCII name."""
    env = {**os.environ, "POLLWARDEN_HOME": str(tmp_path / "home"), **startup}
    args = ["status", "op-été"]
    forked = _forked(args, env, tmp_path)
    assert forked == _fresh(args, env, tmp_path)
    spelled = "\u00e9".encode(startup.get("PYTHONIOENCODING", "utf-8"))
    assert forked[0] == 2 and spelled in forked[2], forked


_READS_AT_IMPORT = """
import os, sys, threading
from collections.abc import MutableMapping


class Recorder(MutableMapping):
    def __init__(self, real):
        self.real, self.reads = real, []

    def _note(self, key):
        caller = sys._getframe(2).f_code.co_filename
        if "/pollwarden/" in caller:
            self.reads.append((key, caller))

    def __getitem__(self, key):
        self._note(key)
        return self.real[key]

    def __setitem__(self, key, value):
        self.real[key] = value

    def __delitem__(self, key):
        del self.real[key]

    def __iter__(self):
        return iter(self.real)

    def __len__(self):
        return len(self.real)

    def get(self, key, default=None):
        self._note(key)
        return self.real.get(key, default)

    def __contains__(self, key):
        self._note(key)
        return key in self.real


recorder = os.environ = Recorder(os.environ)
sys.argv = ["-c", "argv is not read at import"]
import importlib, pkgutil
import pollwarden, pollwarden.cli
for found in pkgutil.walk_packages(pollwarden.__path__, "pollwarden."):
    if found.name != "pollwarden.__main__":
        importlib.import_module(found.name)
assert threading.active_count() == 1, threading.enumerate()
assert recorder.reads == [], recorder.reads
"""


def test_no_pollwarden_module_reads_the_environment_or_starts_a_thread_when_imported() -> None:
    """What lets a zygote import them all before the command's environment is known (tests/prefork.py)."""
    # Importing every module takes seconds quiet and took over 60 s at load 20: the bound is only for a hang.
    ran = subprocess.run([sys.executable, "-c", _READS_AT_IMPORT], capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr


_OTHER_USER_ASKS = """
import json, socket, sys
conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
conn.connect("\\0" + sys.argv[1])
request = {"argv": ["--version"], "env": {}, "cwd": "/", "umask": 0o22}
try:
    socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
    print(conn.recv(4096).decode() or "closed")
except OSError as exc:
    print(f"closed: {exc}")
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another OS user takes root")
def test_a_zygote_forks_only_for_its_own_user() -> None:
    """A zygote's address is an abstract socket, which no file mode guards and /proc/net/unix lists to every user: a
    zygote started as the approver (tests/isolation/users.py) forked for the agent user whatever it asked, as the
    approver. It answers its own user only (SO_PEERCRED)."""
    zygote = prefork.zygote_for(dict(os.environ))
    if zygote is None:
        pytest.skip("no zygote can serve here")
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-S", "-P"]
    ran = subprocess.run(
        [*as_nobody, "-c", _OTHER_USER_ASKS, zygote.address], capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("closed"), f"the zygote answered another user: {ran.stdout!r}"
    mine = prefork.run(["--version"], dict(os.environ), timeout=60)
    assert mine.forked and mine.returncode == 0  # its own user's commands still fork
