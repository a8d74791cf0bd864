"""Status polls over http and https on a selector, one request's part (`Exchanging`): its stages, its answer head
read by a strict parser of its own, its caps and failure kinds. `wire_round.Round` runs a batch of them on one
selector in the calling thread, over the keep-alive connections of `SocketTransport`, each under its own
deadline, with the caps and failure kinds of the blocking path (`SocketTransport.open`), which every request
that is not a status poll still takes.

Each request goes through its stages on the selector: the host's lookup (`pollwarden.transport.resolve`: on a thread of
its own, a pipe waking the selector when it answers; none for an IP literal, localhost or a name answered in the
last 30 s), the connect, for https the TLS handshake (non-blocking, `ssl.SSLWantReadError` and
`SSLWantWriteError` turned into what the selector watches for; verified exactly as the blocking path verifies,
`wire.wrap_tls`), the request, the head and the body. A deadline that passes at any stage ends that request
alone, with the blocking path's failure kind for the stage.

Why: on the worker's I/O pool each request had a thread of its own, and handing the GIL between 18 threads
cost more CPU than the requests themselves (docs/performance.md). Here nothing waits but the selector.

An answer is read whole (its body up to one byte past `Request.body_cap`) before it is handed back, so its
head is parsed here, by `parse_head`, without `http.client` and the email package. The parser is strict where
the email package is lenient (a header line that is not `name: value` is refused), and keeps every cap of the
blocking path: a 64 KiB status or header line, 100 headers, 64 KiB of headers, the framing rules of
`check_framing`. A failure in the body is handed back after the bytes that came before it, as a blocking read
would raise it after them: a body already over the cap is read as cut at the cap, whatever follows.

The keep-alive rule is the one `SocketTransport` states: a connection goes back to the pool only after an
exchange that ended cleanly (the whole answer read, nothing after it, the server not closing), and a request
on a reused connection that fails before its answer is reported as `reset`, never sent again.
"""

from __future__ import annotations

import errno
import functools
import os
import selectors
import socket
import ssl
import time
from collections.abc import Callable
from concurrent.futures import Future
from urllib.parse import urlsplit

from ..core.observe import FailureKind
from .http11 import (
    NO_CHUNK_CRLF,
    Head,
    Trailers,
    check_partial_head,
    chunk_size,
    head_end,
    parse_head,
    protocol_error,
    request_head,
)
from .messages import MAX_LINE, READ_CHUNK, Answer, Request, WireError
from .resolve import AddrInfo
from .wire import (
    CONNECT_TIMEOUT,
    DNS_TIMEOUT,
    TLS_TIMEOUT,
    SocketTransport,
    connect_failure,
    looked_up,
    no_address,
    origin_of_parts,
    tls_failure,
    wrap_tls,
)

_RESOLVE, _CONNECT, _HANDSHAKE, _SEND, _HEAD, _BODY = range(6)
_TRAILER = -1
_READ, _WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE


new_socket = socket.socket
"""How a connection's socket is made (a test makes it fail as a process out of descriptors would)."""


SCHEMES = ("http", "https")
"""What the selector speaks: everything the blocking path does for a status poll (neither has a proxy or a
client certificate), so the choice of path is only whether a request is a status poll (`selectable`)."""


def selectable(request: Request) -> bool:
    """What goes on the selector: status polls (over a `SocketTransport`, `StatusClient.selects`); never a
    request with an address guard, which only the blocking path's connect applies."""
    return request.reuse and request.guard is None and urlsplit(request.url).scheme in SCHEMES


_WAITS = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


def _waits_for(exc: OSError, plain: int) -> int:
    """What a socket call that would block waits for: a TLS one says (a read may need a write of the handshake or
    a key update, a write a read), a plain one waits for what it was doing (`plain`)."""
    if isinstance(exc, ssl.SSLWantReadError):
        return _READ
    return _WRITE if isinstance(exc, ssl.SSLWantWriteError) else plain


class HeldAnswer:
    """An answer read whole; a failure in its body is raised after the bytes that came before it."""

    def __init__(self, head: Head, body: bytes, failure: WireError | None) -> None:
        self.status = head.status
        self.headers = head.headers
        self._body = body
        self._at = 0
        self._failure = failure
        self.arrived = time.monotonic()
        """When the exchange ended: a batch hands its answers back when the last one is in."""

    def read(self, size: int) -> bytes:
        if self._at < len(self._body):
            piece = self._body if self._at == 0 and size >= len(self._body) else self._body[self._at : self._at + size]
            self._at += len(piece)
            return piece
        if self._failure is not None:
            raise self._failure
        return b""

    def close(self) -> None:
        """The connection was already given back or closed when the answer was read."""


class Exchanging:
    """One request's progress: connect (or a pooled connection), send, head, body; `result` when it ended."""

    def __init__(self, transport: SocketTransport, request: Request) -> None:
        self.transport = transport
        self.request = request
        self.deadline = request.deadline
        self.sock: socket.socket | None = None
        self.want = 0
        self.result: Answer | WireError | None = None
        self._stage = _RESOLVE
        self._out = memoryview(b"")
        self._host = ""
        self._tls = False
        self.lookup: Future[list[AddrInfo]] | None = None
        """The host's lookup while it is in flight (`resolving`)."""
        self._addresses: list[AddrInfo] = []
        self._buffer = bytearray()
        self._head: Head | None = None
        self._body = bytearray()
        self._cap = (request.body_cap if request.body_cap is not None else 1 << 62) + 1
        self._left: int | None = None  # Content-Length bytes still to come; None: until close, or chunked
        self._chunked = False
        self._chunk: int | None = None  # in a chunked body: bytes left of this chunk, 0 = its CRLF, None = a size
        self._trailers = Trailers()
        self._seen = 0  # bytes at the buffer's start already searched for the end of the head or line wanted
        self._first, self._lines, self._line_start = -1, 0, 0  # the unfinished head's tally (`_scan`)

    # -- steps, each run when the selector says the socket is ready ----------------------------------------------

    def start(self) -> None:
        parts = urlsplit(self.request.url)
        self._out = memoryview(request_head(self.request, parts) + (self.request.body or b""))
        self._origin = origin_of_parts(parts, self.request.trust)
        sock = self.transport.take(self._origin)
        if sock is not None:
            if sock.gettimeout() != 0.0:  # one the blocking path kept; the selector gives its own back non-blocking
                sock.setblocking(False)
            self.sock, self._stage = sock, _SEND
            self._step(self._send)
            return
        self._host, self._tls = parts.hostname or "", parts.scheme == "https"
        lookup = self.transport.lookup(self._host, self._origin[2])
        if lookup.done():
            self.resolved(lookup)
        else:
            self.lookup = lookup

    @property
    def resolving(self) -> bool:
        return self.lookup is not None and self.result is None

    def resolved(self, lookup: Future[list[AddrInfo]]) -> None:
        """The lookup answered (addresses, or its failure): connect to the first address that takes it."""
        self.lookup = None
        try:
            self._addresses = list(looked_up(lookup))
        except WireError as exc:
            self._end(exc)
            return
        self._stage = _CONNECT
        self._connect_next(no_address())

    def ready(self) -> None:
        if self._stage == _CONNECT:
            self._connected()
        elif self._stage == _HANDSHAKE:
            self._step(self._handshake)
        elif self._stage == _SEND:
            self._step(self._send)
        else:
            self._step(self._receive)

    def expire(self) -> None:
        """The deadline passed at this stage."""
        if self._stage == _RESOLVE:
            self.lookup = None  # left to finish on its own thread; its answer may serve a later request
            self._end(WireError(FailureKind.CONNECT, DNS_TIMEOUT))
        elif self._stage == _CONNECT:
            self._end(WireError(FailureKind.CONNECT, CONNECT_TIMEOUT))
        elif self._stage == _HANDSHAKE:
            self._end(WireError(FailureKind.CONNECT, TLS_TIMEOUT))
        elif self._stage == _SEND:
            self._end(WireError(FailureKind.TIMEOUT, "the request could not be sent within the timeout"))
        elif self._stage == _HEAD:
            self._end(WireError(FailureKind.TIMEOUT, "no complete answer head within the timeout"))
        else:
            self._end(WireError(FailureKind.TIMEOUT, "the body did not arrive within the timeout"))

    def abandon(self) -> None:
        """Given up by its batch (the watch was interrupted): the connection is closed, never reused."""
        self._end(WireError(FailureKind.RESET, "abandoned in flight"))

    def _step(self, step: Callable[[], None]) -> None:
        try:
            step()
        except WireError as exc:
            self._end(exc)

    def _connect_next(self, last: OSError) -> None:
        """The next address of the host, as `socket.create_connection` tries them in turn."""
        while self._addresses:
            family, kind, proto, _, address = self._addresses.pop(0)
            try:
                sock = new_socket(family, kind, proto)  # out of file descriptors, say: as a failed connect
            except OSError as exc:
                last = exc
                continue
            sock.setblocking(False)
            code = sock.connect_ex(address)
            if code in (0, errno.EINPROGRESS):
                self.sock, self.want = sock, _WRITE
                return
            sock.close()
            last = OSError(code, os.strerror(code))
        self._end(connect_failure(last))

    def _connected(self) -> None:
        assert self.sock is not None
        code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            self.sock.close()
            self.sock = None
            self._connect_next(OSError(code, os.strerror(code)))
            return
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls:
            self.sock = wrap_tls(self.sock, self._host, self.request.trust)
            self._stage = _HANDSHAKE
            self._step(self._handshake)
            return
        self._stage = _SEND
        self._step(self._send)

    def _handshake(self) -> None:
        assert isinstance(self.sock, ssl.SSLSocket)
        try:
            self.sock.do_handshake()
        except _WAITS as exc:
            self.want = _waits_for(exc, _READ)
            return
        except OSError as exc:  # ssl.SSLError is one: a certificate refused, a peer that is no TLS server
            raise tls_failure(exc) from None
        self._stage = _SEND
        self._send()

    def _send(self) -> None:
        assert self.sock is not None
        try:
            while self._out:
                # A TLS write that wants to wait is retried with the same bytes (the ssl module lets the buffer
                # move), as a plain one is.
                self._out = self._out[self.sock.send(self._out) :]
        except _WAITS as exc:
            self.want = _waits_for(exc, _WRITE)
            return
        except OSError as exc:
            raise WireError(FailureKind.RESET, f"connection dropped while sending: {exc.__class__.__name__}") from None
        self._stage, self.want = _HEAD, _READ

    @property
    def sending(self) -> bool:
        """Its request is not all sent yet (a lookup, a connect, a handshake, a send under way): once its deadline
        has passed it must not go on, even if its socket became ready meanwhile."""
        return self._stage < _HEAD

    def take_rest(self) -> None:
        """Everything its socket holds now, read before its deadline ends it: an answer that came in whole while
        its batch was committing is handed back whole (one ready event reads one chunk)."""
        if self.sock is not None and not self.sending and self.result is None:
            self._step(functools.partial(self._receive, drain=True))

    def _receive(self, *, drain: bool = False) -> None:
        while True:
            sock = self.sock
            assert sock is not None
            self.want = _READ
            try:
                data = sock.recv(READ_CHUNK)
            except _WAITS as exc:
                self.want = _waits_for(exc, _READ)
                return
            except OSError as exc:
                raise WireError(FailureKind.RESET, f"connection dropped: {exc.__class__.__name__}") from None
            if not data:
                self._closed()
                return
            self._buffer += data
            if self._stage == _HEAD:
                self._read_head()
            if self._stage == _BODY:
                self._read_body()
            # Bytes TLS has decrypted but not handed over yet leave the socket quiet: poll(2) would not wake for them.
            if self.result is not None or not (drain or (isinstance(sock, ssl.SSLSocket) and sock.pending())):
                return

    # -- the answer -----------------------------------------------------------------------------------------------

    def _scan(self) -> None:
        """Count the line ends of the bytes not scanned yet (`_seen` onwards) into the unfinished head's tally."""
        buffer, seen = self._buffer, self._seen
        last = buffer.rfind(b"\n", seen)
        if last >= 0:
            if self._first < 0:
                self._first = buffer.find(b"\n", seen)
            self._lines += buffer.count(b"\n", seen)
            self._line_start = last + 1
        self._seen = len(buffer)

    def _read_head(self) -> None:
        while True:
            end = head_end(self._buffer, max(self._seen - 2, 0))
            if end < 0:
                self._scan()
                check_partial_head(self._buffer, self._first, self._lines, self._line_start)
                return
            head = parse_head(bytes(self._buffer[:end]))
            del self._buffer[:end]
            self._seen, self._first, self._lines, self._line_start = 0, -1, 0, 0
            if head.status != 100:  # `100 Continue` is skipped, as http.client does; the deadline bounds a storm
                break
        status, method = head.status, self.request.method
        if method == "HEAD" or status in (204, 304) or status < 200:
            self._left = 0
        elif head.chunked:
            self._chunked = True
        elif head.length is not None:
            self._left = head.length
        self._head, self._stage = head, _BODY

    def _read_body(self) -> None:
        if self._chunked:
            self._dechunk()
        elif self._left is None:
            self._body += self._buffer
            self._buffer.clear()
        else:
            take = min(self._left, len(self._buffer))
            self._body += self._buffer[:take]
            del self._buffer[:take]
            self._left -= take
            if not self._left:
                self._answered(clean=not self._buffer)
                return
        # Over the reader's cap: the rest is never read, and the connection is not kept.
        if self.result is None and len(self._body) >= self._cap:
            self._answered(clean=False)

    def _dechunk(self) -> None:
        buffer = self._buffer
        while len(self._body) < self._cap:
            if self._chunk is None or self._chunk == _TRAILER:
                end = buffer.find(b"\n", self._seen)
                if end < 0:
                    if len(buffer) > MAX_LINE:
                        raise protocol_error("broken chunked body (a line longer than 64 KiB)")
                    self._seen = len(buffer)  # a line dripped a byte at a time is searched once, not each time
                    return
                line = bytes(buffer[:end]).rstrip(b"\r")
                del buffer[: end + 1]
                self._seen = 0
                if self._chunk == _TRAILER:
                    if self._trailers.ended(line):
                        self._answered(clean=not buffer)
                        return
                    continue
                size = chunk_size(line)
                if size is None:  # what http.client reads as an incomplete body
                    raise WireError(FailureKind.RESET, "the connection closed in the middle of a chunked body")
                self._chunk = size or _TRAILER
            elif self._chunk == 0:
                if len(buffer) < 2:
                    return
                if buffer[:2] != b"\r\n":
                    raise protocol_error(NO_CHUNK_CRLF)
                del buffer[:2]
                self._chunk = None
            else:
                take = min(self._chunk, len(buffer))
                if not take:
                    return
                self._body += buffer[:take]
                del buffer[:take]
                self._chunk -= take

    def _closed(self) -> None:
        """End of stream from the server."""
        if self._stage < _BODY:
            if not self._buffer:
                raise WireError(FailureKind.RESET, "the provider closed the connection without answering")
            self._scan()
            check_partial_head(self._buffer, self._first, self._lines, self._line_start)
            raise WireError(FailureKind.RESET, "the connection closed in the middle of the answer head")
        if self._chunked:
            if self._chunk == _TRAILER:  # a server that ends without the trailer's blank line: http.client takes it
                self._answered(clean=False)
                return
            raise WireError(FailureKind.RESET, "the connection closed in the middle of a chunked body")
        if self._left:
            raise WireError(FailureKind.RESET, f"the body ended {self._left} bytes short of its Content-Length")
        self._answered(clean=False)

    def _answered(self, *, clean: bool) -> None:
        """The whole answer (or all of it the reader will take) is in."""
        assert self._head is not None and self.sock is not None
        sock, self.sock = self.sock, None
        if clean and not self._head.closes:
            self.transport.give(self._origin, sock)
        else:
            sock.close()
        self.result = HeldAnswer(self._head, bytes(self._body), None)

    def broke(self, exc: OSError) -> None:
        if self._stage < _SEND:
            self._end(connect_failure(exc))
        else:
            self._end(WireError(FailureKind.RESET, f"connection dropped: {exc.__class__.__name__}"))

    def _end(self, failure: WireError) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self._stage == _BODY and self._head is not None:
            self.result = HeldAnswer(self._head, bytes(self._body), failure)
        else:
            self.result = failure
