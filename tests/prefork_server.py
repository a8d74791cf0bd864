"""The zygote of tests/prefork.py: import what `python -m pollwarden` imports before `main()`, then fork a
child per request. Standard library only and one thread (a fork copies only the calling thread); no other
state, so whatever a child sees beyond that import is what its request gave it.

A request is one SOCK_SEQPACKET message (argv, env, cwd, umask) carrying three descriptors: the child's
stdout, its stderr, and a reply pipe on which this process writes the child's pid, then its wait status.
It is run with `-c` (tests/prefork.py says how), so that it runs in the interpreter's `__main__`.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import sys
import threading


def _serve(control: socket.socket) -> tuple[dict[str, object], list[int]] | None:
    """Until the test process goes away; in a child, return its request and descriptors instead."""
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    replies: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, reply fd)
    while True:
        for key, _ in selector.select():
            if key.fileobj is control:
                message, fds, _, _ = socket.recv_fds(control, 1 << 16, 3)
                if not message:
                    return None
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    control.close()
                    for pidfd, (_, reply) in replies.items():
                        os.close(pidfd)
                        os.close(reply)
                    return json.loads(message), fds
                os.close(fds[0])
                os.close(fds[1])
                os.write(fds[2], json.dumps({"pid": pid}).encode() + b"\n")
                pidfd = os.pidfd_open(pid)
                replies[pidfd] = (pid, fds[2])
                selector.register(pidfd, selectors.EVENT_READ)
            else:
                pid, reply = replies.pop(key.fd)
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status, usage = os.wait4(pid, 0)
                os.write(reply, json.dumps({"status": status, "max_rss_kb": usage.ru_maxrss}).encode() + b"\n")
                os.close(reply)


def _become(request: dict[str, object], fds: list[int]) -> None:
    """Take the request's process state, as a fresh `python -m pollwarden` would have started with it."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in (devnull, *fds):
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
    del sys.path[0]  # `-c`'s '': a child puts its own working directory there
    import pollwarden.cli  # noqa: F401  (the import `python -m pollwarden` does before main)

    if threading.active_count() != 1:  # a fork would copy a thread-holding process without its threads
        sys.exit(f"pollwarden.cli started threads on import: {threading.enumerate()}")
    control.send(b"ready")
    served = _serve(control)
    if served is None:
        sys.exit(0)
    _become(*served)
    del served, control
    _run_as_main()
