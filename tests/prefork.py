"""`python -m pollwarden ARGS` as a real process that skips the interpreter's start-up and the imports.

A fresh `python -m pollwarden` spends most of its CPU importing (~0.4 s of the ~0.5 s a `status` costs on the
2-core CI machine), and the suite runs over a thousand of them. A pytest process therefore keeps *zygotes*
(tests/prefork_server.py): interpreters that have imported `pollwarden.cli`, as `python -m pollwarden` does
before `main()` runs, and then the modules a command imports when it needs them (the server packages only in
the zygote that serves them), and done nothing else. A command is a `fork()` of one that then takes the
caller's argv, environment, working directory and umask, /dev/null for stdin and pipes for stdout and stderr
(what `subprocess.run(capture_output=True, stdin=DEVNULL)` gives), and runs `pollwarden.__main__` as `-m`
does: its own pid, exit code, signals, descriptors and memory, ended by the interpreter's own shutdown. What
it does not repeat is the imports, whose result would be the same: no pollwarden module reads the
environment, the working directory or argv, or starts a thread, when it is imported (the zygote checks the
threads). Which modules a command imports is tests/test_imports.py's to check, in fresh interpreters.

What an interpreter fixes at start-up (stdio encodings, the locale, sys.path) comes from the environment, so
there is one zygote per start-up environment (PYTHON*, LC_*, LANG, LANGUAGE, HOME), started in it. A library
that spawns the command itself (the MCP SDK's stdio client) runs `spawn_args(...)`: a small helper
(tests/prefork_attach.py) that has a zygote fork the command onto the helper's own stdio.

The broker's tests (tests/isolation/users.py) keep a zygote per OS user of theirs, started as that user
(`zygote_for_user`): a command forked from it has the user's uid and groups, as a fresh one run as the user has.

Fresh interpreters stay where start-up is the point: the import tests, signals and TTYs, workers and servers
(the tests that start those call `subprocess` themselves), and a command too large for one message.
`POLLWARDEN_TEST_FRESH=1` runs every command fresh, to compare.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_SERVER = Path(__file__).with_name("prefork_server.py")
_ATTACH = Path(__file__).with_name("prefork_attach.py")
_MAX_MESSAGE = 60_000  # one SOCK_SEQPACKET message, well inside the socket's buffer
_STARTUP_VARIABLES = ("LANG", "LANGUAGE", "HOME")  # and every PYTHON* and LC_* variable (HOME: the user site)


@dataclass(frozen=True)
class Finished:
    """What `subprocess.run(capture_output=True)` gives, plus the peak memory `wait4` reports."""

    returncode: int
    stdout: bytes
    stderr: bytes
    max_rss_kb: int
    forked: bool  # False: a fresh interpreter ran it


def _startup_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(("PYTHON", "LC_")) or k in _STARTUP_VARIABLES}


def _umask() -> int:
    """This process's umask, read without setting it (os.umask would change it for every thread meanwhile)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    raise RuntimeError("no Umask line in /proc/self/status")


class Zygote:
    """One per pytest process and startup environment, started on first use; any thread may run commands."""

    def __init__(
        self, env: dict[str, str], servers: tuple[str, ...], python: Sequence[str] = (sys.executable,)
    ) -> None:
        """`python`: the interpreter, and what starts it (tests/isolation/users.py's switch to an OS user)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.env = env
        self.address = f"pollwarden-prefork-{os.getpid()}-{secrets.token_hex(8)}"
        # Its stdout is not a terminal, as a captured command's is not; `-c` runs it in the interpreter's own
        # `__main__`, the module `-m` runs pollwarden in.
        self._proc = subprocess.Popen(
            [*python, "-c", "import sys; exec(compile(open(sys.argv[1]).read(), sys.argv[1], 'exec'))",
             str(_SERVER), str(theirs.fileno()), self.address, *servers],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd="/",
            env=env,
        )  # fmt: skip
        theirs.close()
        ours.settimeout(60)
        started = ours.recv(64)
        ours.settimeout(None)
        self._control = ours
        self.ready = started == b"ready"
        if not self.ready:  # a fresh interpreter serves instead; why is on stderr for whoever looks
            self._proc.wait(timeout=30)
            sys.stderr.write(f"prefork server unavailable: {self._proc.communicate()[1].decode()[-2000:]}\n")

    def alive(self) -> bool:
        return self.ready and self._proc.poll() is None

    def run(self, message: bytes, timeout: float | None) -> Finished:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect("\0" + self.address)
        stdin = os.open(os.devnull, os.O_RDONLY)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            socket.send_fds(conn, [message], [stdin, out_w, err_w])
        finally:
            for fd in (stdin, out_w, err_w):
                os.close(fd)
        with conn:
            pid = json.loads(conn.recv(4096))["pid"]
            stdout, stderr = _read_to_the_end(out_r, err_r, pid, timeout)
            ended = conn.recv(4096)  # the wait status, sent when the server reaped the child
        if not ended:
            raise RuntimeError("the prefork server went away during a command")
        answer = json.loads(ended)
        return Finished(os.waitstatus_to_exitcode(answer["status"]), stdout, stderr, answer["max_rss_kb"], True)

    def close(self) -> None:
        self._control.close()  # the server reads end-of-file and exits
        self.wait()

    def wait(self) -> None:
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stderr is not None:
            self._proc.stderr.close()


def _read_to_the_end(out_r: int, err_r: int, pid: int, timeout: float | None) -> tuple[bytes, bytes]:
    """`communicate()` with subprocess.run's timeout: both pipes read to their ends; past `timeout` the child is
    killed, its pipes read to their ends still (it is reaped by whoever waits for it), and TimeoutExpired raised."""
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    deadline = None if timeout is None else time.monotonic() + timeout
    killed = False
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        try:
            while selector.get_map():
                left = None if deadline is None or killed else max(0.0, deadline - time.monotonic())
                ready = selector.select(left)
                if not ready:  # the deadline passed
                    os.kill(pid, signal.SIGKILL)
                    killed = True
                for key, _ in ready:
                    data = os.read(key.fd, 65536)
                    if data:
                        chunks[key.fd].append(data)
                    else:
                        selector.unregister(key.fd)
        finally:
            for fd in chunks:
                os.close(fd)
    stdout, stderr = b"".join(chunks[out_r]), b"".join(chunks[err_r])
    if killed:
        raise subprocess.TimeoutExpired(["python", "-m", "pollwarden"], timeout or 0, stdout, stderr)
    return stdout, stderr


def _run_fresh(args: list[str], env: dict[str, str], timeout: float | None) -> Finished:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    with open(os.devnull, "rb") as stdin:
        proc = subprocess.Popen([sys.executable, "-m", "pollwarden", *args], stdin=stdin, stdout=out_w, stderr=err_w,
                                env=env)  # fmt: skip
    os.close(out_w)
    os.close(err_w)
    try:
        stdout, stderr = _read_to_the_end(out_r, err_r, proc.pid, timeout)
    finally:
        _, status, usage = os.wait4(proc.pid, 0)  # here, for its peak memory: Popen must not wait for it again
        proc.returncode = os.waitstatus_to_exitcode(status)
    return Finished(proc.returncode, stdout, stderr, usage.ru_maxrss, False)


_zygotes: dict[tuple[frozenset[tuple[str, str]], tuple[str, ...]], Zygote] = {}
_zygotes_lock = threading.Lock()
_own_zygotes: list[Zygote] = []
"""The callers' own zygotes (zygote_for_user), listed for tests/cpu_per_file.py to count."""


def zygote_for(env: dict[str, str], servers: tuple[str, ...] = ()) -> Zygote | None:
    """The zygote that starts as a fresh interpreter would in `env`, or None if none can serve; `servers`
    names the server packages it imports too (`mcp_server` for `pollwarden mcp`)."""
    if os.environ.get("POLLWARDEN_TEST_FRESH") == "1" or not hasattr(os, "pidfd_open"):
        return None
    key = (frozenset(_startup_env(env).items()), servers)
    with _zygotes_lock:
        server = _zygotes.get(key)
        if server is None:
            server = _zygotes[key] = Zygote(env, servers)
    return server if server.alive() else None


def zygote_for_user(env: dict[str, str], python: Sequence[str], servers: tuple[str, ...] = ()) -> Zygote | None:
    """A zygote of the caller's own (not shared: `python` starts it as another OS user), or None if none can
    serve; the caller closes it."""
    if os.environ.get("POLLWARDEN_TEST_FRESH") == "1" or not hasattr(os, "pidfd_open"):
        return None
    server = Zygote(env, servers, python)
    if server.alive():
        with _zygotes_lock:
            _own_zygotes.append(server)
        return server
    server.close()
    return None


def close_all(servers: Sequence[Zygote]) -> None:
    """Every one told first, then waited for: their interpreters' shutdowns overlap."""
    for server in servers:
        server._control.close()
    for server in servers:
        server.wait()
    with _zygotes_lock:
        _own_zygotes[:] = [z for z in _own_zygotes if z not in servers]


def shutdown() -> None:
    with _zygotes_lock:
        shared = list(_zygotes.values())
        _zygotes.clear()
    close_all(shared)


def spawn_args(args: list[str], env: dict[str, str], servers: tuple[str, ...] = ()) -> list[str]:
    """The arguments of `sys.executable` that run `pollwarden ARGS` in `env` for a library that spawns it: the
    attach helper (tests/prefork_attach.py) on a zygote when one serves, else `-m pollwarden` itself."""
    server = zygote_for(env, servers)
    if server is None:
        return ["-m", "pollwarden", *args]
    return attach_args(server, args)


def attach_args(server: Zygote, args: list[str]) -> list[str]:
    """The interpreter's arguments that have `server` fork `pollwarden ARGS` onto the interpreter's own stdio."""
    return ["-S", "-P", str(_ATTACH), server.address, *args]


def request(args: list[str], env: dict[str, str]) -> bytes | None:
    """The message that asks a zygote for `python -m pollwarden ARGS` in `env` here, or None if too large."""
    message = json.dumps({"argv": args, "env": env, "cwd": os.getcwd(), "umask": _umask()}).encode()
    return message if len(message) < _MAX_MESSAGE else None


def run(args: list[str], env: dict[str, str], *, timeout: float | None = None) -> Finished:
    """`python -m pollwarden ARGS` in `env` with stdin /dev/null and both outputs captured, forked from a zygote
    when one serves, else in a fresh interpreter; TimeoutExpired (the child killed) past `timeout`."""
    message = request(args, env)
    server = zygote_for(env) if message is not None else None
    return _run_fresh(args, env, timeout) if server is None or message is None else server.run(message, timeout)
