"""`pollwarden broker`: the one process that holds the credential, the keys and the approvals, and the socket
through which agents and people reach it.

Each connection is read in a thread of its own: the kernel names its uid and pid (`peers.peer_of`), the lists name
its role, and its first line says what it wants: an MCP session (an agent's, served by the same server as the
stand-alone `pollwarden mcp`, with the agent's uid, user name and pid in every session and call record) or a
person's command (`people`). The broker's own record (`@broker`) keeps its start, every refusal and every
approver's command.
"""

from __future__ import annotations

import contextlib
import grp
import logging
import os
import socket
import stat
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..core.contract.parse import Contract
from ..errors import PollwardenError
from ..events import BrokerStarted, ConnectionRefused, NewEvent
from ..home.operating import open_store
from ..home.outbox import delivering_home
from .peers import Peer, Who, peer_of, role_of, user_name
from .people import answer_command
from .protocol import HELLO_SECONDS, VERSION, ProtocolError, encode, read_message

log = logging.getLogger("pollwarden.broker")

BROKER_LOG = "@broker"
"""The broker's own audit log: '@' starts no operation id, so it is nobody's operation."""
SOCKET_MODE = 0o660
MAX_SESSIONS_PER_USER = 32
"""Agent sessions one user may hold open at once: a session lasts as long as its agent keeps it, so without a cap
one agent could take every connection and leave the approvers none."""
MAX_CONNECTIONS = 256
"""Connections served at once (a thread each); one more is answered and closed, so a flood cannot exhaust the
broker's threads while the people it serves wait."""
ACCEPT_POLL_SECONDS = 0.2


class SocketError(PollwardenError):
    """The socket cannot be served (another broker listens there, or the path is not a socket)."""


@dataclass
class BrokerService:
    home: Path
    contracts: Mapping[str, Contract]
    problems: list[str]
    environ: Mapping[str, str]
    agents: Who
    approvers: Who
    socket_path: Path
    socket_gid: int
    console_login: Callable[[str], str | None] = lambda user: None
    stopping: threading.Event = field(default_factory=threading.Event)
    _listener: socket.socket | None = None
    _sessions: dict[Any, socket.socket] = field(default_factory=dict)
    """Each agent session's `Broker` and its connection, ended when the broker stops."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _slots: threading.BoundedSemaphore = field(default_factory=lambda: threading.BoundedSemaphore(MAX_CONNECTIONS))

    # -- the socket ----------------------------------------------------------------------------------

    def bind(self) -> None:
        path = self.socket_path
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise SocketError(f"--socket {path} exists and is not a socket: remove it or give another path")
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(path))
            except OSError:
                path.unlink()  # a socket left by a broker that is gone
            else:
                raise SocketError(f"another broker is serving {path}: stop it first, or give another --socket")
            finally:
                probe.close()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is born 0600 and opened to its group below, never wider
        try:
            listener.bind(str(path))
        finally:
            os.umask(old)
        os.chown(path, -1, self.socket_gid)
        os.chmod(path, SOCKET_MODE)
        listener.listen(64)
        listener.settimeout(ACCEPT_POLL_SECONDS)
        self._listener = listener

    def serve(self) -> None:
        """Accept until `stopping` is set; each connection in a thread of its own."""
        listener = self._listener
        assert listener is not None, "bind() first"
        self.audit(
            BrokerStarted.prepared(
                {
                    "user": user_name(os.geteuid()),
                    "pid": os.getpid(),
                    "server": f"pollwarden {__version__}",
                    "agents": str(self.agents),
                    "approvers": str(self.approvers),
                    "socket": str(self.socket_path),
                    "contracts": [{"name": n, "approval": c.approval} for n, c in sorted(self.contracts.items())],
                }
            )
        )
        # The webhooks of the decisions its sessions open, and the witness's heads, go out from the outbox (with the
        # broker's environment: the webhook's secret is the broker's, like the credential).
        with contextlib.ExitStack() as deliveries:
            try:
                deliveries.enter_context(delivering_home(self.home, "broker", environ=self.environ))
            except Exception as exc:  # the store could not be opened: said, and the agents are served all the same
                log.warning("the outbox's delivery loop could not start (%s); deliveries wait for another process", exc)
            self._accept(listener)

    def _accept(self, listener: socket.socket) -> None:
        try:
            while not self.stopping.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    if self.stopping.is_set():
                        break
                    raise
                if not self._slots.acquire(blocking=False):
                    with contextlib.suppress(OSError), conn:
                        self._reply(conn, 1, f"the broker serves {MAX_CONNECTIONS} connections at once; try again")
                    continue
                threading.Thread(
                    target=self._connection, args=(conn,), name="pollwarden-broker-conn", daemon=True
                ).start()
        finally:
            self.close()

    def close(self) -> None:
        self.stopping.set()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
            with contextlib.suppress(OSError):
                self.socket_path.unlink()
        with self._lock:
            sessions = list(self._sessions.items())
        for broker, conn in sessions:
            broker.stopping.set()
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)  # its session's reader sees the end and the session closes

    # -- one connection ------------------------------------------------------------------------------

    def _connection(self, conn: socket.socket) -> None:
        try:
            self._serve_one(conn)
        finally:
            self._slots.release()

    def _serve_one(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as source:
            try:
                peer = peer_of(conn)
            except OSError as exc:
                log.warning("a connection whose peer the kernel did not name was closed: %s", exc)
                return
            conn.settimeout(HELLO_SECONDS)
            try:
                hello = read_message(source)
            except (ProtocolError, OSError) as exc:
                log.info("connection of %s (uid %s, pid %s) closed: %s", peer.user, peer.uid, peer.pid, exc)
                with contextlib.suppress(OSError):
                    conn.sendall(encode({"ok": False, "exit": 2, "stderr": f"pollwarden: error: {exc}\n"}))
                return
            conn.settimeout(None)
            role = role_of(peer, self.agents, self.approvers)
            mode = hello.get("mode")
            try:
                if hello.get("pollwarden") != VERSION:
                    self._reply(conn, 2, f"this broker speaks {VERSION}; run the same pollwarden version")
                elif mode == "mcp":
                    self._mcp(conn, source, peer, role)
                elif mode == "command":
                    answer = answer_command(
                        hello.get("argv"),
                        peer,
                        role,
                        approvers=str(self.approvers),
                        home=self.home,
                        environ=self.environ,
                        audit=self.audit,
                        console_login=self.console_login,
                    )
                    conn.sendall(encode(answer.to_json()))
                else:
                    self._reply(conn, 2, "a connection says mode 'mcp' or 'command' first")
            except OSError as exc:  # the client went away mid-answer: nothing of the broker's is hurt
                log.info("connection of %s (uid %s) ended: %s", peer.user, peer.uid, exc)

    def _reply(self, conn: socket.socket, code: int, message: str) -> None:
        conn.sendall(encode({"ok": False, "exit": code, "stderr": f"pollwarden: error: {message}\n"}))

    def _mcp(self, conn: socket.socket, source: Any, peer: Peer, role: str | None) -> None:
        if role != "agent":
            why = (
                f"{peer.user} (uid {peer.uid}) is an approver: a person answers the agents here, never acts as one"
                if role == "approver"
                else f"{peer.user} (uid {peer.uid}) is not an agent of this broker (agents: {self.agents})"
            )
            self.audit(ConnectionRefused.prepared({"peer": peer.to_json(), "mode": "mcp", "why": why}))
            self._reply(conn, 2, f"refused: {why}")
            return
        from ..mcp_server.broker import Broker
        from ..mcp_server.server import serve_connection
        from ..mcp_server.session import Separation

        with self._lock:
            held = sum(1 for b in self._sessions if b.principal and b.principal.get("uid") == peer.uid)
        if held >= MAX_SESSIONS_PER_USER:
            self._reply(conn, 2, f"{peer.user} holds {held} agent sessions already, the most one user may; end one")
            return

        me = user_name(os.geteuid())
        broker = Broker(
            self.contracts,
            self.home,
            environ=self.environ,
            problems=self.problems,
            separation=Separation(
                principal=peer.to_json(),
                isolation=f"broker (the agent is {peer.user}, uid {peer.uid}; the credential, keys and approvals"
                f" are held by {me}, and only one of {self.approvers} may approve)",
                approvers=f"one of: {self.approvers}",
                person_flags=f"--connect {self.socket_path}",
            ),
        )
        with self._lock:
            self._sessions[broker] = conn
        log.info("agent session %s for %s (uid %s, pid %s)", broker.session_id, peer.user, peer.uid, peer.pid)
        try:
            conn.sendall(encode({"ok": True, "session": broker.session_id, "isolation": broker.isolation}))
            with conn.makefile("wb") as sink:
                serve_connection(broker, source, sink)
        finally:
            with self._lock:
                self._sessions.pop(broker, None)
            log.info("agent session %s ended", broker.session_id)

    # -- the broker's record -------------------------------------------------------------------------

    def audit(self, event: NewEvent) -> None:
        """Into the broker's log; a record that cannot be written is said on stderr (the refusal stands)."""
        try:
            store = open_store(self.home, keys="write")
            try:
                store.append(BROKER_LOG, event, store.db_now())
            finally:
                store.close()
        except Exception:
            log.exception("the broker's %s record could not be written", event.KIND)


def socket_group(name: str | None) -> int:
    """The socket's group: --socket-group, else the broker's primary group; KeyError for an unknown name."""
    if name is None:
        return os.getegid()
    return grp.getgrnam(name).gr_gid
