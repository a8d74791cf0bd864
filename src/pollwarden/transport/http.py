"""One request: credential injected, redirects refused, body capped and decoded, total time bounded, secret scrubbed.

The driver half of R1: it reports what happened on the wire as a `Response` or `TransportFailure` and
leaves every judgement to the core. Every answer is hostile until parsed, so this module promises three
things whatever the peer sends: the whole exchange, connect to last byte, ends by the contract's `timeout`
(each socket read gets only the time that is left, so a byte-a-second drip cannot stretch it); nothing the
provider sends grows past the caps (100 headers, 64 KiB of headers, `max_body_bytes` of DECODED body); and no
`Exchange` leaves the client holding the credential in any form (`core.scrub`).

The wire is sockets `pollwarden.transport.wire` connects itself (and keeps alive for status polls): status polls, over
http
and https, go through `pollwarden.transport.wire_select` (non-blocking, many at once on one selector with `Fetches`, the
head parsed by a strict parser of its own), everything else through `http.client`; on both, the host's lookup
counts against the deadline (`pollwarden.transport.resolve`). httpx's timeouts are per read,
and its per-request cost was four times that of the standard library on the poll path. `Transport` is the seam
for tests: `FakeTransport` answers from a function, as `httpx.MockTransport` does.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import re
import ssl
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, BinaryIO
from urllib.parse import SplitResult, urlsplit

from .. import __version__
from ..core.contract.parse import Contract
from ..core.contract.reader import PLAIN_HTTP_FIX, in_clear
from ..core.observe import Exchange, FailureKind, Response, TransportFailure
from ..core.scrub import Scrubber
from . import wire_round, wire_select
from .credentials import Credential as Credential
from .credentials import CredentialError as CredentialError
from .credentials import resolve_secret as resolve_secret
from .resolve import AddressGuard
from .trust import ca_context
from .wire import KEEPALIVE_IDLE as KEEPALIVE_IDLE
from .wire import MAX_HEADER_BYTES as MAX_HEADER_BYTES
from .wire import MAX_HEADERS as MAX_HEADERS
from .wire import READ_CHUNK as READ_CHUNK
from .wire import Answer as Answer
from .wire import Request as Request
from .wire import SocketTransport as SocketTransport
from .wire import Transport as Transport
from .wire import WireError as WireError

ACCEPT_ENCODING = "gzip, deflate"
"""Only what `_decoder` decodes: advertising more would turn every compressing gateway into invalid_response."""

_MESSAGE_CAP = 300


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


# Regular expressions rather than a loop over characters: this runs twice per request, on every header.
_URL_CHARS = re.compile("[!-~]*")
_HEADER_NAME = re.compile("[A-Za-z0-9_-]+")
_HEADER_VALUE = re.compile("[\t\x20-\x7e\xa0-\xff]*")


def _check_request(method: str, url: str, parts: SplitResult, headers: Mapping[str, str]) -> None:
    """Local integration errors: nothing has left the machine when these are raised."""
    _check_target(method, url, parts)
    _check_headers(headers)


def _check_target(method: str, url: str, parts: SplitResult) -> None:
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


def _check_headers(headers: Mapping[str, str]) -> None:
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
        # [headers] are the contract's origin's (an API version, a target operation): never sent elsewhere. Those
        # that name the status request ({reservation}, {lease}) come filled in with it, from the flow.
        static = dict(self._contract.static_headers) if origin_of(url) == self._contract.origin else {}
        headers = {**self._base_headers, **static, **extra}
        if credential and self._sends and self._credential is not None:
            if in_clear(url) and not self._contract.allow_plain_http:
                # The contract's load refuses this origin; a contract that got here another way still sends nothing.
                raise WireError(
                    FailureKind.LOCAL,
                    f"refusing to send the credential to {origin_of(url)} over plain http: {PLAIN_HTTP_FIX}",
                )
            try:
                self._credential.apply(method, url, headers, body, self._clock())
            except CredentialError as exc:
                # Nothing was sent: a local failure, which the core stops as an integration failure (never a loop).
                raise WireError(FailureKind.LOCAL, f"the credential could not be read: {exc}") from None
        return headers

    def ready(self) -> bool:
        """The next request can have its credential at once: `prepare` would not wait for a token command or file
        (if it would, the run it waits for is under way now, off this thread)."""
        return not self._sends or self._credential is None or self._credential.ready()

    def prepare(self) -> None:
        """Read the credential now if the next request would (an expired token, one a 401 dropped: a token command
        may take seconds), so a driver checks a request's time limit (`flow.too_late`) after that wait, not
        before it. A credential that cannot be read is left to the request, which meets the same failure and ends
        as it always has (a recorded local failure), so nothing here may raise into a batch."""
        if self._sends and self._credential is not None:
            with contextlib.suppress(Exception):
                self._credential.prime()

    def renew(self) -> None:
        """Forget the credential held (a token fetched, a variable read once), so the next request reads the one
        configured now: a person chose one check with it after a refusal."""
        if self._credential is not None:
            self._credential.renew()

    def fetch(
        self, job_id: str, extra_headers: Mapping[str, str] | None = None, *, location: str | None = None
    ) -> Exchange:
        """One status request as the contract's [status] says; `location` is a status URL the provider returned
        (same origin only)."""
        started = self._start_fetch(job_id, extra_headers, location)
        return started if isinstance(started, TransportFailure) else self._send_started(started)

    @property
    def selects(self) -> bool:
        """Its status polls go on `wire_select` (over its own sockets, `wire_select.SCHEMES`): `Fetches` sends
        them together."""
        scheme = self._contract.origin.partition("://")[0]
        return isinstance(self._transport, SocketTransport) and scheme in wire_select.SCHEMES

    def _start_fetch(
        self, job_id: str, extra_headers: Mapping[str, str] | None, location: str | None
    ) -> _Started | TransportFailure:
        url = self._contract.status_url_for(job_id) if location is None else location
        status = self._contract.status
        body = status.body_for(job_id)
        headers = dict(extra_headers or {})
        if body is not None:
            headers["Content-Type"] = status.content_type
        return self._start(status.method, url, body, headers, True, True)

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
        started = self._start(method, url, body, extra_headers, credential, reuse)
        return started if isinstance(started, TransportFailure) else self._send_started(started)

    def _send_started(self, started: _Started) -> Exchange:
        if self._selectable(started.request):
            return self._finish(started, wire_round.exchange([(self._socket, started.request)])[0])
        try:
            answer: Answer | WireError = self._transport.open(started.request)
        except TimeoutError:  # a transport's own deadline check
            answer = WireError(FailureKind.TIMEOUT, "no answer within the timeout")
        except WireError as exc:
            answer = exc
        return self._finish(started, answer)

    @property
    def _socket(self) -> SocketTransport:
        assert isinstance(self._transport, SocketTransport)
        return self._transport

    def _selectable(self, request: Request) -> bool:
        return isinstance(self._transport, SocketTransport) and wire_select.selectable(request)

    def _start(
        self,
        method: str,
        url: str,
        body: bytes | None,
        extra_headers: Mapping[str, str] | None,
        credential: bool,
        reuse: bool,
    ) -> _Started | TransportFailure:
        """Everything before the wire: the request checked and built, the credential applied. Raises
        CredentialError for a credential bound elsewhere; nothing has been sent when this returns a failure."""
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
            # The caller's headers before the credential is applied (it may fetch a token); then all of them.
            _check_request(method, url, parts, extra_headers or {})
            headers = self._headers(method, url, extra_headers or {}, body, credential)
            _check_headers(headers)
            trust = self._trust(url)
        except WireError as exc:
            return self._failure(exc.kind, exc.message, sent_at)
        cap = self._contract.max_body_bytes
        request = Request(method, url, tuple(headers.items()), body, deadline, reuse=reuse, body_cap=cap, trust=trust)
        return _Started(request, sent_at)

    def _trust(self, url: str) -> ssl.SSLContext | None:
        """The contract's CA bundle for an https request to its own origin ([tls] ca_file); None, the system's
        store, for anything else (an http request, a result on another host). Raises WireError (local, nothing
        sent) for a bundle that cannot be used."""
        path, origin = self._contract.ca_file, self._contract.origin
        if path is None or not origin.startswith("https://") or origin_of(url) != origin:
            return None
        return ca_context(path)

    def _finish(self, started: _Started, answer: Answer | WireError) -> Exchange:
        """The answer read under the caps, or what went wrong on the wire, as the core's Exchange."""
        try:
            if isinstance(answer, WireError):
                raise answer
            deadline, received_at = started.request.deadline, None
            if isinstance(answer, wire_select.HeldAnswer):
                # Read whole within its deadline, perhaps while others of its batch were still coming in.
                deadline = math.inf
                received_at = self._clock() - timedelta(seconds=time.monotonic() - answer.arrived)
            try:
                return self._read(answer, started.sent_at, deadline, received_at)
            finally:
                answer.close()
        except WireError as exc:
            return self._failure(exc.kind, exc.message, started.sent_at)

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
        credential only to the contract's origin, no redirect followed, the secret removed from what is written;
        and the connection is made only to an address `core.addresses` allows (`resolve.AddressGuard`).

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
            # A result's address is checked where the connection is made: public only, unless the contract's
            # own status origin is loopback or private too (`core.addresses`).
            home = urlsplit(self._contract.origin)
            guard = AddressGuard((home.hostname or "", home.port or (443 if home.scheme == "https" else 80)))
            request = Request("GET", url, tuple(headers.items()), None, deadline, guard=guard, trust=self._trust(url))
            try:
                answer = self._transport.open(request)
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
        shown_headers = self._scrubber.headers(
            {k: v for k, v in headers.items() if k not in ("content-encoding", "content-length")}
        )
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

    def _read(
        self, answer: Answer, sent_at: datetime, deadline: float, received_at: datetime | None = None
    ) -> Response:
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
        return Response(
            status=answer.status,
            headers=self._scrubber.headers(headers),
            body=self._scrubber.binary(b"".join(chunks)[:cap]),
            sent_at=sent_at,
            received_at=self._clock() if received_at is None else received_at,
            truncated=truncated,
        )

    def _failure(self, kind: FailureKind, message: str, sent_at: datetime) -> TransportFailure:
        text = self._scrubber.text(message)[:_MESSAGE_CAP]
        return TransportFailure(kind=kind, message=text, sent_at=sent_at, failed_at=self._clock())


@dataclass(frozen=True)
class _Started:
    request: Request
    sent_at: datetime


FetchCall = tuple[StatusClient, str, Mapping[str, str] | None, str | None]
"""A status poll to make: the client, the job id, extra headers and a provider-given status URL (or None)."""


@dataclass(eq=False)
class Fetch:
    """One status poll of `Fetches`: its `result` once it ended, the Exchange or the exception `fetch` raises."""

    client: StatusClient
    started: _Started | None
    result: Exchange | Exception | None = None
    sent: wire_select.Exchanging | None = None


class Fetches:
    """`StatusClient.fetch` for polls a batch starts as its flows reach them and takes back as each one ends: those
    of clients on their own sockets (`StatusClient.selects`) on one selector in the calling thread
    (`wire_round.Round`), any other at once, in turn. `fetch_all` is its one-shot form."""

    def __init__(self, *, ringable: bool = False) -> None:
        self.round = wire_round.Round(ringable=ringable)
        self._sent: dict[wire_select.Exchanging, Fetch] = {}

    def __enter__(self) -> Fetches:
        return self

    def __exit__(self, *_: object) -> None:
        self.round.close()

    def start(self, calls: Sequence[FetchCall]) -> list[Fetch]:
        """The polls started, every request built before the first is sent, so they leave together (a provider
        reads a burst in one wake-up); a poll's `result` is set already if it ended before the wire (a refused
        location, a credential that could not be read) or was sent in turn."""
        fetches: list[Fetch] = []
        for client, job_id, headers, location in calls:
            try:
                started = client._start_fetch(job_id, headers, location)
            except Exception as exc:  # a CredentialError (a location bound elsewhere): that poll's own failure
                fetches.append(Fetch(client, None, exc))
                continue
            fetches.append(Fetch(client, started) if isinstance(started, _Started) else Fetch(client, None, started))
        for fetch in fetches:
            if fetch.started is None:
                continue
            if fetch.client._selectable(fetch.started.request):
                fetch.sent = self.round.add(fetch.client._socket, fetch.started.request)
                self._sent[fetch.sent] = fetch
            else:
                fetch.result = fetch.client._send_started(fetch.started)
        return fetches

    def wait(self, gather: float, *, until: float | None = None) -> tuple[list[Fetch], list[Future[Any]]]:
        """`Round.wait`: the polls that ended (their `result` set) and the watched futures that are done."""
        fetches: list[Fetch] = []
        futures: list[Future[Any]] = []
        for item in self.round.wait(gather, until=until):
            if isinstance(item, Future):
                futures.append(item)
                continue
            fetch = self._sent.pop(item)
            assert fetch.started is not None and item.result is not None
            fetch.result = fetch.client._finish(fetch.started, item.result)
            fetches.append(fetch)
        return fetches, futures

    def abandon(self, fetch: Fetch) -> None:
        """A poll in flight given up (its watch was interrupted): its connection closed, never handed back."""
        if fetch.sent is not None and self._sent.pop(fetch.sent, None) is not None:
            self.round.abandon(fetch.sent)


def fetch_all(calls: Sequence[FetchCall]) -> list[Exchange | Exception]:
    """`StatusClient.fetch` for many polls at once (`Fetches`). Each result is the poll's Exchange, or the
    exception its `fetch` would raise."""
    with Fetches() as fetches:
        started = fetches.start(calls)
        while fetches.round.live:
            fetches.wait(math.inf)
    results: list[Exchange | Exception] = []
    for fetch in started:
        assert fetch.result is not None
        results.append(fetch.result)
    return results


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
