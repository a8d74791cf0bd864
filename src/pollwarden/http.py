"""One request: credential injected, redirects refused, body capped and decoded, total time bounded, secret scrubbed.

The driver half of R1: it reports what happened on the wire as a `Response` or `TransportFailure` and
leaves every judgement to the core. Every answer is hostile until parsed, so this module promises three
things whatever the peer sends: the whole exchange, connect to last byte, ends by the contract's `timeout`
(each socket read gets only the time that is left, so a byte-a-second drip cannot stretch it); nothing the
provider sends grows past the caps (100 headers, 64 KiB of headers, `max_body_bytes` of DECODED body); and no
`Exchange` leaves the client holding the credential in any form (`core.scrub`).

The wire is `http.client` over a socket this module connects itself: httpx's timeouts are per read, and its
per-request cost was four times that of the standard library on the poll path. `Transport` is the seam for
tests: `FakeTransport` answers from a function, as `httpx.MockTransport` does.
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import io
import os
import re
import select
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import BinaryIO, Protocol
from urllib.parse import SplitResult, urlsplit

from . import __version__
from .core.contract import Contract
from .core.observe import Exchange, FailureKind, Response, TransportFailure
from .core.scrub import Scrubber
from .credentials import Credential as Credential
from .credentials import CredentialError as CredentialError
from .credentials import resolve_secret as resolve_secret
from .errors import EXIT_ESCALATED, PollwardenError

MAX_HEADERS = 100
"""`http.client` refuses a 101st header line with HTTPException; the same number is named here for tests."""

MAX_HEADER_BYTES = 64 * 1024
READ_CHUNK = 64 * 1024
ACCEPT_ENCODING = "gzip, deflate"
"""Only what `_decoder` decodes: advertising more would turn every compressing gateway into invalid_response."""

_MESSAGE_CAP = 300

KEEPALIVE_IDLE = 1.0
"""Seconds a pooled connection may sit idle and still be reused: well under the shortest keep-alive timeout
common servers use (gunicorn 2 s; Apache, Node and uvicorn 5 s; nginx 75 s), so the server has rarely closed
it first. When it has, the request fails as delivery-unknown and is never sent again (see `SocketTransport`)."""

MAX_IDLE_PER_ORIGIN = 64


class WireError(PollwardenError):
    """A failure already classified: `kind` says whether the request may have reached the provider.

    Caught inside the client (it becomes a `TransportFailure`);
    it is about the provider's answer, so its exit code is a stop's (4)."""

    exit_code = EXIT_ESCALATED

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@dataclass(frozen=True)
class Request:
    """What a transport is asked to send; `deadline` is the `time.monotonic()` by which the last byte is in."""

    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None
    deadline: float
    reuse: bool = False
    """May go over a kept-alive connection (status polls only: a read whose repetition costs one counted poll).
    Anything else (a submission, a cancel, a download) always gets a fresh connection and `Connection: close`,
    so a failure before its answer can be a clear "not sent" (connect) rather than a delivery-unknown one."""


class Answer(Protocol):
    """The head of an answer and its raw (still content-encoded) body; `read` returns b"" at the end."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> tuple[tuple[str, str], ...]: ...

    def read(self, size: int) -> bytes: ...

    def close(self) -> None: ...


class Transport(Protocol):
    """Sends one request; raises `WireError` for anything that is not an answer."""

    def open(self, request: Request) -> Answer: ...

    def close(self) -> None: ...


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

    def _close_conn(self) -> None:
        """http.client calls this when the body has been read to its end. The buffer is kept, not closed: what
        is still in it (bytes the server sent after its answer) decides whether the connection may be reused."""
        if isinstance(self.fp, io.BufferedReader):
            self.spent = self.fp
        self.fp = None  # type: ignore[assignment]

    def ended_cleanly(self) -> bool:
        """The whole answer was read, the server keeps the connection open, and nothing follows the answer."""
        if self.spent is None or self.will_close:
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
        self.headers = tuple(response.msg.items())

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


Origin = tuple[str, str, int]


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

    def __init__(self, *, max_idle: float = KEEPALIVE_IDLE) -> None:
        self._max_idle = max_idle
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
        head = _request_head(request, parts)
        origin = _origin(parts)
        sock = self._take(origin) if request.reuse else None
        if sock is None:
            sock = self._connect(parts, request.deadline)
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
            keep = functools.partial(self._give, origin) if request.reuse else None
            return _SocketAnswer(sock, response, keep)
        except BaseException:
            sock.close()
            raise

    def _take(self, origin: Origin) -> socket.socket | None:
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

    def _give(self, origin: Origin, sock: socket.socket) -> None:
        now = time.monotonic()
        with self._lock:
            idle = self._idle.setdefault(origin, [])
            if len(idle) < MAX_IDLE_PER_ORIGIN:
                idle.append((sock, now))
                return
        sock.close()

    def _connect(self, parts: SplitResult, deadline: float) -> socket.socket:
        host = parts.hostname or ""
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        try:
            sock = socket.create_connection((host, port), timeout=_remaining(deadline, "connect"))
        except TimeoutError:
            raise WireError(FailureKind.CONNECT, "connect timed out") from None
        except UnicodeError:  # the IDNA codec refuses a host like "a..b" before any lookup
            raise WireError(FailureKind.LOCAL, "the URL's host name cannot be encoded") from None
        except OSError as exc:
            raise WireError(FailureKind.CONNECT, f"connection failed: {exc.__class__.__name__}: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not tls:
            return sock
        try:
            return self._handshake(sock, host, deadline)
        except BaseException:
            sock.close()
            raise

    def _handshake(self, sock: socket.socket, host: str, deadline: float) -> socket.socket:
        """Non-blocking, so a peer that drips its handshake is held to the deadline as well."""
        tls = _default_tls().wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
        tls.setblocking(False)
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
            raise WireError(FailureKind.CONNECT, "TLS handshake did not finish within the timeout") from None
        except (ssl.SSLError, OSError) as exc:
            raise WireError(FailureKind.CONNECT, f"TLS failed: {exc.__class__.__name__}: {exc}") from None


def _origin(parts: SplitResult) -> Origin:
    tls = parts.scheme == "https"
    return (parts.scheme, parts.hostname or "", parts.port or (443 if tls else 80))


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
        raise WireError(FailureKind.PROTOCOL, "the answer does not start with an HTTP status line") from None
    except http.client.HTTPException as exc:
        raise WireError(FailureKind.PROTOCOL, f"broken answer head: {exc}") from None
    except OSError as exc:
        raise WireError(FailureKind.RESET, f"connection dropped: {exc.__class__.__name__}") from None
    if response.reader.ended:
        # http.client takes end-of-stream for the blank line that ends the headers; a cut head is not an answer.
        raise WireError(FailureKind.RESET, "the connection closed in the middle of the answer head")
    if sum(len(k) + len(v) + 4 for k, v in response.msg.items()) > MAX_HEADER_BYTES:
        raise WireError(FailureKind.PROTOCOL, f"the answer's headers exceed {MAX_HEADER_BYTES} bytes")
    _check_framing(response.msg)


def _check_framing(headers: http.client.HTTPMessage) -> None:
    """RFC 9112 section 6.3: an answer whose length is ambiguous is not read at all (one reader's body end is
    another's next answer): Content-Length given twice with different values, or beside Transfer-Encoding, or a
    transfer coding other than chunked."""
    lengths = {value.strip() for value in headers.get_all("Content-Length") or []}
    codings = [c.strip().lower() for value in headers.get_all("Transfer-Encoding") or [] for c in value.split(",")]
    if len(lengths) > 1:
        raise WireError(FailureKind.PROTOCOL, "the answer gives two different Content-Length values")
    if codings and lengths:
        raise WireError(FailureKind.PROTOCOL, "the answer gives both Transfer-Encoding and Content-Length")
    if codings and codings != ["chunked"]:
        raise WireError(FailureKind.PROTOCOL, f"unsupported Transfer-Encoding {', '.join(codings)!r}")


def _request_head(request: Request, parts: SplitResult) -> bytes:
    """The request line and headers as bytes, refused here (nothing sent) when they cannot be sent as they are."""
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [f"{request.method} {target} HTTP/1.1", f"Host: {parts.netloc}"]
    lines += [f"{name}: {value}" for name, value in request.headers]
    if request.body is not None or request.method in {"POST", "PUT", "PATCH"}:
        lines.append(f"Content-Length: {len(request.body or b'')}")
    if not request.reuse:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# Regular expressions rather than a loop over characters: this runs twice per request, on every header.
_URL_CHARS = re.compile("[!-~]*")
_HEADER_NAME = re.compile("[A-Za-z0-9_-]+")
_HEADER_VALUE = re.compile("[\t\x20-\x7e\xa0-\xff]*")


def _check_request(method: str, url: str, parts: SplitResult, headers: Mapping[str, str]) -> None:
    """Local integration errors: nothing has left the machine when these are raised."""
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise WireError(FailureKind.LOCAL, "the URL is not an absolute http(s) URL")
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number in range
    except ValueError:
        raise WireError(FailureKind.LOCAL, "the URL's port is not a number from 1 to 65535") from None
    if parts.username is not None or parts.password is not None:
        raise WireError(FailureKind.LOCAL, "the URL carries userinfo; credentials travel only in [auth]")
    if not method.isascii() or not method.isalpha():
        raise WireError(FailureKind.LOCAL, "the method is not an HTTP token")
    if not _URL_CHARS.fullmatch(url):
        raise WireError(FailureKind.LOCAL, "the URL holds a space, a control or a non-ASCII character")
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name):
            raise WireError(FailureKind.LOCAL, f"header name {name[:40]!r} is not a token of letters, digits, - and _")
        # The value is never quoted back: it may be the credential.
        if not _HEADER_VALUE.fullmatch(value):
            raise WireError(FailureKind.LOCAL, f"header {name} holds a control or non-latin-1 character")


class _Decoder:
    """Content-Encoding gzip or deflate, undone in bounded steps so a bomb never grows past the cap."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._raw_deflate_tried = encoding != "deflate"
        self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
        self._fed = False

    def feed(self, data: bytes, limit: int) -> bytes:
        """At most `limit` bytes out (limit >= 1); more pending output shows as a full `limit`."""
        try:
            out = self._zlib.decompress(data, limit)
        except zlib.error:
            if self._fed or self._raw_deflate_tried:
                raise WireError(FailureKind.PROTOCOL, f"the {self.encoding} body is corrupt") from None
            # "deflate" is sent both zlib-wrapped (the standard) and raw (some servers): try the other.
            self._raw_deflate_tried = True
            self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
            return self.feed(data, limit)
        self._fed = True
        return out

    def finish(self) -> None:
        if not self._zlib.eof:
            raise WireError(FailureKind.PROTOCOL, f"the {self.encoding} body ended before its compressed stream did")


def _decoder(headers: Mapping[str, str]) -> _Decoder | None:
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding in {"gzip", "x-gzip"}:
        return _Decoder("gzip")
    if encoding == "deflate":
        return _Decoder("deflate")
    return None  # identity; anything else is passed on still encoded, and the parser refuses it by its header


def _pieces(
    answer: Answer, decoder: _Decoder | None, deadline: float, room: Callable[[], int]
) -> Iterator[tuple[bytes, int]]:
    """The body as decoded pieces, each with the raw bytes read so far; `room` is how much more decoded output
    the caller will take (a decompression bomb is cut there), and the whole read ends at `deadline`."""
    raw_size = 0
    while True:
        if time.monotonic() > deadline:
            raise WireError(FailureKind.TIMEOUT, "the body did not arrive within the timeout")
        raw = answer.read(READ_CHUNK)
        if not raw:
            if decoder is not None:
                decoder.finish()
            return
        raw_size += len(raw)
        yield (raw if decoder is None else decoder.feed(raw, room())), raw_size


class StatusClient:
    """Holds the secret so callers never have to; it leaves this object only as a request header."""

    def __init__(
        self,
        contract: Contract,
        secret: Credential | str | None,
        *,
        clock: Callable[[], datetime],
        transport: Transport | None = None,
    ) -> None:
        self._contract = contract
        # A plain string is a header token the caller already read (the older API); either way one object holds it.
        self._credential = Credential.static(contract, secret) if isinstance(secret, str) else secret
        # A contract without [auth] sends nothing, whatever it is handed; what it was handed is still scrubbed.
        self._sends = contract.auth is not None
        self._clock = clock
        self._transport: Transport = SocketTransport() if transport is None else transport
        self._base_headers = {
            "User-Agent": f"pollwarden/{__version__}",
            "Accept": "application/json",
            "Accept-Encoding": ACCEPT_ENCODING,
        }

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> StatusClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def _scrubber(self) -> Scrubber:
        """Rebuilt when the credential fetches a new token, and still knowing every older one."""
        return Scrubber(()) if self._credential is None else self._credential.scrubber()

    def _headers(
        self, method: str, url: str, extra: Mapping[str, str], body: bytes | None, credential: bool
    ) -> dict[str, str]:
        # [headers] are the contract's origin's (an API version, a target operation): never sent elsewhere.
        static = dict(self._contract.headers) if origin_of(url) == self._contract.origin else {}
        headers = {**self._base_headers, **static, **extra}
        if credential and self._sends and self._credential is not None:
            try:
                self._credential.apply(method, url, headers, body, self._clock())
            except CredentialError as exc:
                # Nothing was sent: a local failure, which the core stops as an integration failure (never a loop).
                raise WireError(FailureKind.LOCAL, f"the credential could not be read: {exc}") from None
        return headers

    def fetch(
        self, job_id: str, extra_headers: Mapping[str, str] | None = None, *, location: str | None = None
    ) -> Exchange:
        """One status request as the contract's [status] says; `location` is a status URL the provider returned
        (same origin only)."""
        url = self._contract.status_url_for(job_id) if location is None else location
        status = self._contract.status
        body = status.body_for(job_id)
        headers = dict(extra_headers or {})
        if body is not None:
            headers["Content-Type"] = status.content_type
        return self.send(status.method, url, body=body, extra_headers=headers, reuse=True)

    def send(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        extra_headers: Mapping[str, str] | None = None,
        credential: bool = True,
        reuse: bool = False,
    ) -> Exchange:
        """One request under the same guards as a status poll: the credential only ever goes to the contract's
        origin, redirects are not followed, the body read is capped and the whole exchange time-bounded."""
        if credential and origin_of(url) != self._contract.origin:
            raise CredentialError(
                f"refusing to send the credential to {self._scrubber.text(origin_of(url))}: contract"
                f" {self._contract.name!r} binds it to {self._contract.origin}"
            )
        sent_at = self._clock()
        deadline = time.monotonic() + self._contract.timeout.total_seconds()
        try:
            try:
                parts = urlsplit(url)
            except ValueError:
                raise WireError(FailureKind.LOCAL, "the URL cannot be parsed") from None
            _check_request(method, url, parts, extra_headers or {})
            headers = self._headers(method, url, extra_headers or {}, body, credential)
            _check_request(method, url, parts, headers)
            request = Request(method, url, tuple(headers.items()), body, deadline, reuse=reuse)
            try:
                answer = self._transport.open(request)
            except TimeoutError:  # a transport's own deadline check
                raise WireError(FailureKind.TIMEOUT, "no answer within the timeout") from None
            try:
                return self._read(answer, sent_at, deadline)
            finally:
                answer.close()
        except WireError as exc:
            return self._failure(exc.kind, exc.message, sent_at)

    def download(
        self,
        url: str,
        sink: BinaryIO,
        *,
        cap: int,
        credential: bool,
        extra_headers: Mapping[str, str] | None = None,
    ) -> Download | TransportFailure:
        """A GET whose body is streamed into `sink` under its own cap, not the status cap: a result file can be far
        bigger than any status answer. Only a 2xx body is written. The same guards as `send` otherwise: the
        credential only to the contract's origin, no redirect followed, the secret removed from what is written.

        The whole exchange is bounded by the contract's timeout plus one second per MiB of the cap: a download
        takes longer than a status poll, and a peer that drips bytes must still not hold the process for ever."""
        if credential and origin_of(url) != self._contract.origin:
            raise CredentialError(
                f"refusing to send the credential to {self._scrubber.text(origin_of(url))}: contract"
                f" {self._contract.name!r} binds it to {self._contract.origin}"
            )
        sent_at = self._clock()
        deadline = time.monotonic() + self._contract.timeout.total_seconds() + cap / (1 << 20)
        try:
            headers = self._headers("GET", url, extra_headers or {}, None, credential)
            try:
                parts = urlsplit(url)
            except ValueError:
                raise WireError(FailureKind.LOCAL, "the URL cannot be parsed") from None
            _check_request("GET", url, parts, headers)
            try:
                answer = self._transport.open(Request("GET", url, tuple(headers.items()), None, deadline))
            except TimeoutError:
                raise WireError(FailureKind.TIMEOUT, "no answer within the timeout") from None
            try:
                return self._stream(answer, sink, cap, deadline)
            finally:
                answer.close()
        except WireError as exc:
            return self._failure(exc.kind, exc.message, sent_at)

    def _stream(self, answer: Answer, sink: BinaryIO, cap: int, deadline: float) -> Download:
        headers: dict[str, str] = {}
        for name, value in answer.headers:
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        scrub = self._scrubber.text
        shown_headers = {
            scrub(k): scrub(v) for k, v in headers.items() if k not in ("content-encoding", "content-length")
        }
        if not 200 <= answer.status < 300:
            return Download(answer.status, shown_headers, 0, hashlib.sha256().hexdigest(), over_cap=False)
        decoder = _decoder(headers)
        digest = hashlib.sha256()
        hold = max(self._scrubber.longest - 1, 0)
        pending = b""
        size = 0

        def write(data: bytes) -> None:
            nonlocal size
            digest.update(data)
            sink.write(data)
            size += len(data)

        def room() -> int:  # read at each piece: what is written and held so far
            return cap + 1 - size - len(pending)

        for data, raw_size in _pieces(answer, decoder, deadline, room):
            # The tail that could be the start of a secret waits for the next piece before it is scrubbed.
            pending = self._scrubber.raw(pending + data) if self._scrubber else pending + data
            if len(pending) > hold:
                cut = len(pending) - hold
                write(pending[:cut])
                pending = pending[cut:]
            if size + len(pending) > cap or raw_size > cap:
                return Download(answer.status, shown_headers, size, digest.hexdigest(), over_cap=True)
        write(pending)
        return Download(answer.status, shown_headers, size, digest.hexdigest(), over_cap=False)

    def _read(self, answer: Answer, sent_at: datetime, deadline: float) -> Response:
        if answer.status == 401 and self._credential is not None:
            # The next request fetches the token again; the core decides whether there is a next request.
            self._credential.invalidate()
        headers: dict[str, str] = {}
        for name, value in answer.headers:
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        cap = self._contract.max_body_bytes
        decoder = _decoder(headers)
        chunks: list[bytes] = []
        size = 0
        truncated = False

        def room() -> int:  # read at each piece: what is kept so far
            return cap + 1 - size

        for data, raw_size in _pieces(answer, decoder, deadline, room):
            chunks.append(data)
            size += len(data)
            # The raw count bounds a stream that decodes to nothing; the decoded count is the contract's cap.
            if size > cap or raw_size > cap:
                truncated = True
                break
        if decoder is not None:
            # These describe the bytes on the wire, which nobody downstream sees.
            headers.pop("content-encoding", None)
            headers.pop("content-length", None)
        scrub = self._scrubber.text
        return Response(
            status=answer.status,
            headers={scrub(k): scrub(v) for k, v in headers.items()},
            body=self._scrubber.binary(b"".join(chunks)[:cap]),
            sent_at=sent_at,
            received_at=self._clock(),
            truncated=truncated,
        )

    def _failure(self, kind: FailureKind, message: str, sent_at: datetime) -> TransportFailure:
        text = self._scrubber.text(message)[:_MESSAGE_CAP]
        return TransportFailure(kind=kind, message=text, sent_at=sent_at, failed_at=self._clock())


@dataclass(frozen=True)
class Download:
    """What `StatusClient.download` wrote: `size` bytes with this sha256; `over_cap` means the body went on past
    the cap and what was written is a fragment the caller must remove."""

    status: int
    headers: Mapping[str, str]
    size: int
    sha256: str
    over_cap: bool


@dataclass(frozen=True)
class Reply:
    """A scripted answer for `FakeTransport`; `body` is sent as it is (encode it yourself to test decoding)."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


class _ReplyAnswer:
    def __init__(self, reply: Reply) -> None:
        self.status = reply.status
        self.headers = tuple(reply.headers.items())
        self._body = io.BytesIO(reply.body)

    def read(self, size: int) -> bytes:
        return self._body.read(size)

    def close(self) -> None:
        self._body.close()


class FakeTransport:
    """Answers from a function, like `httpx.MockTransport`; the function may raise `WireError` to fail a request."""

    def __init__(self, handler: Callable[[Request], Reply]) -> None:
        self._handler = handler
        self.requests: list[Request] = []

    def open(self, request: Request) -> Answer:
        self.requests.append(request)
        return _ReplyAnswer(self._handler(request))

    def close(self) -> None:
        """Nothing to release."""
