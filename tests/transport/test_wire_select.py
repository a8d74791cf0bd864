"""Status polls on one selector (`pollwarden.transport.wire_select`, `http.fetch_all`): several requests at once in one
thread, each held to its own deadline and caps, against real loopback servers; the strict head parser; and https
beside plain http in one batch (tests/transport/test_wire_select_tls.py has the rest of https on the selector).

The hostile answers of tests/transport/test_http.py and the keep-alive rules of tests/transport/test_http_keepalive.py
already run
through the selector (a plain-http `fetch` is a batch of one); these are what only a batch or the parser shows."""

from __future__ import annotations

import errno
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from pollwarden.core import FailureKind, Response, TransportFailure
from pollwarden.transport import http11, messages, wire, wire_round, wire_select
from pollwarden.transport.http import StatusClient, fetch_all
from pollwarden.transport.messages import WireError
from tests.tls import Certificates, TlsServer, trusting
from tests.tls import certificates as certificates  # the fixture: a CA and leaves made once per session
from tests.transport.test_http import (
    TIMEOUT,
    RawServer,
    answer,
    clock,
    contract_for,
    failure_of,
    json_body,
    response_of,
    send,
)
from tests.transport.test_http import serve as serve  # the fixture: a raw-socket server per script
from tests.transport.test_http_keepalive import OK, KeepAliveServer, always
from tests.transport.test_http_keepalive import contract_for as keepalive_contract

RawScript = Callable[[socket.socket, bytes], None]


def by_job(scripts: dict[str, RawScript]) -> RawScript:
    """One server, a different answer for each job (read from the request line)."""

    def script(conn: socket.socket, raw: bytes) -> None:
        target = raw.split(b" ", 2)[1].decode()
        scripts[target.rsplit("/", 1)[1]](conn, raw)

    return script


# -- a batch on one selector -----------------------------------------------------------------------------------------


def test_each_request_of_a_batch_gets_its_own_outcome(serve: Callable[[RawScript], RawServer]) -> None:
    stop = threading.Event()
    server = serve(
        by_job(
            {
                "fast": send(answer(body=json_body("running"))),
                "silent": lambda conn, raw: (stop.wait(10), None)[1],
                "closes": send(b""),
                "garbage": send(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"),
                "cut": send(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{"),
            }
        )
    )
    with StatusClient(contract_for(server.url, timeout=TIMEOUT), None, clock=clock) as client:
        jobs = ["fast", "silent", "closes", "garbage", "cut"]
        results = fetch_all([(client, job, None, None) for job in jobs])
    stop.set()
    fast, silent, closes, garbage, cut = results
    assert isinstance(fast, Response) and fast.body == json_body("running")
    assert isinstance(silent, TransportFailure) and silent.kind is FailureKind.TIMEOUT
    assert isinstance(closes, TransportFailure) and closes.kind is FailureKind.RESET
    assert isinstance(garbage, TransportFailure) and garbage.kind is FailureKind.PROTOCOL
    assert isinstance(cut, TransportFailure) and cut.kind is FailureKind.RESET and "short" in cut.message
    assert len(server.requests) == 5


def test_a_credential_refused_for_one_poll_fails_that_poll_only(serve: Callable[[RawScript], RawServer]) -> None:
    server = serve(send(answer(body=json_body())))
    with StatusClient(contract_for(server.url), "sk-secret", clock=clock) as client:
        ok, elsewhere = fetch_all([(client, "a", None, None), (client, "b", None, "http://127.0.0.2:9/jobs/b")])
    assert isinstance(ok, Response)
    assert isinstance(elsewhere, Exception) and "refusing to send the credential" in str(elsewhere)
    assert len(server.requests) == 1


def test_a_batch_reuses_the_connections_of_the_one_before() -> None:
    server = KeepAliveServer(always(OK))
    try:
        with StatusClient(keepalive_contract(server.url), None, clock=clock) as client:
            for _ in range(3):
                results = fetch_all([(client, f"j{n}", None, None) for n in range(4)])
                assert all(isinstance(r, Response) for r in results)
    finally:
        server.close()
    assert (len(server.requests), server.connections) == (12, 4)


def test_a_reused_connection_closed_on_receipt_in_a_batch_is_reset_and_never_sent_again() -> None:
    def script(conn: socket.socket, index: int) -> bool:
        if index < 2:
            conn.sendall(OK)
            return True
        return False  # the second batch's requests are received, then the connections close unanswered

    server = KeepAliveServer(script)
    try:
        with StatusClient(keepalive_contract(server.url), None, clock=clock) as client:
            first = fetch_all([(client, "a", None, None), (client, "b", None, None)])
            second = fetch_all([(client, "a", None, None), (client, "b", None, None)])
    finally:
        server.close()
    assert all(isinstance(r, Response) for r in first)
    for result in second:
        assert isinstance(result, TransportFailure) and result.kind is FailureKind.RESET and result.delivery_unknown
    assert (len(server.requests), server.connections) == (4, 2)


def test_a_chunked_body_over_the_cap_is_cut_and_its_connection_not_kept() -> None:
    piece = b"x" * 1000
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"3e8\r\n" + piece + b"\r\n"
    server = KeepAliveServer(always(chunked + b"3e8\r\n" + piece + b"\r\n0\r\n\r\n"))
    try:
        contract = replace(keepalive_contract(server.url), max_body_bytes=1500)
        with StatusClient(contract, None, clock=clock) as client:
            results = fetch_all([(client, "a", None, None)]) + fetch_all([(client, "b", None, None)])
    finally:
        server.close()
    assert all(isinstance(r, Response) and r.truncated and len(r.body) == 1500 for r in results)
    assert server.connections == 2


@pytest.mark.parametrize(
    ("data", "body", "reused"),
    [
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n" + OK, b'{"state": "running"}', True),
        (
            b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\n{"st\r\n10\r\n'
            b'ate": "running"}\r\n0\r\nX-Trailer: t\r\n\r\n',
            b'{"state": "running"}',
            True,
        ),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b"", True),
        (b"HTTP/1.1 200 OK\nContent-Length: 2\n\n{}", b"{}", True),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", b"{}", False),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n{}", b"{}", True),
    ],
    ids=["100-continue-skipped", "chunked-extensions-trailer", "204", "bare-LF", "http10-closes", "http10-keep-alive"],
)
def test_well_framed_answers_are_read_and_their_connections_kept_when_allowed(
    data: bytes, body: bytes, reused: bool
) -> None:
    server = KeepAliveServer(always(data))
    try:
        with StatusClient(keepalive_contract(server.url), None, clock=clock) as client:
            results = [client.fetch("a"), client.fetch("b")]
    finally:
        server.close()
    assert [response_of(r).body for r in results] == [body, body]
    assert server.connections == (1 if reused else 2)


def test_an_answer_without_framing_is_read_to_the_close(serve: Callable[[RawScript], RawServer]) -> None:
    server = serve(send(b"HTTP/1.1 200 OK\r\n\r\n" + json_body()))
    with StatusClient(contract_for(server.url), None, clock=clock) as client:
        assert response_of(client.fetch("a")).body == json_body()


@pytest.mark.parametrize(
    ("data", "kind", "words"),
    [
        (b"HTTP/1.1 200 OK\r\nNot a header line\r\n\r\n", FailureKind.PROTOCOL, "not a name"),
        (b"HTTP/1.1 200 OK\r\nBad Name: v\r\n\r\n", FailureKind.PROTOCOL, "not a name"),
        (b"HTTP/1.1 200 OK\r\n continued\r\n\r\n", FailureKind.PROTOCOL, "continuation"),
        (b"HTTP/2 200\r\n\r\n", FailureKind.PROTOCOL, "unknown protocol"),
        (b"HTTP/1.1 2000 OK\r\n\r\n", FailureKind.PROTOCOL, "status line"),
        (b"HTTP/1.1 \xb2\xb2\xb2 OK\r\n\r\n", FailureKind.PROTOCOL, "status line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 12abc\r\n\r\n", FailureKind.PROTOCOL, "not a number"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", FailureKind.PROTOCOL, "not a number"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n", FailureKind.PROTOCOL, "not a number"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n", FailureKind.PROTOCOL, "CRLF"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\n{}\r\n", FailureKind.RESET, "chunked"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n", FailureKind.PROTOCOL, "more than 100"),
    ],
    ids=[
        "no-colon",
        "space-in-name",
        "fold-first",
        "http2",
        "four-digit-status",
        "unicode-digits",
        "length-not-digits",
        "negative-length",
        "5000-digit-length",
        "no-crlf-after-chunk",
        "negative-chunk",
        "101-headers",
    ],
)
def test_malformed_heads_and_framing_are_refused(
    serve: Callable[[RawScript], RawServer], data: bytes, kind: FailureKind, words: str
) -> None:
    server = serve(send(data))
    with StatusClient(contract_for(server.url), None, clock=clock) as client:
        failure = failure_of(client.fetch("a"))
    assert failure.kind is kind and words in failure.message, failure


def test_a_folded_header_is_joined_with_a_space() -> None:
    head = http11.parse_head(b"HTTP/1.1 200 OK\r\nX-A: one\r\n  two\r\n\r\n")
    assert head.headers == (("X-A", "one two"),)


def test_garbage_is_refused_before_the_deadline_without_waiting_for_a_line_end() -> None:
    with pytest.raises(WireError) as caught:
        http11.check_partial_head(bytearray(b"SSH-2.0"), -1, 0, 0)
    assert caught.value.kind is FailureKind.PROTOCOL


# -- https on the same selector as plain http ------------------------------------------------------------------------


def test_https_polls_go_on_the_selector_beside_plain_http(
    certificates: Certificates, serve: Callable[[RawScript], RawServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    selected: list[int] = []  # the requests of each selector round
    made, add = wire_round.Round.__init__, wire_round.Round.add

    def making(round_: wire_round.Round, **options: bool) -> None:
        selected.append(0)
        made(round_, **options)

    def adding(round_: wire_round.Round, transport: wire.SocketTransport, request: messages.Request) -> Any:
        selected[-1] += 1
        return add(round_, transport, request)

    monkeypatch.setattr(wire_round.Round, "__init__", making)
    monkeypatch.setattr(wire_round.Round, "add", adding)
    tls_server = TlsServer(certificates.good, always(OK))
    plain = serve(send(answer(body=json_body("running"))))
    try:
        with (
            trusting(certificates.ca),
            StatusClient(contract_for(tls_server.url), None, clock=clock) as secure,
            StatusClient(contract_for(plain.url), None, clock=clock) as client,
        ):
            assert secure.selects and client.selects
            results = fetch_all([(secure, "a", None, None), (client, "b", None, None), (secure, "c", None, None)])
    finally:
        tls_server.close()
    assert all(isinstance(r, Response) and r.body == json_body("running") for r in results), results
    assert selected == [3]  # one selector for all three
    assert len(tls_server.requests) == 2 and tls_server.handshakes == 2


def test_a_socket_that_cannot_be_made_is_a_connect_failure_of_its_own_request(
    serve: Callable[[RawScript], RawServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of file descriptors (EMFILE) while a batch connects: that request is not sent, the batch goes on."""
    server = serve(send(answer(body=json_body())))
    made = wire_select.new_socket
    calls: list[int] = []

    def scarce(*args: object) -> socket.socket:
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return made(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(wire_select, "new_socket", scarce)
    with StatusClient(contract_for(server.url), None, clock=clock) as client:
        first, second, third = fetch_all([(client, job, None, None) for job in "abc"])
    assert isinstance(first, Response) and isinstance(third, Response)
    assert isinstance(second, TransportFailure) and second.kind is FailureKind.CONNECT and not second.delivery_unknown
    assert "Too many open files" in second.message and len(server.requests) == 2


# --- a batch's round across its commits: answers taken whole, nothing sent after its deadline ----------------------


def _poll_request(url: str, deadline: float) -> messages.Request:
    host = url.split("://", 1)[1]
    return messages.Request("GET", f"{url}/jobs/a", (("Host", host),), None, deadline, reuse=True, body_cap=1 << 20)


def test_a_request_whose_deadline_passed_while_the_batch_committed_is_never_sent() -> None:
    """`Round.add` starts the connect; the batch then commits for longer than the request's deadline. At its next
    wait the connect has completed, but the request is expired, not sent late."""
    import time

    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def accept() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(60)
            while data := conn.recv(65536):  # until the client closes: every byte it ever sent
                received.append(data)

    server = threading.Thread(target=accept, daemon=True)
    server.start()
    try:
        with wire_round.Round() as round_:
            deadline = time.monotonic() + 0.05
            one = round_.add(
                wire.SocketTransport(), _poll_request(f"http://127.0.0.1:{listener.getsockname()[1]}", deadline)
            )
            assert one.sending and one.result is None  # connecting
            time.sleep(max(0.0, deadline - time.monotonic()) + 0.05)  # a commit that outlasts the deadline
            assert round_.wait(0.01) == [one]
        server.join(60)
    finally:
        listener.close()
    assert isinstance(one.result, WireError) and one.result.kind is FailureKind.CONNECT, one.result
    assert received == []  # the request never went out


def test_an_answer_that_came_in_whole_while_the_batch_committed_is_taken_whole() -> None:
    """An answer of several reads (150 KiB) written in full before its deadline, read only after it (the batch was
    committing): the round reads what the socket holds before it expires anything."""
    import time

    body = b"x" * (150 * 1024)
    written = threading.Event()

    def answers(conn: socket.socket, raw: bytes) -> None:
        """A small answer to the first request (the connection is kept), then the big one, held open."""
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        written.set()
        conn.recv(1)  # held open: only the client ends it

    server = RawServer(answers)
    transport = wire.SocketTransport()
    try:
        (small,) = wire_round.exchange([(transport, _poll_request(server.url, time.monotonic() + 60))])
        assert isinstance(small, wire_select.HeldAnswer)  # and its connection kept for the next request
        with wire_round.Round() as round_:
            deadline = time.monotonic() + 2.0
            one = round_.add(transport, _poll_request(server.url, deadline))
            assert not one.sending  # sent at once on the kept connection
            assert written.wait(60)
            time.sleep(max(0.0, deadline - time.monotonic()) + 0.05)  # the batch commits past the deadline
            assert round_.wait(0.01) == [one]
    finally:
        server.close()
    assert isinstance(one.result, wire_select.HeldAnswer), one.result
    assert one.result.read(1 << 20) == body and one.result.read(1) == b""  # whole, and no failure after it
