"""`pollwarden mcp --connect SOCKET`: the agent's end, a pipe between its stdio and the broker, holding nothing.

It carries MCP lines both ways unchanged. While the broker is down, each request is answered at once with a
JSON-RPC error naming the socket (a notification is dropped: nothing waits for it); the next request connects
again, and replays the client's `initialize` (its answer is kept from the client, which already has one) and
`notifications/initialized`, so the agent's host sees one session throughout. A request in flight when the broker
goes away is answered with an error saying it may or may not have been carried out.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
from typing import Any, BinaryIO

from .protocol import VERSION, ProtocolError, connect, encode, read_message, unreachable

BROKER_DOWN = -32000
"""The JSON-RPC code of the shim's own answers (-32000 to -32099 are the server's to define)."""
REPLAY_ID = "pollwarden-shim-initialize"
REPLAY_SECONDS = 30.0


def _message(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _is_request(message: dict[str, Any] | None) -> bool:
    return message is not None and "method" in message and message.get("id") is not None


class Shim:
    def __init__(self, path: str, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self.path = path
        self._stdin = stdin
        self._stdout = stdout
        self._out = threading.Lock()
        self._state = threading.Lock()
        self._conn: socket.socket | None = None
        self._pending: dict[object, None] = {}
        self._initialize: dict[str, Any] | None = None
        self._initialized: bytes | None = None
        self._replayed = threading.Event()

    # -- the client's side ---------------------------------------------------------------------------

    def run(self) -> int:
        problem = self._connect(replay=False)
        if problem is not None:
            print(f"pollwarden mcp: {problem}; each call is answered with this until it is up", file=sys.stderr)
        for line in iter(self._stdin.readline, b""):
            if not line.strip():
                continue
            message = _message(line)
            if message is not None and message.get("method") == "initialize":
                self._initialize = message
            elif message is not None and message.get("method") == "notifications/initialized":
                self._initialized = line if line.endswith(b"\n") else line + b"\n"
            self._forward(line if line.endswith(b"\n") else line + b"\n", message)
        with self._state:
            conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        return 0

    def _forward(self, line: bytes, message: dict[str, Any] | None) -> None:
        conn = self._conn
        problem = None
        if conn is None:
            replay = self._initialize is not None and (message or {}).get("method") != "initialize"
            problem = self._connect(replay=replay)
            conn = self._conn
        if conn is None:
            if _is_request(message):
                assert message is not None
                self._error(message["id"], f"{problem}. Nothing was done; calling again reconnects")
            return
        if _is_request(message):
            assert message is not None
            with self._state:
                self._pending[message["id"]] = None
        try:
            conn.sendall(line)
        except OSError as exc:
            self._lost(conn, exc)

    # -- the broker's side ---------------------------------------------------------------------------

    def _connect(self, *, replay: bool) -> str | None:
        """Connect and say hello (and replay the session's start); None when connected, else why not."""
        try:
            conn = connect(self.path, REPLAY_SECONDS)
        except OSError as exc:
            return unreachable(self.path, exc)
        source = conn.makefile("rb")
        try:
            conn.sendall(encode({"pollwarden": VERSION, "mode": "mcp"}))
            hello = read_message(source)
        except (OSError, ProtocolError) as exc:
            source.close()
            conn.close()
            return f"the broker at {self.path} did not answer ({exc})"
        if not hello.get("ok"):
            source.close()
            conn.close()
            said = str(hello.get("stderr") or "refused").strip().removeprefix("pollwarden: error: ")
            return f"the broker at {self.path} refused this session: {said}"
        conn.settimeout(None)
        self._replayed.clear()
        threading.Thread(target=self._read, args=(conn, source), name="pollwarden-shim-read", daemon=True).start()
        try:
            if replay and self._initialize is not None:
                conn.sendall(encode({**self._initialize, "id": REPLAY_ID}))
                if not self._replayed.wait(REPLAY_SECONDS):
                    raise TimeoutError("no answer to the session's initialize")
                if self._initialized is not None:
                    conn.sendall(self._initialized)
        except OSError as exc:
            conn.close()
            return f"the broker at {self.path} did not take the session again ({exc})"
        self._conn = conn
        return None

    def _read(self, conn: socket.socket, source: BinaryIO) -> None:
        why: Exception | None = None
        try:
            for line in iter(source.readline, b""):
                message = _message(line)
                if message is not None and "method" not in message:
                    if message.get("id") == REPLAY_ID:
                        self._replayed.set()
                        continue
                    with self._state:
                        self._pending.pop(message.get("id"), None)
                self._write(line)
        except OSError as exc:
            why = exc
        finally:
            source.close()
        self._lost(conn, why)

    def _lost(self, conn: socket.socket, why: Exception | None) -> None:
        with self._state:
            if self._conn is conn:
                self._conn = None
            pending, self._pending = list(self._pending), {}
        with contextlib.suppress(OSError):
            conn.close()
        said = f" ({why})" if why else ""
        for request_id in pending:
            self._error(
                request_id,
                f"the broker at {self.path} went away before answering{said}; the call may or may not have been"
                " carried out (list_operations tells once it is back); calling again reconnects",
            )

    def _error(self, request_id: object, text: str) -> None:
        self._write(encode({"jsonrpc": "2.0", "id": request_id, "error": {"code": BROKER_DOWN, "message": text}}))

    def _write(self, line: bytes) -> None:
        with self._out, contextlib.suppress(OSError, ValueError):
            self._stdout.write(line if line.endswith(b"\n") else line + b"\n")
            self._stdout.flush()


def run_shim(path: str) -> int:
    return Shim(path, sys.stdin.buffer, sys.stdout.buffer).run()
