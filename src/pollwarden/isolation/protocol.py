"""The broker's socket, as bytes: one JSON line from the client says what it wants; the broker answers with one.

    client: {"pollwarden": "broker/1", "mode": "mcp"}                 then MCP's own JSON-RPC lines, both ways
    client: {"pollwarden": "broker/1", "mode": "command", "argv": [...]}   a person's command
    broker: {"ok": true, ...} | {"ok": false, "exit": 2, "stderr": "..."}   (a command's answer: exit, stdout, stderr)

Nothing in a client's line says who it is: the broker asks the kernel (`peers.peer_of`).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from typing import Any, BinaryIO

from ..errors import PollwardenError

VERSION = "broker/1"
MAX_LINE = 1024 * 1024
"""A hello line (a command's words) or an answer (a command's output is cut to this before it is sent)."""
HELLO_SECONDS = 10.0
"""How long a connection may take to say what it wants before the broker closes it."""


class ProtocolError(PollwardenError):
    """A line that is not this protocol's: the connection is answered once and closed."""


def encode(message: Mapping[str, Any]) -> bytes:
    return json.dumps(dict(message), separators=(",", ":")).encode("utf-8") + b"\n"


def read_message(source: BinaryIO) -> dict[str, Any]:
    line = source.readline(MAX_LINE + 1)
    if not line:
        raise ProtocolError("the connection closed before saying anything")
    if len(line) > MAX_LINE:
        raise ProtocolError(f"a line longer than {MAX_LINE} bytes")
    try:
        message = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ProtocolError("a line that is not JSON text") from None
    if not isinstance(message, dict):
        raise ProtocolError("a JSON line that is not an object")
    return message


def connect(path: str, timeout: float | None) -> socket.socket:
    """A connection to the broker at `path`; OSError (FileNotFoundError, PermissionError, ...) when there is none."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(timeout)
        conn.connect(path)
    except BaseException:
        conn.close()
        raise
    return conn


def unreachable(path: str, exc: OSError) -> str:
    """Why there is no broker at `path`, and what a person does about it."""
    if isinstance(exc, FileNotFoundError):
        return f"no broker socket at {path} (is `pollwarden broker` running with --socket {path}?)"
    if isinstance(exc, PermissionError):
        return (
            f"the broker socket {path} refused this user (permission denied): it is open to the broker's group only;"
            " ask for membership (and log in again once added)"
        )
    if isinstance(exc, ConnectionRefusedError):
        return f"nothing listens at {path}: the broker is not running (start it, e.g. systemctl start pollwarden)"
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"the broker at {path} did not answer in time"
    return f"the broker at {path} cannot be reached ({exc.__class__.__name__}: {exc.strerror or exc})"
