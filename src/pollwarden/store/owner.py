"""Who holds a lease: `kind/host:pid:nonce:boot:pidns`, and whether such a holder is a process that is gone.

Interfaces name themselves with `process_owner(kind)` when they claim; the store asks `holder_dead` before it
makes a claimer wait out a lease, and `status` asks `owner_alive` of an operation's last watcher. All live here,
beside neither backend, because both backends and every interface use them. The kind says what the holder is
(a `pollwarden watch`, the Python API, an MCP server, a worker, a person's decision): it is what an operator
needs to know first.

A pid names a process only within one PID namespace of one boot of one kernel, and a host name is no more than
what a machine calls itself: containers that share their host's network share its name too, and a cloned VM
keeps the name of the machine it was cloned from. So an owner also carries the kernel's boot id and the inode of
its PID namespace, and a holder counts as dead only where that can be proved: same host, same boot, same PID
namespace, and its pid gone. Anywhere else (another namespace, another boot, a platform without /proc, an owner
written before these fields existed) nothing is known, and its lease runs out instead.

Owners written before kinds existed (`host:pid:nonce`) and before boots and namespaces (`kind/host:pid:nonce`)
still parse; they are never proved dead.
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass
from typing import Literal

from ..core.digits import whole_number

__all__ = [
    "Owner",
    "OwnerKind",
    "holder_dead",
    "owner_alive",
    "parse_owner",
    "process_owner",
    "this_host",
    "this_place",
]

OwnerKind = Literal["watch", "api", "mcp", "worker", "decide", "enqueue", "broker", "console", "outbox", "hooks"]

BOOT_ID = "/proc/sys/kernel/random/boot_id"
PID_NAMESPACE = "/proc/self/ns/pid"


@dataclass(frozen=True)
class Owner:
    kind: str | None
    host: str
    pid: int | None
    boot: str | None = None
    """The first 16 hex digits of the kernel's boot id where the holder ran; None if it did not say."""
    pidns: str | None = None
    """The inode of the holder's PID namespace; None if it did not say."""

    def describe(self) -> str:
        """`worker on db-1 (pid 4242)`: what status and the console show."""
        what = self.kind or "owner"
        pid = f" (pid {self.pid})" if self.pid is not None else ""
        return f"{what} on {self.host}{pid}"

    def unseen(self) -> str:
        """Why this process cannot tell whether the owner lives: where it ran, as `status` words it."""
        if self.host != this_host():
            return "on another host"
        boot, pidns = this_place()
        if self.boot is None or self.pidns is None or boot is None or pidns is None:
            return "not verifiable from here"
        if self.boot != boot:
            return "from another boot of this host"
        return "in another PID namespace"


def parse_owner(text: str) -> Owner:
    kind, slash, rest = text.partition("/")
    if not slash:
        kind, rest = "", text
    host, _, tail = rest.partition(":")
    fields = tail.split(":")
    pid_text = fields[0]
    boot = fields[2] or None if len(fields) > 3 else None
    pidns = fields[3] or None if len(fields) > 3 else None
    # Within a pid's reach: a stored owner is read back from a row anyone with the database could have written.
    pid = whole_number(pid_text, 10)
    return Owner(kind or None, host, pid, boot, pidns)


def this_host() -> str:
    return socket.gethostname()


@functools.cache
def this_place() -> tuple[str | None, str | None]:
    """This process's boot (16 hex digits of the boot id) and PID namespace (its inode), or None for either that
    cannot be read (no /proc: not Linux, or /proc not mounted). Neither changes while a process runs."""
    try:
        with open(BOOT_ID, encoding="ascii") as handle:
            boot: str | None = handle.read().strip().replace("-", "")[:16].lower() or None
    except (OSError, UnicodeDecodeError):
        boot = None
    if boot is not None and not all(ch in "0123456789abcdef" for ch in boot):
        boot = None
    try:
        pidns: str | None = str(os.stat(PID_NAMESPACE).st_ino)
    except OSError:
        pidns = None
    return boot, pidns


def process_owner(kind: OwnerKind, *, pid: int | None = None) -> str:
    """kind/host:pid:nonce:boot:pidns — the nonce tells two incarnations of one pid apart; the boot and the PID
    namespace say where the pid means that process (empty where they cannot be read). `pid`: another process of
    this namespace (tests name a dead one)."""
    boot, pidns = this_place()
    return (
        f"{kind}/{this_host()}:{os.getpid() if pid is None else pid}:{os.urandom(4).hex()}:{boot or ''}:{pidns or ''}"
    )


def holder_dead(owner: str) -> bool:
    """A holder proved to be gone (this host, this boot, this PID namespace, its pid gone) cannot be sending: its
    lease need not be waited out. Anything less proves nothing, and the lease runs out."""
    return owner_alive(owner) is False


def owner_alive(owner: str) -> bool | None:
    """True or False for a holder whose pid this process can look up (same host, boot and PID namespace): its
    process exists and is no zombie. None wherever its pid means something else, or nothing known."""
    parsed = parse_owner(owner)
    if parsed.pid is None or parsed.host != this_host():
        return None
    boot, pidns = this_place()
    if boot is None or pidns is None or (parsed.boot, parsed.pidns) != (boot, pidns):
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
    except OverflowError:  # past a C int: no process has it, but nothing here says whose it was
        return None
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return False
