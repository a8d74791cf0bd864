"""A hostile HTTP/1.1 provider on a raw loopback socket: each job id gets a scripted answer, byte for byte.

A framework server cannot lie about Content-Length, send a status line a byte at a time, skip the status
line or leave a forged second response in the pipe; a socket can. One instance hosts hostile and
well-behaved jobs side by side, and records every request (path, headers, arrival, when the exchange ended
and who ended it), so a test compares what the provider saw with what pollwarden counted.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType

MAX_HEAD = 256 * 1024
IDLE_SECONDS = 10.0  # a client that opened a connection and sends nothing is dropped after this


@dataclass(frozen=True)
class Send:
    data: bytes


@dataclass(frozen=True)
class Pause:
    seconds: float


@dataclass(frozen=True)
class Trickle:
    """`data` in pieces of `size` bytes, `every` seconds apart: a slow peer, not a dead one."""

    data: bytes
    every: float
    size: int = 1


Step = Send | Pause | Trickle


@dataclass(frozen=True)
class Answer:
    steps: tuple[Step, ...]
    # Leave the connection open after the last step: leftover bytes then sit in the client's pipe, and a
    # client that reuses the connection reads them as the answer to its next request.
    keep_open: bool = False

    @property
    def playing_seconds(self) -> float:
        """How long the script takes when the client waits for all of it."""
        total = 0.0
        for step in self.steps:
            if isinstance(step, Pause):
                total += step.seconds
            elif isinstance(step, Trickle):
                total += step.every * ((len(step.data) + step.size - 1) // step.size)
        return total


@dataclass
class Request:
    job_id: str | None
    method: str
    path: str
    headers: dict[str, str]  # lower-case names; the last of repeated names wins
    arrived_at: float  # time.monotonic() when the request head was complete
    ended_at: float | None = None  # when the answer was played out or the client went away
    client_left: bool = False  # the client closed before the script was over

    @property
    def seconds(self) -> float | None:
        return None if self.ended_at is None else self.ended_at - self.arrived_at


# A script answers the n-th request (0-based) for its job; it sees the request, so it can echo headers.
Script = Callable[[Request, int], Answer]


def in_turn(*answers: Answer) -> Script:
    """The n-th request gets the n-th answer; the last one repeats."""

    def script(request: Request, n: int) -> Answer:
        return answers[min(n, len(answers) - 1)]

    return script


def http(
    body: bytes = b"",
    *,
    status: int = 200,
    reason: str = "OK",
    headers: Iterable[tuple[str, str]] = (),
    length: int | None = None,
    close: bool = True,
) -> bytes:
    """One response as bytes; `length` lies about Content-Length when given."""
    lines = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json"]
    lines += [f"{name}: {value}" for name, value in headers]
    lines.append(f"Content-Length: {len(body) if length is None else length}")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def answer(data: bytes, *, keep_open: bool = False) -> Answer:
    return Answer((Send(data),), keep_open=keep_open)


_NOT_SCRIPTED = answer(http(b'{"error":"no script for this job"}', status=404, reason="Not Found"))


@dataclass
class HostileServer:
    """Serves scripts on 127.0.0.1 (port 0) until the `with` block ends; every thread stops with it."""

    scripts: dict[str, Script] = field(default_factory=dict)
    max_connections: int = 64
    _requests: list[Request] = field(default_factory=list)
    _lock: threading.Condition = field(default_factory=threading.Condition)
    _stop: threading.Event = field(default_factory=threading.Event)
    _open: set[socket.socket] = field(default_factory=set)
    _threads: list[threading.Thread] = field(default_factory=list)
    _listener: socket.socket | None = None

    @property
    def url(self) -> str:
        assert self._listener is not None, "use the server in a with block"
        host, port = self._listener.getsockname()[:2]
        return f"http://{host}:{port}"

    def add(self, job_id: str, script: Script) -> None:
        with self._lock:
            self.scripts[job_id] = script

    def requests(self, job_id: str | None = None) -> list[Request]:
        with self._lock:
            return [r for r in self._requests if job_id is None or r.job_id == job_id]

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every request received has been answered or abandoned (the client's close is seen at once)."""
        with self._lock:
            return self._lock.wait_for(lambda: all(r.ended_at is not None for r in self._requests), timeout)

    def __enter__(self) -> HostileServer:
        listener = socket.create_server(("127.0.0.1", 0))
        listener.settimeout(0.1)  # the accept loop looks at the stop flag this often
        self._listener = listener
        self._spawn(self._accept_loop)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        with self._lock:
            for conn in self._open:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        for thread in list(self._threads):
            thread.join(timeout=5)
        if self._listener is not None:
            self._listener.close()

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name="hostile-server")
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                crowded = len(self._open) >= self.max_connections
                if not crowded:
                    self._open.add(conn)
            if crowded:
                conn.close()
                continue
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        request: Request | None = None
        played = False
        try:
            pending = b""
            while not self._stop.is_set():
                head, pending = self._read_head(conn, pending)
                if head is None:
                    return
                request = _parse(head)
                with self._lock:
                    n = sum(1 for r in self._requests if r.job_id == request.job_id)
                    self._requests.append(request)
                    script = self.scripts.get(request.job_id or "")
                reply = _NOT_SCRIPTED if script is None else script(request, n)
                played = self._play(conn, reply)
                self._ended(request, played)
                request = None
                if not played or not reply.keep_open:
                    return
        except OSError:
            return
        finally:
            if request is not None:  # the connection broke mid-answer
                self._ended(request, False)
            with self._lock:
                self._open.discard(conn)
            conn.close()

    def _ended(self, request: Request, played: bool) -> None:
        with self._lock:
            request.ended_at = time.monotonic()
            request.client_left = not played
            self._lock.notify_all()

    def _read_head(self, conn: socket.socket, pending: bytes) -> tuple[bytes | None, bytes]:
        idle_until = time.monotonic() + IDLE_SECONDS
        while b"\r\n\r\n" not in pending:
            if len(pending) > MAX_HEAD or self._stop.is_set() or time.monotonic() > idle_until:
                return None, b""
            readable, _, _ = select.select([conn], [], [], 0.1)
            if readable:
                data = conn.recv(65536)
                if not data:
                    return None, b""
                pending += data
        head, _, rest = pending.partition(b"\r\n\r\n")
        return head, rest

    def _play(self, conn: socket.socket, script: Answer) -> bool:
        """Play the steps; False as soon as the client closes (a pause watches for that, it does not sleep)."""
        for step in script.steps:
            if isinstance(step, Send):
                if not _send(conn, step.data):
                    return False
            elif isinstance(step, Pause):
                if self._client_left_within(conn, step.seconds):
                    return False
            else:
                for start in range(0, len(step.data), step.size):
                    if not _send(conn, step.data[start : start + step.size]):
                        return False
                    if self._client_left_within(conn, step.every):
                        return False
        return True

    def _client_left_within(self, conn: socket.socket, seconds: float) -> bool:
        until = time.monotonic() + seconds
        while not self._stop.is_set():
            remaining = until - time.monotonic()
            if remaining <= 0:
                return False
            readable, _, _ = select.select([conn], [], [], min(remaining, 0.1))
            if readable:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return True
                if not data:
                    return True
        return True


def _send(conn: socket.socket, data: bytes) -> bool:
    try:
        conn.sendall(data)
    except OSError:
        return False
    return True


def _parse(head: bytes) -> Request:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    job_id = path.split("?")[0].rsplit("/", 1)[-1] if path.startswith("/jobs/") else None
    return Request(job_id=job_id, method=method, path=path, headers=headers, arrived_at=time.monotonic())
