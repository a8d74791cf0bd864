"""Keep-alive for status polls, against a real loopback server that serves many requests per connection.

The rule (issue 13, docs/performance.md): a connection is reused only after an exchange that ended cleanly (the
whole answer read, nothing after it, the server not closing), only while idle for well under any server's
keep-alive timeout and with nothing readable on it; and a request on a reused connection that fails before any
answer byte is a delivery-unknown failure, never sent again."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from pollwarden.core import FailureKind, Response, TransportFailure, parse_contract
from pollwarden.core.contract.parse import Contract
from pollwarden.simulator import contract_text
from pollwarden.transport.http import StatusClient
from pollwarden.transport.wire import SocketTransport

BODY = b'{"state": "running"}'
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)

Script = Callable[[socket.socket, int], bool]
"""Answers the n-th request (counted over the whole server, from 0) on `conn`; False closes the connection."""


def clock() -> datetime:
    return datetime.now(UTC)


class KeepAliveServer:
    """Reads request heads one after another on each connection and lets the script answer each."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[bytes] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            buffer = b""
            try:
                while True:
                    while b"\r\n\r\n" not in buffer:
                        data = conn.recv(65536)
                        if not data:
                            return
                        buffer += data
                    head, _, buffer = buffer.partition(b"\r\n\r\n")
                    with self._lock:
                        index = len(self.requests)
                        self.requests.append(head)
                    if not self.script(conn, index):
                        return
            except OSError:
                pass

    def close(self) -> None:
        self._listener.close()


@contextmanager
def holding(
    hold: threading.Event | None = None, answer: bytes | None = OK, *, guard: float = 120.0
) -> Iterator[KeepAliveServer]:
    """A loopback provider whose every request waits for `hold` (if given; `guard` seconds at most), then gets
    `answer` (None: its connection is closed unanswered). Its `requests` are the request heads, as each arrives;
    `hold` is set when it closes."""

    def script(conn: socket.socket, _: int) -> bool:
        if hold is not None:
            hold.wait(guard)
        if answer is None:
            return False
        conn.sendall(answer)
        return True

    server = KeepAliveServer(script)
    try:
        yield server
    finally:
        if hold is not None:
            hold.set()
        server.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Script], KeepAliveServer]]:
    servers: list[KeepAliveServer] = []

    def start(script: Script) -> KeepAliveServer:
        servers.append(KeepAliveServer(script))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def always(answer: bytes) -> Script:
    def script(conn: socket.socket, _: int) -> bool:
        conn.sendall(answer)
        return True

    return script


def contract_for(url: str) -> Contract:
    return parse_contract(contract_text(url, timeout="2s"))


def reusing() -> SocketTransport:
    """Where reuse is the point: idle bound of an hour, so a loaded machine's stall between two polls never makes
    the pooled connection too old (by default 1 s, `KEEPALIVE_IDLE`; the bound itself is tested with 0 s below)."""
    return SocketTransport(max_idle=3600.0)


def polls(server: KeepAliveServer, count: int, transport: SocketTransport | None = None) -> list[Response]:
    with StatusClient(contract_for(server.url), None, clock=clock, transport=transport) as client:
        exchanges = [client.fetch(f"job-{n}") for n in range(count)]
    assert all(isinstance(e, Response) for e in exchanges), exchanges
    return [e for e in exchanges if isinstance(e, Response)]


def test_status_polls_reuse_one_connection(serve: Callable[[Script], KeepAliveServer]) -> None:
    server = serve(always(OK))
    answers = polls(server, 5, reusing())
    assert [a.body for a in answers] == [BODY] * 5
    assert (len(server.requests), server.connections) == (5, 1)
    assert all(b"connection: close" not in head.lower() for head in server.requests)


def test_a_connection_the_server_says_it_closes_is_not_reused(serve: Callable[[Script], KeepAliveServer]) -> None:
    closing = OK.replace(b"Content-Length", b"Connection: close\r\nContent-Length")

    def script(conn: socket.socket, _: int) -> bool:
        conn.sendall(closing)
        return True  # the server leaves it open: the client goes by the header alone

    server = serve(script)
    polls(server, 3)
    assert (len(server.requests), server.connections) == (3, 3)


def test_a_connection_the_server_closed_while_idle_is_not_used(serve: Callable[[Script], KeepAliveServer]) -> None:
    closed = threading.Event()

    def script(conn: socket.socket, _: int) -> bool:
        conn.sendall(OK)
        conn.shutdown(socket.SHUT_WR)  # closes without saying so in the answer, as a server's idle timeout does
        closed.set()
        return False

    server = serve(script)
    with StatusClient(contract_for(server.url), None, clock=clock) as client:
        first = client.fetch("job-1")
        assert closed.wait(30)
        second = client.fetch("job-2")  # the pooled connection is readable (end of stream): a fresh one is used
    assert isinstance(first, Response) and isinstance(second, Response)
    assert (len(server.requests), server.connections) == (2, 2)


def test_a_connection_idle_too_long_is_not_reused(serve: Callable[[Script], KeepAliveServer]) -> None:
    server = serve(always(OK))
    polls(server, 3, SocketTransport(max_idle=0.0))
    assert (len(server.requests), server.connections) == (3, 3)


def test_bytes_after_the_answer_make_the_connection_unusable(serve: Callable[[Script], KeepAliveServer]) -> None:
    server = serve(always(OK + b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))  # an answer nobody asked for
    answers = polls(server, 3)
    assert [a.body for a in answers] == [BODY] * 3
    assert (len(server.requests), server.connections) == (3, 3)


def test_an_answer_not_read_to_its_end_is_not_reused(serve: Callable[[Script], KeepAliveServer]) -> None:
    big = b"x" * 200_000  # more than one read: the client stops at the cap with most of it unread
    server = serve(always(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(big), big)))
    contract = replace(contract_for(server.url), max_body_bytes=1024)
    with StatusClient(contract, None, clock=clock) as client:
        exchanges = [client.fetch("job-1"), client.fetch("job-2")]
    assert all(isinstance(e, Response) and e.truncated for e in exchanges)
    assert server.connections == 2


def test_a_reused_connection_that_fails_before_an_answer_counts_as_sent_and_is_never_retried(
    serve: Callable[[Script], KeepAliveServer],
) -> None:
    def script(conn: socket.socket, index: int) -> bool:
        if index == 0:
            conn.sendall(OK)
            return True
        return False  # the second request was received, then the connection closed without an answer byte

    server = serve(script)
    with StatusClient(contract_for(server.url), None, clock=clock, transport=reusing()) as client:
        first = client.fetch("job-1")
        second = client.fetch("job-2")
    assert isinstance(first, Response)
    assert isinstance(second, TransportFailure) and second.kind is FailureKind.RESET
    assert second.delivery_unknown  # so the core counts it as a request the provider may have seen
    assert (len(server.requests), server.connections) == (2, 1)  # not sent again on a fresh connection


def test_other_requests_never_use_a_pooled_connection(serve: Callable[[Script], KeepAliveServer]) -> None:
    server = serve(always(OK))
    with StatusClient(contract_for(server.url), None, clock=clock) as client:
        client.fetch("job-1")
        sent = client.send("POST", server.url + "/jobs", body=b"{}")
    assert isinstance(sent, Response)
    assert server.connections == 2
    assert b"connection: close" in server.requests[1].lower()


def test_a_forked_child_never_uses_its_parents_connections(serve: Callable[[Script], KeepAliveServer]) -> None:
    server = serve(always(OK))
    transport = reusing()
    with StatusClient(contract_for(server.url), None, clock=clock, transport=transport) as client:
        assert isinstance(client.fetch("job-1"), Response)
        pid = os.fork()
        if pid == 0:  # the child: a fetch of its own must open a connection of its own
            ok = isinstance(client.fetch("job-2"), Response)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert isinstance(client.fetch("job-3"), Response)  # the parent's connection is still its own
    assert (len(server.requests), server.connections) == (3, 2)
