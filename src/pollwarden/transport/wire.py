"""The blocking socket transport: HTTP/1.1 over connections this module opens (and, for status polls, keeps in a
pool), each exchange bounded by one deadline, the answer head read by `http.client` under the caps and its
framing checked by `http11`, as the selector's parser reads it.

`StatusClient` (`transport.http`) builds the `Request` and reads the `Answer` (`transport.messages`); this module
only moves bytes and classifies what went wrong as a `WireError` whose kind says whether the request may have
reached the provider. This is the path of every request that is not a status poll; status polls, over http and
https, take `transport.wire_select`, over the same pool of kept-alive connections, under the same caps, with the
same TLS verification (`wrap_tls`) and the same lookups inside the deadline (`transport.resolve`).
"""

from __future__ import annotations

import errno
import functools
import http.client
import io
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from concurrent.futures import Future
from urllib.parse import SplitResult, urlsplit

from ..core.observe import FailureKind
from . import resolve
from .http11 import (
    FOLD,
    NO_CHUNK_CRLF,
    NOT_A_HEADER,
    NOT_STATUS,
    Trailers,
    check_framing,
    chunk_size,
    parse_status_line,
    request_head,
    server_closes,
)
from .messages import MAX_HEADER_BYTES, MAX_LINE, READ_CHUNK, Answer, Request, WireError
from .resolve import AddressGuard, AddrInfo, Resolver

KEEPALIVE_IDLE = 1.0
"""Seconds a pooled connection may sit idle and still be reused: well under the shortest keep-alive timeout
common servers use (gunicorn 2 s; Apache, Node and uvicorn 5 s; nginx 75 s), so the server has rarely closed
it first. When it has, the request fails as delivery-unknown and is never sent again (see `SocketTransport`)."""

MAX_IDLE_PER_ORIGIN = 64


def _remaining(deadline: float, what: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(what)
    return left


class _DeadlineReader(io.RawIOBase):
    """Socket reads that never outlast the request's deadline, however slowly the peer drips bytes."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline
        self.ended = False
        self.probing = False
        """Set once the answer is read: a read then never waits, and finding anything at all spoils the connection."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int | None:  # type: ignore[override]
        if self.probing:
            self._sock.setblocking(False)
            try:
                count = self._sock.recv_into(buffer)
            except (BlockingIOError, ssl.SSLWantReadError):
                return None  # nothing waiting: what a clean end of an answer looks like
        else:
            self._sock.settimeout(_remaining(self._deadline, "read"))
            count = self._sock.recv_into(buffer)
        if count == 0:
            self.ended = True
        return count


class _DeadlineResponse(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, *, method: str, deadline: float) -> None:
        super().__init__(sock, method=method)
        self.fp.close()
        self.reader = _DeadlineReader(sock, deadline)
        self.fp = io.BufferedReader(self.reader, READ_CHUNK)
        self.spent: io.BufferedReader | None = None

    def begin(self) -> None:
        super().begin()
        if self.length == 0:  # a 1xx, 204 or 304 answer, or one to HEAD: http.client still read a chunked body
            self.chunked = False

    def _get_chunk_left(self) -> int | None:
        """http.client's, with the CRLF after a chunk's data checked (it skipped two bytes unread)."""
        if self.chunk_left == 0:
            end = self.fp.read(2)
            if len(end) < 2:
                raise http.client.IncompleteRead(end)  # the body cut short, as the selector reads it too
            if end != b"\r\n":
                raise WireError(FailureKind.PROTOCOL, NO_CHUNK_CRLF)
            self.chunk_left = None  # so http.client reads the next size without skipping two bytes more
        left: int | None = super()._get_chunk_left()  # type: ignore[misc]
        return left

    def _read_status(self) -> tuple[str, int, str]:
        """http.client's, with the line read by `parse_status_line`, as the selector reads it."""
        line = self.fp.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise http.client.LineTooLong("status line")
        if not line:
            raise http.client.RemoteDisconnected("Remote end closed connection without response")
        return parse_status_line(line.decode("latin-1"))

    def _read_next_chunk_size(self) -> int:
        """http.client's, with the size read by `chunk_size`, as the selector reads it."""
        line = self.fp.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise http.client.LineTooLong("chunk size")
        size = chunk_size(line)
        if size is None:
            raise ValueError("not a chunk size")  # http.client's caller raises IncompleteRead for it
        return size

    def _read_and_discard_trailer(self) -> None:
        """http.client's, with the trailers capped by `Trailers` rather than only by the deadline."""
        trailers = Trailers()
        while True:
            line = self.fp.readline(MAX_LINE + 1)
            if len(line) > MAX_LINE:
                raise http.client.LineTooLong("trailer line")
            if not line or trailers.ended(line):  # a server that ends without the blank line: http.client's way
                return

    def _close_conn(self) -> None:
        """http.client calls this when the body has been read to its end. The buffer is kept, not closed: what
        is still in it (bytes the server sent after its answer) decides whether the connection may be reused."""
        if isinstance(self.fp, io.BufferedReader):
            self.spent = self.fp
        self.fp = None  # type: ignore[assignment]

    def ended_cleanly(self) -> bool:
        """The whole answer was read, the server keeps the connection open, and nothing follows the answer."""
        if self.spent is None or self.will_close or server_closes(self.version == 10, self.msg.items()):
            return False
        self.reader.probing = True
        try:
            after = self.spent.peek(1)
        except (OSError, ValueError):
            return False
        return not after and not self.reader.ended


class _SocketAnswer:
    def __init__(
        self, sock: socket.socket, response: _DeadlineResponse, keep: Callable[[socket.socket], None] | None = None
    ) -> None:
        self._sock = sock
        self._response = response
        self._keep = keep
        self._broken = False
        self.status = response.status
        # The email package keeps an obs-fold's line end in a value, and the whitespace after it; the selector's
        # parser puts one space for a fold (RFC 9112 section 5.2 allows it) and strips the ends: so does this.
        self.headers = tuple((k, (FOLD.sub(" ", v) if "\n" in v else v).rstrip(" \t")) for k, v in response.msg.items())

    def read(self, size: int) -> bytes:
        try:
            return self._read(size)
        except BaseException:
            self._broken = True
            raise

    def _read(self, size: int) -> bytes:
        try:
            data = self._response.read(size)
        except TimeoutError:
            raise WireError(FailureKind.TIMEOUT, "the body did not arrive within the timeout") from None
        except http.client.IncompleteRead:
            raise WireError(FailureKind.RESET, "the connection closed in the middle of a chunked body") from None
        except (ValueError, http.client.HTTPException) as exc:
            raise WireError(FailureKind.PROTOCOL, f"broken chunked body ({exc.__class__.__name__})") from None
        except OSError as exc:
            raise WireError(FailureKind.RESET, f"connection dropped: {exc.__class__.__name__}") from None
        short = self._response.length
        if not data and short:
            raise WireError(FailureKind.RESET, f"the body ended {short} bytes short of its Content-Length")
        return data

    def close(self) -> None:
        """Back to the pool only after an exchange that ended cleanly; otherwise closed."""
        keep = self._keep is not None and not self._broken and self._response.ended_cleanly()
        self._response.close()
        if keep and self._keep is not None:
            self._keep(self._sock)
        else:
            self._sock.close()


@functools.cache
def _default_tls() -> ssl.SSLContext:
    """One verifying context per process, made on the first https request. Loading the system's CA store
    costs ~20 ms of CPU: made per client, it was most of a watch's start, and 50 watches starting at once in
    one process queued behind each other's copies. A context is safe to share between threads."""
    return ssl.create_default_context()


def wrap_tls(sock: socket.socket, host: str, trust: ssl.SSLContext | None = None) -> ssl.SSLSocket:
    """A connected socket as TLS to `host`, its handshake not started and the socket non-blocking: what both
    paths verify, one way (`_default_tls`: the system's CA store, the host name checked against the
    certificate, SNI for a name, TLS 1.2 at least, as `ssl.create_default_context` sets it; `trust`, the
    contract's own CA bundle made the same way, instead of the system's store)."""
    context = _default_tls() if trust is None else trust
    tls = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
    tls.setblocking(False)
    return tls


TLS_TIMEOUT = "TLS handshake did not finish within the timeout"
DNS_TIMEOUT = "the host name's lookup did not answer within the timeout"


CONNECT_TIMEOUT = "connect timed out"


def connect_failure(exc: BaseException) -> WireError:
    """No connection: refused, unreachable, or the host name not found (nothing was sent)."""
    return WireError(FailureKind.CONNECT, f"connection failed: {exc.__class__.__name__}: {exc}")


def no_address() -> OSError:
    """The failure to report when a host's addresses were all tried, before any was (an empty lookup)."""
    return OSError(errno.EADDRNOTAVAIL, "no address to connect to")


def tls_failure(exc: OSError) -> WireError:
    """A handshake that failed (a certificate not trusted, for another host or expired; not TLS at all)."""
    return WireError(FailureKind.CONNECT, f"TLS failed: {exc.__class__.__name__}: {exc}")


def looked_up(lookup: Future[list[AddrInfo]]) -> list[AddrInfo]:
    """The addresses a finished lookup found, or its failure as a `WireError` (nothing was sent)."""
    exc = lookup.exception()
    if exc is None:
        return lookup.result()
    if isinstance(exc, UnicodeError):  # the IDNA codec refuses a host like "a..b" before any lookup
        raise WireError(FailureKind.LOCAL, "the URL's host name cannot be encoded")
    raise connect_failure(exc)


Origin = tuple[str, str, int, ssl.SSLContext | None]
"""A pool's key: scheme, host, port, and what verified the connection (a connection trusted by one contract's CA
bundle is never handed to a request that trusts another, or the system's store)."""


class SocketTransport:
    """HTTP/1.1 over sockets of its own. Status polls (`Request.reuse`) keep their connections alive, so a
    worker polling one provider hundreds of times a second does not pay a connect and a close (on both sides) for
    each poll; everything else gets one fresh connection per request and `Connection: close`.

    The rule that keeps reuse honest: a request is sent at most once. A connection goes back to the pool only
    after an exchange that ended cleanly; it is taken again only if it has been idle at most `max_idle` seconds
    and nothing is readable on it (a server that closed it has sent its end of stream by then). A request on a
    reused connection that still fails before the first answer byte (the server closed it at that moment, or
    received the request and dropped it; the two look the same from here) is reported as `reset`, which the core
    counts as a request the provider may have seen; it is never retried on a fresh connection, because the
    provider may already have it. Safe to share between threads: each connection is used by one at a time."""

    def __init__(self, *, max_idle: float = KEEPALIVE_IDLE, resolver: Resolver = resolve.system_resolver) -> None:
        self._max_idle = max_idle
        self._resolver = resolver
        self._idle: dict[Origin, list[tuple[socket.socket, float]]] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def close(self) -> None:
        """Closes the idle connections (one in use is closed by its answer)."""
        with self._lock:
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for sock, _ in connections:
                sock.close()

    def open(self, request: Request) -> Answer:
        parts = urlsplit(request.url)
        head = request_head(request, parts)
        origin = origin_of_parts(parts, request.trust)
        sock = self.take(origin) if request.reuse and request.guard is None else None
        if sock is None:
            sock = self._connect(parts, request.deadline, request.guard, request.trust)
        try:
            try:
                sock.settimeout(_remaining(request.deadline, "send"))
                sock.sendall(head + (request.body or b""))
            except TimeoutError:
                raise WireError(FailureKind.TIMEOUT, "the request could not be sent within the timeout") from None
            except OSError as exc:
                raise WireError(
                    FailureKind.RESET, f"connection dropped while sending: {exc.__class__.__name__}"
                ) from None
            response = _DeadlineResponse(sock, method=request.method, deadline=request.deadline)
            _begin(response)
            keep = functools.partial(self.give, origin) if request.reuse else None
            return _SocketAnswer(sock, response, keep)
        except BaseException:
            sock.close()
            raise

    def take(self, origin: Origin) -> socket.socket | None:
        """The most recently used idle connection that is fresh enough and still quiet, or None."""
        now = time.monotonic()
        stale: list[socket.socket] = []
        found: socket.socket | None = None
        with self._lock:
            if os.getpid() != self._pid:
                # A forked child must never answer on its parent's connections: two readers of one socket
                # would each take the other's answers. Its copies are closed; the parent's stay open.
                self._pid = os.getpid()
                stale += [sock for connections in self._idle.values() for sock, _ in connections]
                self._idle = {}
            idle = self._idle.get(origin, [])
            while idle and found is None:
                sock, since = idle.pop()
                if now - since <= self._max_idle and _quiet(sock):
                    found = sock
                else:
                    stale.append(sock)
        for sock in stale:
            sock.close()
        return found

    def give(self, origin: Origin, sock: socket.socket) -> None:
        now = time.monotonic()
        with self._lock:
            idle = self._idle.setdefault(origin, [])
            if len(idle) < MAX_IDLE_PER_ORIGIN:
                idle.append((sock, now))
                return
        sock.close()

    def lookup(self, host: str, port: int) -> Future[list[AddrInfo]]:
        """The host's addresses, looked up by this transport's resolver off this thread
        (`pollwarden.transport.resolve`)."""
        return resolve.lookup(self._resolver, host, port)

    def _connect(
        self,
        parts: SplitResult,
        deadline: float,
        guard: AddressGuard | None = None,
        trust: ssl.SSLContext | None = None,
    ) -> socket.socket:
        host = parts.hostname or ""
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        addresses = self._addresses(host, port, deadline)
        if guard is not None:  # a result download: only where `core.addresses` allows
            addresses, why = resolve.guarded(addresses, lambda: self._home(guard, deadline))
            if why is not None:
                raise WireError(FailureKind.LOCAL, f"refusing to connect: {why}; nothing was sent")
        sock = _connect_any(addresses, deadline)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not tls:
            return sock
        try:
            return self._handshake(sock, host, deadline, trust)
        except BaseException:
            sock.close()
            raise

    def _addresses(self, host: str, port: int, deadline: float) -> list[AddrInfo]:
        lookup = self.lookup(host, port)
        if not futures.wait([lookup], timeout=max(deadline - time.monotonic(), 0.0)).done:
            raise WireError(FailureKind.CONNECT, DNS_TIMEOUT)
        return looked_up(lookup)

    def _home(self, guard: AddressGuard, deadline: float) -> Sequence[AddrInfo]:
        try:
            return self._addresses(*guard.home, deadline)
        except WireError:
            return []  # the status origin cannot be resolved now: nothing but public addresses

    def _handshake(
        self, sock: socket.socket, host: str, deadline: float, trust: ssl.SSLContext | None
    ) -> socket.socket:
        """Non-blocking, so a peer that drips its handshake is held to the deadline as well."""
        tls = wrap_tls(sock, host, trust)
        try:
            while True:
                try:
                    tls.do_handshake()
                    return tls
                except ssl.SSLWantReadError:
                    ready = select.select([tls], [], [], _remaining(deadline, "handshake"))[0]
                except ssl.SSLWantWriteError:
                    ready = select.select([], [tls], [], _remaining(deadline, "handshake"))[1]
                if not ready:
                    raise TimeoutError("handshake")
        except TimeoutError:
            raise WireError(FailureKind.CONNECT, TLS_TIMEOUT) from None
        except OSError as exc:  # ssl.SSLError is one
            raise tls_failure(exc) from None


def _connect_any(addresses: Sequence[AddrInfo], deadline: float) -> socket.socket:
    """The first of the addresses that accepts, in turn, as `socket.create_connection` tries them, each attempt
    given only the time left."""
    last = no_address()
    for family, kind, proto, _, address in addresses:
        try:
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            last = exc
            continue
        try:
            sock.settimeout(_remaining(deadline, "connect"))
            sock.connect(address)
            return sock
        except TimeoutError:
            sock.close()
            raise WireError(FailureKind.CONNECT, CONNECT_TIMEOUT) from None
        except OSError as exc:
            sock.close()
            last = exc
    raise connect_failure(last)


def origin_of_parts(parts: SplitResult, trust: ssl.SSLContext | None = None) -> Origin:
    tls = parts.scheme == "https"
    return (parts.scheme, parts.hostname or "", parts.port or (443 if tls else 80), trust if tls else None)


def _quiet(sock: socket.socket) -> bool:
    """Nothing to read on an idle connection: no end of stream, no stray bytes, no TLS record left unread."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return False
    try:
        return not select.select([sock], [], [], 0)[0]
    except (OSError, ValueError):
        return False


def _begin(response: _DeadlineResponse) -> None:
    """Status line and headers, under the deadline and the caps."""
    try:
        response.begin()
    except TimeoutError:
        raise WireError(FailureKind.TIMEOUT, "no complete answer head within the timeout") from None
    except http.client.RemoteDisconnected:
        raise WireError(FailureKind.RESET, "the provider closed the connection without answering") from None
    except http.client.LineTooLong:
        raise WireError(FailureKind.PROTOCOL, "a status or header line is longer than 64 KiB") from None
    except http.client.BadStatusLine:
        raise WireError(FailureKind.PROTOCOL, NOT_STATUS) from None
    except http.client.HTTPException as exc:
        raise WireError(FailureKind.PROTOCOL, f"broken answer head: {exc}") from None
    except OSError as exc:
        raise WireError(FailureKind.RESET, f"connection dropped: {exc.__class__.__name__}") from None
    if response.reader.ended:
        # http.client takes end-of-stream for the blank line that ends the headers; a cut head is not an answer.
        raise WireError(FailureKind.RESET, "the connection closed in the middle of the answer head")
    if response.msg.defects:
        # A line that is not a header (the email package ends the head there and drops what follows, a
        # Content-Length say), a lone CR (a line end to it), a line without a name. Checked after the cut head
        # above: a head cut inside a name is a reset, as the selector has it.
        raise WireError(FailureKind.PROTOCOL, NOT_A_HEADER)
    if sum(len(k) + len(v) + 4 for k, v in response.msg.items()) > MAX_HEADER_BYTES:
        raise WireError(FailureKind.PROTOCOL, f"the answer's headers exceed {MAX_HEADER_BYTES} bytes")
    check_framing(response.msg.items())
