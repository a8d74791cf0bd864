"""`python -S -P prefork_attach.py ADDRESS ARGS...`: stand in for `python -m pollwarden ARGS...` where a library
spawns the command itself (the MCP SDK's stdio client): the zygote at ADDRESS (tests/prefork.py) forks the
command onto this process's own stdin, stdout and stderr, with this process's environment and working
directory; signals sent here are passed on, and this process exits as the command did. Without a zygote it
becomes a fresh `python -m pollwarden ARGS...` (exec). Standard library only, no site: it starts in ~20 ms.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys


def main() -> None:
    address, args = sys.argv[1], sys.argv[2:]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect("\0" + address)
    except OSError:
        os.execv(sys.executable, [sys.executable, "-m", "pollwarden", *args])
    umask = os.umask(0)
    os.umask(umask)
    request = {"argv": args, "env": dict(os.environ), "cwd": os.getcwd(), "umask": umask}
    socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
    pid = json.loads(conn.recv(4096))["pid"]
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda n, _: os.kill(pid, n))
    answer = conn.recv(4096)
    if not answer:
        sys.exit("the prefork server went away during the command")
    code = os.waitstatus_to_exitcode(json.loads(answer)["status"])
    if code < 0:  # died of a signal: so does this process
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


if __name__ == "__main__":
    main()
