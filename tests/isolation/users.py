"""Real OS users for the broker's tests: a service user that runs the broker, an agent and an approver.

Created with `useradd --system` (so only where the suite runs as root, as CI does) and removed at the end. They
run the project from what they can reach: the system Python, this tree's `src` copied under a 0755 directory, and
the test interpreter's site-packages (in place where every directory above it lets others through, a copy of
hard links or files otherwise: an interpreter under root's 0700 home is no use to them).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from mcp.client.stdio import StdioServerParameters, stdio_client

import pollwarden
from mcp import ClientSession
from tests import prefork
from tests.mcp.support import Agent, agent_contract

SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
TOKEN_ENV = "PW_BROKER_TEST_TOKEN"
READY_SECONDS = 60.0
"""A cap on waiting for a broker to bind its socket (it is told by the socket itself, not by a pause)."""


READ_PROBE = r"""
import json, os, sys
home, secrets_file, pid, secret = sys.argv[1:5]
tried = {}
def attempt(name, fn):
    try:
        fn()
        tried[name] = "read"
    except OSError as exc:
        tried[name] = type(exc).__name__
attempt("home listing", lambda: os.listdir(home))
attempt("database", lambda: open(os.path.join(home, "pollwarden.db"), "rb").read(1))
attempt("keys", lambda: os.listdir(os.path.join(home, "keys")))
attempt("secrets file", lambda: open(secrets_file, "rb").read())
attempt("broker environment", lambda: open(f"/proc/{pid}/environ", "rb").read())
attempt("broker memory", lambda: open(f"/proc/{pid}/mem", "rb").read(1))
found = []
try:
    found.append("argv") if secret.encode() in open(f"/proc/{pid}/cmdline", "rb").read() else None
except OSError:
    pass
if secret in "".join(os.environ.values()):
    found.append("own environment")
for top in sys.argv[5:]:
    for folder, _, names in os.walk(top):
        for name in names:
            try:
                if secret.encode() in open(os.path.join(folder, name), "rb").read():
                    found.append(os.path.join(folder, name))
            except OSError:
                pass
print(json.dumps({"tried": tried, "found": found}))
"""
"""What an agent with a shell tries to read (argv: home, secrets file, broker pid, the secret, folders to search):
prints {"tried": {what: "read" or the error's name}, "found": [where the secret was seen]}."""


def why_not() -> str | None:
    """Why these tests cannot run here, or None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root: the broker's tests create OS users (useradd --system) for the broker, an agent, an approver"
    for tool in ("useradd", "userdel", "setpriv"):
        if shutil.which(tool) is None:
            return f"needs {tool} to create and switch to OS users"
    if not any(os.access(p, os.X_OK) for p in SYSTEM_PYTHONS):
        return "needs a system Python the created users can run (/usr/bin/python3)"
    return None


def _reachable(path: Path) -> bool:
    """Whether a user with no special rights can read `path` (every directory above it lets others through)."""
    path = path.resolve()
    for parent in [*reversed(path.parents)]:
        if not stat.S_IMODE(parent.stat().st_mode) & 0o001:
            return False
    return bool(stat.S_IMODE(path.stat().st_mode) & 0o005 == 0o005)


def _text(output: bytes) -> str:
    """What `subprocess.run(text=True)` makes of a command's output (the locale's UTF-8, universal newlines)."""
    return output.decode().replace("\r\n", "\n").replace("\r", "\n")


def _copy_tree(source: Path, target: Path) -> None:
    try:
        subprocess.run(["cp", "-al", str(source), str(target)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, symlinks=True)


@dataclass
class Users:
    base: Path
    python: str
    pythonpath: str
    service: str
    agent: str
    approver: str
    forks: bool = True
    """Commands forked from each user's zygote (`zygote`); False: each in a fresh interpreter, as a person's and an
    agent's commands start (the broker measure's full run)."""
    _made: list[str] = field(default_factory=list)
    _zygotes: dict[str, prefork.Zygote | None] = field(default_factory=dict)
    _zygotes_lock: threading.Lock = field(default_factory=threading.Lock)

    def uid(self, name: str) -> int:
        return pwd.getpwnam(name).pw_uid

    def env(self, **extra: str) -> dict[str, str]:
        """What each process of theirs starts with: nothing of this process's but the path to the project."""
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "PYTHONPATH": self.pythonpath,
            "LANG": "C.UTF-8",
            "HOME": "/nonexistent",
            "PYTHONDONTWRITEBYTECODE": "1",
            **extra,
        }

    def argv(self, user: str, *command: str) -> list[str]:
        """`command` as `user`: its uid, its primary group and its supplementary groups from the user database."""
        group = pwd.getpwnam(user).pw_gid
        return ["setpriv", f"--reuid={self.uid(user)}", f"--regid={group}", "--init-groups", "--", *command]

    def pollwarden(self, user: str, *args: str) -> list[str]:
        return self.argv(user, self.python, "-m", "pollwarden", *args)

    def run(self, user: str, *args: str, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess[str]:
        """`pollwarden ARGS` as `user`, to the end: forked from the user's zygote when one serves (a fresh
        `python -m pollwarden` spends most of its CPU importing), in a fresh interpreter otherwise."""
        env, argv = self.env(**extra), self.pollwarden(user, *args)
        message = prefork.request(list(args), env)
        zygote = self.zygote(user) if message is not None else None
        if zygote is None or message is None:
            return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        done = zygote.run(message, timeout)
        return subprocess.CompletedProcess(argv, done.returncode, _text(done.stdout), _text(done.stderr))

    def zygote(self, user: str) -> prefork.Zygote | None:
        """The user's own zygote (tests/prefork.py), started as the user in what each process of theirs starts
        with: a command forked from it runs under the user's uid and groups, as a fresh one does. The three users
        only (another runs one command or two: a zygote would cost more than it saves)."""
        if user not in (self.service, self.agent, self.approver):
            return None
        if not self.forks:
            return None
        with self._zygotes_lock:
            if user not in self._zygotes:
                # The service user's serves the broker: it has imported what `pollwarden broker` serves with.
                servers = ("mcp_server",) if user == self.service else ()
                started = prefork.zygote_for_user(self.env(), self.argv(user, self.python), servers)
                self._zygotes[user] = started
            zygote = self._zygotes[user]
        return zygote if zygote is not None and zygote.alive() else None

    def close(self) -> None:
        with self._zygotes_lock:
            started = [zygote for zygote in self._zygotes.values() if zygote is not None]
            self._zygotes.clear()
        prefork.close_all(started)

    def python_as(self, user: str, code: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(user, self.python, "-c", code, *args), env=self.env(), capture_output=True, text=True, timeout=60
        )

    def own(self, path: Path, user: str, mode: int) -> Path:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
        os.chmod(path, mode)
        return path

    def place(self, name: str) -> Path:
        """A fresh directory for one test (root's, 0755: everyone may pass, only root may write)."""
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.base))
        os.chmod(path, 0o755)
        return path


def make_users(prefix: str = "pw") -> Iterator[Users]:
    """The three users, named PREFIX + this process's pid + svc/agt/apr (a process's sets need their own prefix)."""
    python = next(p for p in SYSTEM_PYTHONS if os.access(p, os.X_OK))
    base = Path(tempfile.mkdtemp(prefix="pollwarden-users-", dir="/tmp"))
    os.chmod(base, 0o755)
    stem = f"{prefix}{os.getpid() % 100000}"
    users = Users(base, python, "", f"{stem}svc", f"{stem}agt", f"{stem}apr")
    try:
        src = base / "src"
        src.mkdir(mode=0o755)
        shutil.copytree(Path(pollwarden.__file__).parent, src / "pollwarden")
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True, capture_output=True)
        site = Path(sysconfig.get_paths()["purelib"])
        if not _reachable(site):
            _copy_tree(site, base / "site-packages")
            site = base / "site-packages"
        users.pythonpath = f"{src}:{site}"
        subprocess.run(["chmod", "-R", "a+rX", str(base)], check=True)
        for name, groups in ((users.service, []), (users.agent, [users.service]), (users.approver, [users.service])):
            argv = ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent"]
            argv += ["--shell", "/usr/sbin/nologin", *(["--groups", ",".join(groups)] if groups else []), name]
            subprocess.run(argv, check=True, capture_output=True)
            users._made.append(name)
        yield users
    finally:
        users.close()
        for name in reversed(users._made):
            subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
            subprocess.run(["userdel", name], capture_output=True)
            subprocess.run(["groupdel", name], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class Broker:
    """A `pollwarden broker` running as the service user, until stopped."""

    process: subprocess.Popen[str]
    socket: Path
    home: Path
    stderr: list[str]

    def text(self) -> str:
        return "".join(self.stderr)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_broker(
    users: Users, argv: Sequence[str], socket_path: Path, home: Path, *, fresh: bool = False, **env: str
) -> Broker:
    """`fresh`: in an interpreter of its own, where a test reads the broker's own process (its pid is then the
    broker's, not the attach helper's that has the service user's zygote fork it)."""
    args = ["broker", *argv]
    zygote = None if fresh else users.zygote(users.service)
    process = subprocess.Popen(
        (
            users.pollwarden(users.service, *args)
            if zygote is None
            else users.argv(users.service, users.python, *prefork.attach_args(zygote, args))
        ),
        env=users.env(**env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if line.startswith("pollwarden broker: serving"):
                ready.set()
        ready.set()  # it ended: whoever waits sees why

    threading.Thread(target=read, daemon=True).start()
    broker = Broker(process, socket_path, home, lines)
    if not ready.wait(READY_SECONDS) or process.poll() is not None:
        broker.stop()
        pytest.fail(f"the broker did not start: {broker.text()[-2000:]}")
    return broker


def listening(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.closing(probe):
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def wait_until(predicate: object, timeout: float = 60.0) -> None:
    """For a state another process reaches (a grant written): checked often, bounded generously."""
    assert callable(predicate)
    ends = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > ends:
            pytest.fail("the state waited for never came")
        time.sleep(0.05)


@contextlib.asynccontextmanager
async def shim_agent(users: Users, socket_path: Path, stderr: Path) -> AsyncIterator[Agent]:
    """An MCP client whose server is `pollwarden mcp --connect SOCKET` run as the agent user."""
    args = ["mcp", "--connect", str(socket_path)]
    zygote = users.zygote(users.agent)  # the attach helper runs as the agent too, and the shim it asks for
    argv = (
        users.pollwarden(users.agent, *args)
        if zygote is None
        else users.argv(users.agent, users.python, *prefork.attach_args(zygote, args))
    )
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=users.env())
    with stderr.open("w", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield Agent(session)


@dataclass
class Place:
    """One broker's layout: a home only the service user can enter, root's contracts, the secrets file."""

    root: Path
    home: Path
    contracts: Path
    secrets: Path
    run: Path

    @property
    def socket(self) -> Path:
        return self.run / "broker.sock"


def lay_out(users: Users, provider_url: str, secret: str, deadline: str = "1m") -> Place:
    """A broker's place: contracts `exports` (no approval) and `guarded` (per-call) on `provider_url`, each with
    `deadline`, and the credential `secret` in a secrets file only the service user reads."""
    root = users.place("broker")
    (root / "home").mkdir()  # empty, as systemd's StateDirectory= makes it
    home = users.own(root / "home", users.service, 0o700)
    contracts = root / "contracts"
    common = {"secret_env": TOKEN_ENV, "base_delay": "50ms", "deadline": deadline}
    agent_contract(contracts, provider_url, max_delay="100ms", **common)
    agent_contract(contracts, provider_url, name="guarded", approval="per_call", **common)
    os.chmod(contracts, 0o755)
    for path in contracts.iterdir():
        os.chmod(path, 0o644)
    secrets_file = root / "secrets"
    secrets_file.write_text(f"# the broker's credentials\n{TOKEN_ENV}={secret}\n", encoding="utf-8")
    users.own(secrets_file, users.service, 0o600)
    run = root / "run"
    run.mkdir()
    users.own(run, users.service, 0o755)
    return Place(root, home, contracts, secrets_file, run)


def broker_args(users: Users, place: Place, *extra: str) -> list[str]:
    return [
        "--home",
        str(place.home),
        "--contracts",
        str(place.contracts),
        "--socket",
        str(place.socket),
        "--agents",
        users.agent,
        "--approvers",
        users.approver,
        "--secrets",
        str(place.secrets),
        *extra,
    ]
