"""`python -m pollwarden ARGS` as a real process that skips the interpreter's start-up and the CLI's imports.

A fresh `python -m pollwarden` spends most of its CPU importing (~0.4 s of the ~0.5 s a `status` costs on the
2-core CI machine), and the suite runs over a thousand of them. Each pytest process therefore keeps one
*zygote* (tests/prefork_server.py): an interpreter that has done exactly what `python -m pollwarden` does
before `main()` runs, import `pollwarden.cli`, and nothing else. Every command is a `fork()` of it that then
takes the caller's argv, environment, working directory and umask, /dev/null for stdin and pipes for stdout
and stderr (what `subprocess.run(capture_output=True, stdin=DEVNULL)` gives), and runs `pollwarden.__main__`
as `-m` does: its own pid, exit code, signals, descriptors and memory, ended by the interpreter's own shutdown.
What it does not repeat is the import, whose result would be the same.

Fresh interpreters stay where start-up is the point: the import tests, signals and TTYs, workers and servers
(the tests that start those call `subprocess` themselves). A command also runs fresh when its environment
changes how an interpreter starts (PYTHON*, locale variables) or is too large for one message;
`POLLWARDEN_TEST_FRESH=1` runs every command fresh, to compare.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

_SERVER = Path(__file__).with_name("prefork_server.py")
_MAX_MESSAGE = 60_000  # one SOCK_SEQPACKET message, well inside the socket's buffer
_STARTUP_VARIABLES = ("LANG", "LANGUAGE")  # and every PYTHON* and LC_* variable


@dataclass(frozen=True)
class Finished:
    """What `subprocess.run(capture_output=True)` gives, plus the peak memory `wait4` reports."""

    returncode: int
    stdout: bytes
    stderr: bytes
    max_rss_kb: int


def _startup_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(("PYTHON", "LC_")) or k in _STARTUP_VARIABLES}


def _umask() -> int:
    """This process's umask, read without setting it (os.umask would change it for every thread meanwhile)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    raise RuntimeError("no Umask line in /proc/self/status")


class Zygote:
    """One per pytest process, started on first use; thread-safe (a test may run a command from a thread)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._env = dict(os.environ)
        # Its stdout is not a terminal, as a captured command's is not; `-c` runs it in the interpreter's own
        # `__main__`, the module `-m` runs pollwarden in.
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; exec(compile(open(sys.argv[1]).read(), sys.argv[1], 'exec'))",
             str(_SERVER), str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd="/",
            env=self._env,
        )  # fmt: skip
        theirs.close()
        ours.settimeout(60)
        started = ours.recv(64)
        ours.settimeout(None)
        self._socket = ours
        self._lock = threading.Lock()
        self.ready = started == b"ready"
        if not self.ready:  # the fresh interpreter serves instead; why is on stderr for whoever looks
            self._proc.wait(timeout=30)
            sys.stderr.write(f"prefork server unavailable: {self._proc.communicate()[1].decode()[-2000:]}\n")

    def serves(self, env: dict[str, str], message: bytes) -> bool:
        alive = self.ready and self._proc.poll() is None
        return alive and len(message) < _MAX_MESSAGE and _startup_env(env) == _startup_env(self._env)

    def run(self, message: bytes, timeout: float | None) -> Finished:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        reply_r, reply_w = os.pipe()
        try:
            with self._lock:
                socket.send_fds(self._socket, [message], [out_w, err_w, reply_w])
        finally:
            for fd in (out_w, err_w, reply_w):
                os.close(fd)
        return _collect(out_r, err_r, reply_r, timeout)

    def close(self) -> None:
        self._socket.close()  # the server reads end-of-file and exits
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stderr is not None:
            self._proc.stderr.close()


def _collect(out_r: int, err_r: int, reply_r: int, timeout: float | None) -> Finished:
    """`communicate()` with subprocess.run's timeout: read both pipes and the server's reply (the child's pid,
    then its wait status) to their ends; past `timeout` the child is killed, reaped, and TimeoutExpired raised."""
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: [], reply_r: []}
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
                    pid = json.loads(b"".join(chunks[reply_r]).split(b"\n")[0])["pid"]
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
    lines = b"".join(chunks[reply_r]).splitlines()
    if len(lines) != 2:
        raise RuntimeError(f"the prefork server went away during a command: {lines!r}")
    if killed:
        raise subprocess.TimeoutExpired(["python", "-m", "pollwarden"], timeout or 0, stdout, stderr)
    ended = json.loads(lines[1])
    return Finished(os.waitstatus_to_exitcode(ended["status"]), stdout, stderr, ended["max_rss_kb"])


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()


def shutdown() -> None:
    global _zygote
    with _zygote_lock:
        if _zygote is not None:
            _zygote.close()
            _zygote = None


def run_pollwarden(args: list[str], env: dict[str, str], *, timeout: float | None = None) -> Finished | None:
    """The command forked from this process's zygote, or None when a fresh interpreter must run it instead."""
    global _zygote
    if os.environ.get("POLLWARDEN_TEST_FRESH") == "1" or not hasattr(os, "pidfd_open"):
        return None
    with _zygote_lock:
        if _zygote is None:
            _zygote = Zygote()
        server = _zygote
    message = json.dumps({"argv": args, "env": env, "cwd": os.getcwd(), "umask": _umask()}).encode()
    if not server.serves(env, message):
        return None
    return server.run(message, timeout)
