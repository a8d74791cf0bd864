"""Who holds a lease: `kind/host:pid:nonce`, and whether such a holder is a process that is gone.

Interfaces name themselves with `process_owner(kind)` when they claim; the store asks `holder_dead` before it
makes a claimer wait out a lease, and `status` asks `owner_alive` of an operation's last watcher. All live here,
beside neither backend, because both backends and every interface use them. The kind says what the holder is
(a `pollwarden watch`, the Python API, an MCP server, a worker, a person's decision): it is what an operator
needs to know first. Owners written before kinds existed (`host:pid:nonce`) still parse, with no kind.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Literal

__all__ = ["Owner", "OwnerKind", "holder_dead", "owner_alive", "parse_owner", "process_owner", "this_host"]

OwnerKind = Literal["watch", "api", "mcp", "worker", "decide", "enqueue", "broker", "console", "outbox"]


@dataclass(frozen=True)
class Owner:
    kind: str | None
    host: str
    pid: int | None

    def describe(self) -> str:
        """`worker on db-1 (pid 4242)`: what status and the console show."""
        what = self.kind or "owner"
        pid = f" (pid {self.pid})" if self.pid is not None else ""
        return f"{what} on {self.host}{pid}"


def parse_owner(text: str) -> Owner:
    kind, slash, rest = text.partition("/")
    if not slash:
        kind, rest = "", text
    host, _, tail = rest.partition(":")
    pid_text = tail.partition(":")[0]
    return Owner(kind or None, host, int(pid_text) if pid_text.isdigit() else None)


def this_host() -> str:
    return socket.gethostname()


def process_owner(kind: OwnerKind) -> str:
    """kind/host:pid:nonce — the nonce tells two incarnations of one pid apart."""
    return f"{kind}/{this_host()}:{os.getpid()}:{os.urandom(4).hex()}"


def holder_dead(owner: str) -> bool:
    """A holder on this host whose process is gone cannot be sending: its lease need not be waited out."""
    return owner_alive(owner) is False


def owner_alive(owner: str) -> bool | None:
    """True or False for a holder on this host (its process exists and is no zombie); None for another host,
    whose processes cannot be seen from here."""
    parsed = parse_owner(owner)
    if parsed.host != this_host() or parsed.pid is None:
        return None
    pid = parsed.pid
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return False
