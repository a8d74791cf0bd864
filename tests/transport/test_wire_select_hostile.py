"""The selector path (`wire_select`) and the blocking one (`wire.SocketTransport.open`, over http.client) given
the same hostile answer by a real loopback server: each must come to the same outcome (the same failure kind,
or the same answer and the same keep-alive decision), and neither may leak a descriptor; each over http and https.

Where the two still differ on purpose, docs/performance.md says so (the selector's parser is the stricter)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator

import pytest

from pollwarden.core import FailureKind, Response, TransportFailure
from pollwarden.core.observe import Exchange
from pollwarden.transport import http11
from pollwarden.transport.http import StatusClient
from pollwarden.transport.messages import Answer, Request, Transport
from tests.tls import Certificates, TlsServer, trusting
from tests.tls import certificates as certificates  # the fixture: a CA and leaves made once per session
from tests.transport.test_http_keepalive import OK, KeepAliveServer, Script, clock, contract_for, reusing


class Blocking:
    """The blocking path for status polls: a transport that is not a `SocketTransport` never goes on the selector."""

    def __init__(self) -> None:
        self._sockets = reusing()

    def open(self, request: Request) -> Answer:
        return self._sockets.open(request)

    def close(self) -> None:
        self._sockets.close()


# Both keep an idle connection for an hour (`reusing`): with the default bound (1 s) a loaded machine's stall
# between the two polls made the pooled connection too old, and a second connection failed `connections == 1`.
PATHS: dict[str, Callable[[], Transport]] = {"selector": reusing, "blocking": Blocking}


def client_sockets(port: int) -> int:
    """This process's open descriptors for TCP connections to `port` (the server's own ends are not counted)."""
    inodes = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the listing's own descriptor, or a server thread's just closed
            continue
        count += link.startswith("socket:[") and link[8:-1] in inodes
    return count


Serving = Callable[[Script], KeepAliveServer]


@pytest.fixture(params=["http", "https"])
def over(request: pytest.FixtureRequest, certificates: Certificates) -> Iterator[Serving]:
    """Each hostile answer served over plain http, then over TLS (the selector's reads go through `SSLSocket`)."""
    if request.param == "http":
        yield KeepAliveServer
        return
    with trusting(certificates.ca):
        yield lambda script: TlsServer(certificates.good, script)


def two_polls(first: bytes, path: str, over: Serving, *, close: bool = False) -> tuple[Exchange, Exchange, int]:
    """`first` answers the first poll (and the server closes after it if `close`), a plain 200 the second; also
    how many connections the server saw."""

    def script(conn: socket.socket, index: int) -> bool:
        conn.sendall(first if index == 0 else OK)
        return index > 0 or not close

    server = over(script)
    port = int(server.url.rsplit(":", 1)[1])
    try:
        with StatusClient(contract_for(server.url), None, clock=clock, transport=PATHS[path]()) as client:
            exchanges = client.fetch("a"), client.fetch("b")
            assert client_sockets(port) <= 1  # the second poll's connection, pooled; a leak would show as more
        assert client_sockets(port) == 0
    finally:
        server.close()
    return exchanges[0], exchanges[1], server.connections


def failure(exchange: Exchange) -> TransportFailure:
    assert isinstance(exchange, TransportFailure), exchange
    return exchange


def head(*lines: bytes, status: bytes = b"HTTP/1.1 200 OK", body: bytes = b"{}") -> bytes:
    return status + b"\r\n" + b"".join(line + b"\r\n" for line in lines) + b"\r\n" + body


Case = tuple[bytes, FailureKind, str]
REFUSED: dict[str, Case] = {
    # http.client counts the blank line among its 100: a 100th header is already one too many.
    "100-headers": (
        head(b"Content-Length: 2", *[b"X-%d: v" % n for n in range(99)]),
        FailureKind.PROTOCOL,
        "more than 100 headers",
    ),
    # http.client reads "+2" as 2 and anything int() refuses as no length at all (read to the close).
    "length-with-sign": (head(b"Content-Length: +2"), FailureKind.PROTOCOL, "Content-Length is not a number"),
    "length-list": (head(b"Content-Length: 2, 2"), FailureKind.PROTOCOL, "Content-Length is not a number"),
    "length-empty": (head(b"Content-Length: "), FailureKind.PROTOCOL, "Content-Length is not a number"),
    "length-spaced": (head(b"Content-Length: 1 0"), FailureKind.PROTOCOL, "Content-Length is not a number"),
    # A chunk size is 1*HEXDIG: http.client's int(line, 16) also takes "0x2", "+2" and "-2" (then fails on it).
    **{
        f"chunk-size-{size.decode()}": (
            head(b"Transfer-Encoding: chunked", body=size + b"\r\n{}\r\n0\r\n\r\n"),
            FailureKind.RESET,
            "middle of a chunked body",
        )
        for size in (b"0x2", b"+2", b"-2", b"0_2")
    },
    # A status line is "HTTP/1.x", three ASCII digits and a reason. http.client splits it on any whitespace (so a
    # leading space passed, where the selector took it whole but refused it arriving in pieces), reads the code
    # with int() ("2_00" is 200) and takes HTTP/0.9 for 1.0.
    **{
        f"status-{name}": (head(b"Content-Length: 2", status=line), FailureKind.PROTOCOL, words)
        for name, line, words in [
            ("leading-space", b" HTTP/1.1 200 OK", "status line"),
            ("underscore-code", b"HTTP/1.1 2_00 OK", "status line"),
            ("http09", b"HTTP/0.9 200 OK", "unknown protocol"),
            ("http2", b"HTTP/2.0 200 OK", "unknown protocol"),
            ("lowercase", b"http/1.1 200 OK", "status line"),
            ("99", b"HTTP/1.1 99 Nearly", "status line"),
        ]
    },
    # The email package ends the head at a line that is not a header (dropping the Content-Length after it), takes
    # a name that is no token, and reads a lone CR as a line end; the selector's parser refuses all of them.
    **{
        f"header-{name}": (head(line, b"Content-Length: 2"), FailureKind.PROTOCOL, "not a name, a colon and a value")
        for name, line in {
            "space-before-colon": b"X-A : v",
            "no-name": b": v",
            "name-not-a-token": b"X(A): v",
            "non-ascii-name": "X-\u00e9: v".encode(),
            "cr-in-value": b"X-A: a\rb",
            "cr-in-fold": b"X-A: a\r\n b\rc",
        }.items()
    },
    # http.client skipped the two bytes after a chunk's data unread, whatever they were.
    "no-crlf-after-chunk": (
        head(b"Transfer-Encoding: chunked", body=b"2\r\n{}XX0\r\n\r\n"),
        FailureKind.PROTOCOL,
        "no CRLF after a chunk",
    ),
    # Trailers are capped as headers are, not only by the deadline.
    "endless-trailers": (
        head(b"Transfer-Encoding: chunked", body=b"2\r\n{}\r\n0\r\n" + b"X-T: y\r\n" * 20_000),
        FailureKind.PROTOCOL,
        "trailers over 65536 bytes",
    ),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "lines",
    [
        (b"Connection: upgrade", b"Connection: close"),  # http.client looked at the first Connection header only
        (b"Connection: keep-alive, close",),
    ],
    ids=["second-connection-header", "listed"],
)
def test_an_answer_that_says_close_never_leaves_its_connection_pooled(
    lines: tuple[bytes, ...], path: str, over: Serving
) -> None:
    first, second, connections = two_polls(head(*lines, b"Content-Length: 2"), path, over)
    assert isinstance(first, Response) and isinstance(second, Response)
    assert connections == 2


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("status", [b"HTTP/1.1 304 Not Modified", b"HTTP/1.1 204 No Content"])
def test_a_bodiless_status_is_read_without_a_body_whatever_its_framing_says(
    status: bytes, path: str, over: Serving
) -> None:
    """RFC 9112 section 6.3: a 204 or 304 ends at its head; http.client still read a chunked body for it."""
    first, second, connections = two_polls(head(b"Transfer-Encoding: chunked", status=status, body=b""), path, over)
    assert isinstance(first, Response) and first.body == b"" and isinstance(second, Response)
    assert connections == 1


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "lines", [(b"X-A: one", b" \t two"), (b"X-A: one two \t",)], ids=["folded", "trailing-whitespace"]
)
def test_a_header_value_reads_alike_on_both_paths(lines: tuple[bytes, ...], path: str, over: Serving) -> None:
    first, _, connections = two_polls(head(*lines, b"Content-Length: 2"), path, over)
    assert isinstance(first, Response) and first.headers["x-a"] == "one two" and connections == 1


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "data", [b"HTTP/1.1 200 OK\r\nContent-Ty", b"HTTP/1.1 200 OK\r\nX-A: v\r\n", b"HTTP/1.1 200 OK"]
)
def test_a_head_cut_by_the_close_is_a_reset_wherever_it_is_cut(data: bytes, path: str, over: Serving) -> None:
    first, second, connections = two_polls(data, path, over, close=True)
    assert failure(first).kind is FailureKind.RESET and "middle of the answer head" in failure(first).message
    assert isinstance(second, Response) and connections == 2


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", REFUSED)
def test_both_paths_refuse_alike(case: str, path: str, over: Serving) -> None:
    data, kind, words = REFUSED[case]
    first, second, connections = two_polls(data, path, over)
    assert failure(first).kind is kind and words in failure(first).message, first
    assert isinstance(second, Response) and connections == 2  # a refused answer's connection is never kept


class CountingBuffer(bytearray):
    """A buffer that counts the bytes its `find` calls look at (up to the match's end, or the whole span)."""

    scanned = 0

    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int:  # type: ignore[override]
        stop = len(self) if end is None else end
        at = super().find(sub, start, stop)
        self.scanned += (at + len(sub) if at >= 0 else stop) - start
        return at


def test_a_flood_of_interim_heads_is_searched_in_linear_time() -> None:
    """2,600 `100 Continue` heads fill one 64 KiB read: each head's end must be found without searching the whole
    rest of the buffer for the other kind of blank line (that cost 74 ms of CPU per read, http.client 2 ms)."""
    data = b"HTTP/1.1 100 Continue\r\n\r\n" * 2600 + b"HTTP/1.1 200 OK\nContent-Length: 0\n\n"
    buffer = CountingBuffer(data)
    heads = 0
    while buffer:
        end = http11.head_end(buffer, 0)
        assert end > 0
        del buffer[:end]
        heads += 1
    assert heads == 2601
    assert buffer.scanned <= 2 * len(data)


@pytest.mark.parametrize(
    ("data", "end"),
    [(b"A\r\n\r\nB\n\n", 5), (b"A\n\nB\r\n\r\n", 3), (b"A\n\r\n", 4), (b"A\r\n\n", 4), (b"A\r\nB\r\n", -1)],
)
def test_the_head_ends_at_its_first_blank_line_of_either_kind(data: bytes, end: int) -> None:
    assert http11.head_end(bytearray(data), 0) == end
