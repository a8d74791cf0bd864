"""Who holds a lease: `host:pid:nonce`, and whether such a holder is a process that is gone.

Interfaces name themselves with `process_owner()` when they claim; the store asks `holder_dead` before it
makes a claimer wait out a lease. Both live here, beside neither backend, because both backends and every
interface use them.
"""

from __future__ import annotations

import os
import socket

__all__ = ["holder_dead", "process_owner", "this_host"]


def this_host() -> str:
    return socket.gethostname()


def process_owner() -> str:
    """host:pid:nonce — the nonce tells two incarnations of one pid apart."""
    return f"{this_host()}:{os.getpid()}:{os.urandom(4).hex()}"


def holder_dead(owner: str) -> bool:
    """A holder on this host whose process is gone cannot be sending: its lease need not be waited out."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != this_host() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return False
