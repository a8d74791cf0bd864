"""Who is on the other end of the broker's socket, as the kernel says, and which of the broker's lists names them.

Nothing a client sends says who it is: the uid, gid and pid come from the socket itself (`SO_PEERCRED` on Linux,
`LOCAL_PEERCRED`/`LOCAL_PEERPID` on macOS), and a user's groups from the system's user database. `--agents` and
`--approvers` are lists of user names and `@group` names; one user on both lists is refused at start, and a
connection whose user is on both (a group changed since) is treated as neither.
"""

from __future__ import annotations

import grp
import os
import pwd
import socket
import struct
import sys
from dataclasses import dataclass
from typing import Literal

from ..errors import PollwardenError

Role = Literal["agent", "approver"]


@dataclass(frozen=True)
class Peer:
    """A connected process: its uid, primary gid and pid from the kernel, and the uid's user name."""

    uid: int
    gid: int
    pid: int
    user: str

    def to_json(self) -> dict[str, int | str]:
        return {"uid": self.uid, "user": self.user, "gid": self.gid, "pid": self.pid}


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def peer_of(connection: socket.socket) -> Peer:
    """The kernel's word on who connected; OSError when this platform cannot say (the connection is refused)."""
    if sys.platform.startswith("linux"):
        raw = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, gid = struct.unpack("3i", raw)
        return Peer(uid=uid, gid=gid, pid=pid, user=user_name(uid))
    if sys.platform == "darwin":  # getpeereid(3) is LOCAL_PEERCRED; the pid is LOCAL_PEERPID
        sol_local, local_peercred, local_peerpid = 0, 0x001, 0x002
        raw = connection.getsockopt(sol_local, local_peercred, struct.calcsize("IIh16I"))
        _version, uid, ngroups, *groups = struct.unpack("IIh16I", raw)
        pid = struct.unpack("i", connection.getsockopt(sol_local, local_peerpid, 4))[0]
        return Peer(uid=uid, gid=groups[0] if ngroups else -1, pid=pid, user=user_name(uid))
    raise OSError(f"this platform ({sys.platform}) does not tell a Unix socket's peer; the broker needs Linux or macOS")


class WhoError(PollwardenError):
    """A --agents or --approvers list that names nobody, or someone the system does not know."""


@dataclass(frozen=True)
class Who:
    """A list of user names and `@group` names, as given to --agents or --approvers."""

    users: frozenset[str]
    groups: frozenset[str]

    @classmethod
    def parse(cls, flag: str, text: str) -> Who:
        users: set[str] = set()
        groups: set[str] = set()
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            if item.startswith("@"):
                try:
                    grp.getgrnam(item[1:])
                except KeyError:
                    raise WhoError(f"{flag}: no group named {item[1:]!r} on this system (groups are @name)") from None
                groups.add(item[1:])
            else:
                try:
                    pwd.getpwnam(item)
                except KeyError:
                    raise WhoError(f"{flag}: no user named {item!r} on this system") from None
                users.add(item)
        if not users and not groups:
            raise WhoError(f"{flag}: name at least one user or @group (a comma list, e.g. alice,@ops)")
        return cls(frozenset(users), frozenset(groups))

    def __str__(self) -> str:
        return ", ".join(sorted(self.users) + sorted(f"@{g}" for g in self.groups))

    def includes(self, uid: int) -> bool:
        """The uid's user is named, or belongs (primary or supplementary) to a named group, as the system says now."""
        try:
            entry = pwd.getpwuid(uid)
        except KeyError:
            return False
        if entry.pw_name in self.users:
            return True
        if not self.groups:
            return False
        member_of = {g for g in _group_names(os.getgrouplist(entry.pw_name, entry.pw_gid))}
        return bool(member_of & self.groups)

    def members(self) -> set[str]:
        """Every user this list names, directly or through a group (primary members included)."""
        names = set(self.users)
        for name in self.groups:
            group = grp.getgrnam(name)
            names.update(group.gr_mem)
            names.update(p.pw_name for p in pwd.getpwall() if p.pw_gid == group.gr_gid)
        return names


def _group_names(gids: list[int]) -> list[str]:
    names = []
    for gid in gids:
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return names


def role_of(peer: Peer, agents: Who, approvers: Who) -> Role | None:
    """What this peer may do here; None for a user on neither list, or on both."""
    agent, approver = agents.includes(peer.uid), approvers.includes(peer.uid)
    if agent == approver:
        return None
    return "agent" if agent else "approver"
