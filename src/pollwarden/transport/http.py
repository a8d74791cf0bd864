"""One request: credential injected, redirects refused, body capped and decoded, total time bounded, secret scrubbed.

The driver half of R1: it reports what happened on the wire as a `Response` or `TransportFailure` and
leaves every judgement to the core. Every answer is hostile until parsed, so this module promises three
things whatever the peer sends: the whole exchange, connect to last byte, ends by the contract's `timeout`
(each socket read gets only the time that is left, so a byte-a-second drip cannot stretch it); nothing the
provider sends grows past the caps (100 headers, 64 KiB of headers, `max_body_bytes` of DECODED body); and no
`Exchange` leaves the client holding the credential in any form (`core.scrub`).

The transport package, one thing a module:
- `messages`: the `Request`, the `Answer` and `Transport` seams, `WireError`, the caps;
- `http11`: HTTP/1.1's rules for both paths (the request checked and written, the answer head parsed, framing);
- `decoding`: the body's Content-Encoding undone in bounded steps;
- `wire`: the blocking socket transport and its pool of kept-alive connections (`http.client` reads the head);
- `wire_select` and `wire_round`: status polls, many at once on one selector (`Fetches`, below);
- `resolve`: the host's lookup inside the deadline, and the address guard of a result download;
- `trust`: a contract's own CA bundle; `credentials` and `token_source`: the credential this client injects;
- `fake`: `FakeTransport`, the seam for tests (answers from a function, as `httpx.MockTransport` does);
- `notify` and `outbox`: webhook deliveries, durable, over the same wire.
httpx's timeouts are per read, and its per-request cost was four times that of the standard library on the
poll path.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from .. import __version__
from ..core.contract.parse import Contract
from ..core.contract.reader import PLAIN_HTTP_FIX, in_clear
from ..core.observe import Exchange, FailureKind, Response, TransportFailure
from ..core.scrub import Scrubber
from . import wire_round, wire_select
from .credentials import Credential as Credential
from .credentials import CredentialError as CredentialError
from .credentials import resolve_secret as resolve_secret
from .decoding import ACCEPT_ENCODING, body_pieces, decoder_for
from .http11 import check_headers, check_request
from .messages import Answer, Request, Transport, WireError
from .resolve import AddressGuard
from .trust import ca_context
from .wire import SocketTransport

_MESSAGE_CAP = 300


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


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

    def found_in(self, text: str) -> bool:
        """Whether `text` holds the credential this client sends, in any form (`core.scrub`): what a value read
        from outside (a learnt key) is refused for."""
        return self._scrubber.found_in(text)

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
            check_request(method, url, parts, extra_headers or {})
            headers = self._headers(method, url, extra_headers or {}, body, credential)
            check_headers(headers)
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
            check_request("GET", url, parts, headers)
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
        decoder = decoder_for(headers)
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

        for data, raw_size in body_pieces(answer, decoder, deadline, room):
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
        decoder = decoder_for(headers)
        chunks: list[bytes] = []
        size = 0
        truncated = False

        def room() -> int:  # read at each piece: what is kept so far
            return cap + 1 - size

        for data, raw_size in body_pieces(answer, decoder, deadline, room):
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
