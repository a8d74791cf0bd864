"""The zygote of tests/prefork.py: import what `python -m pollwarden` imports before `main()` and the modules
a command imports when it needs them, then fork a child per request. Standard library only and one thread (a
fork copies only the calling thread); no other state, so whatever a child sees beyond those imports is what
its request gave it.

`python -c ... prefork_server.py CONTROL_FD ADDRESS [SERVER...]` (tests/prefork.py says how: `-c` runs it in the
interpreter's `__main__`). It says `ready` on the control socket and exits when that socket closes (the test
process is gone). A request is a connection to the abstract Unix address ADDRESS carrying one SOCK_SEQPACKET
message (argv, env, cwd, umask) with the child's stdin, stdout and stderr; the answers on the connection are
the child's pid, then its wait status and peak memory.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import selectors
import socket
import struct
import sys
import threading

_Request = tuple[dict[str, object], list[int]]


def _import_the_rest(servers: list[str]) -> None:
    """Every other pollwarden module, which a command imports when it needs it: importing one sooner changes
    nothing it does (no module reads the environment, the working directory or argv, or starts a thread, at
    import), only who pays for it, and a command would pay it again in every process. The servers' packages
    are left to the zygotes that serve them (`servers`): their frameworks would make every other fork heavier."""
    import importlib
    import pkgutil

    def walk(package: str, path: list[str]) -> None:
        for found in pkgutil.iter_modules(path, package + "."):
            if found.name == "pollwarden.__main__" or found.name.removeprefix("pollwarden.") in _SERVERS:
                continue
            module = importlib.import_module(found.name)
            if found.ispkg:
                walk(found.name, list(module.__path__))

    import pollwarden

    walk("pollwarden", list(pollwarden.__path__))
    for name in servers:
        importlib.import_module(f"pollwarden.{name}")


_SERVERS = ("mcp_server", "console", "integrations")
"""Left out of the shared zygote; `integrations` is no command's at all (its frameworks are agent code's)."""


def _serve(control: socket.socket, listener: socket.socket) -> _Request | None:
    """Until the test process goes away; in a child, return its request and descriptors instead."""
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(listener, selectors.EVENT_READ)
    asking: set[socket.socket] = set()  # connections whose request has not arrived yet
    waiting: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, the connection to answer)
    while True:
        for key, _ in selector.select():
            if key.fileobj is control:
                if not control.recv(1):
                    return None
            elif key.fileobj is listener:
                conn, _ = listener.accept()
                # An abstract socket has no file mode: anyone may connect. Its own user may ask, and root, which
                # starts the other users' zygotes and could do what they do anyway (tests/isolation/users.py).
                if _peer_uid(conn) not in (os.getuid(), 0):
                    conn.close()
                    continue
                asking.add(conn)
                selector.register(conn, selectors.EVENT_READ)
            elif isinstance(key.fileobj, socket.socket):
                conn = key.fileobj
                selector.unregister(conn)
                asking.discard(conn)
                message, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
                if not message or len(fds) != 3:
                    conn.close()
                    for fd in fds:
                        os.close(fd)
                    continue
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    for other in (control, listener, conn, *asking, *(c for _, c in waiting.values())):
                        other.close()
                    for pidfd in waiting:
                        os.close(pidfd)
                    return json.loads(message), fds
                for fd in fds:
                    os.close(fd)
                _answer(conn, {"pid": pid})
                pidfd = os.pidfd_open(pid)
                waiting[pidfd] = (pid, conn)
                selector.register(pidfd, selectors.EVENT_READ)
            else:
                pid, conn = waiting.pop(key.fd)
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status, usage = os.wait4(pid, 0)
                _answer(conn, {"status": status, "max_rss_kb": usage.ru_maxrss})
                conn.close()


def _peer_uid(conn: socket.socket) -> int:
    """The connecting process's uid, as the kernel gives it (`SO_PEERCRED`: pid, uid, gid)."""
    credentials = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", credentials)[1])


def _answer(conn: socket.socket, message: dict[str, int]) -> None:
    with contextlib.suppress(OSError):  # the asker went away (killed); the child is reaped all the same
        conn.send(json.dumps(message).encode())


def _become(request: dict[str, object], fds: list[int]) -> None:
    """Take the request's process state, as a fresh `python -m pollwarden` would have started with it."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    cwd, umask, env, argv = request["cwd"], request["umask"], request["env"], request["argv"]
    assert isinstance(cwd, str) and isinstance(umask, int) and isinstance(env, dict) and isinstance(argv, list)
    os.chdir(cwd)
    os.umask(umask)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["-m", *argv]
    sys.path.insert(0, cwd)  # `-m` puts the working directory first


def _run_as_main() -> None:
    """What `python -m pollwarden` runs (Modules/main.c calls this very function), in a `__main__` emptied of
    this file's names; its SystemExit, or an uncaught exception, ends the child through the interpreter's own
    shutdown (non-daemon threads, atexit, the flush of stdout), as it ends a fresh one."""
    import runpy

    run = runpy._run_module_as_main  # type: ignore[attr-defined]
    namespace = sys.modules["__main__"].__dict__
    for name in [n for n in namespace if n != "__builtins__"]:
        del namespace[name]
    run("pollwarden")


if __name__ == "__main__":
    control = socket.socket(fileno=int(sys.argv[2]))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind("\0" + sys.argv[3])
    listener.listen(64)
    del sys.path[0]  # `-c`'s '': a child puts its own working directory there
    import pollwarden.cli  # noqa: F401  (the import `python -m pollwarden` does before main)

    _import_the_rest(sys.argv[4:])

    if threading.active_count() != 1:  # a fork would copy a thread-holding process without its threads
        sys.exit(f"pollwarden.cli started threads on import: {threading.enumerate()}")
    # What the import built is left out of every collection a child makes, its shutdown's included: a fresh
    # `pollwarden mcp` spends ~0.5-1 s of its exit collecting it. Python runs no finalizer at exit it promised.
    gc.freeze()
    control.send(b"ready")
    served = _serve(control, listener)
    if served is None:
        sys.exit(0)
    _become(*served)
    del served, control, listener
    _run_as_main()
