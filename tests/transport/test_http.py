"""The real StatusClient against real loopback servers: a raw-socket server scripted byte by byte for the nasty
cases (drips, lies, bombs, cut streams), so every answer is what a hostile provider could really send."""

from __future__ import annotations

import base64
import gzip
import io
import json
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from pollwarden.core import FailureKind, Response, TransportFailure, observe, parse_contract
from pollwarden.core.contract.parse import Contract
from pollwarden.core.observe import Exchange, Kind
from pollwarden.simulator import contract_text
from pollwarden.transport import wire_round, wire_select
from pollwarden.transport.decoding import ACCEPT_ENCODING
from pollwarden.transport.fake import FakeTransport, Reply
from pollwarden.transport.http import CredentialError, StatusClient, resolve_secret
from pollwarden.transport.messages import Answer, Request, WireError
from pollwarden.transport.wire import SocketTransport

SECRET = "sk-live-hostile-7Q9w-ECHO"
TIMEOUT = 1.0
HANG_GUARD = 30.0
"""Seconds within which every exchange here must end: a guard against a hang, never the timing under test. The
slow answers below take 60 s or more, so a client that waited for one (a per-read timeout, no deadline) would
outlast it; that the client gives up at its own deadline, `TIMEOUT` after the request, is asserted exactly
(`test_the_transport_is_handed_one_deadline_the_contract_timeout_after_the_request`)."""

ANSWERED = 60.0
"""The contract timeout of an exchange the test expects answered (or ended by the answer itself): a request not yet
sent when its deadline passes is never sent (`wire_round`), so at 1 s a loaded machine that left the batch's thread
unscheduled for a second expired a loopback connect ("connect timed out", seen once beside two CPU burners)."""

Script = Callable[[socket.socket, bytes], None]


def clock() -> datetime:
    return datetime.now(UTC)


class RawServer:
    """Accepts connections, reads one request head (and body), then hands the socket to the script."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[bytes] = []
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                raw = b""
                while b"\r\n\r\n" not in raw:
                    data = conn.recv(65536)
                    if not data:
                        return
                    raw += data
                head, _, rest = raw.partition(b"\r\n\r\n")
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                        while len(rest) < length:
                            rest += conn.recv(65536)
                self.requests.append(raw)
                self.script(conn, raw)
            except OSError:
                pass  # the client gave up: that is what most of these tests want

    def close(self) -> None:
        self._stop.set()
        self._listener.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Script], RawServer]]:
    servers: list[RawServer] = []

    def start(script: Script) -> RawServer:
        server = RawServer(script)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def contract_for(url: str, *, timeout: float = ANSWERED, **options: object) -> Contract:
    """`timeout`: `TIMEOUT` where the test is of the client giving up at its deadline."""
    text = contract_text(url, timeout=f"{int(timeout * 1000)}ms", secret_env="PW_TOKEN", **options)  # type: ignore[arg-type]
    return parse_contract(text)


def poll(server: RawServer, secret: str | None = SECRET, timeout: float = ANSWERED) -> tuple[Exchange, float]:
    contract = contract_for(server.url, timeout=timeout)
    started = time.monotonic()
    with StatusClient(contract, secret, clock=clock) as client:
        exchange = client.fetch("job-1", {"X-Pollwarden-Lease": "7"})
    return exchange, time.monotonic() - started


def answer(status: str = "200 OK", headers: tuple[str, ...] = (), body: bytes = b"") -> bytes:
    lines = [f"HTTP/1.1 {status}", *headers]
    if not any(h.lower().startswith(("content-length", "transfer-encoding")) for h in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def send(data: bytes) -> Script:
    def script(conn: socket.socket, _: bytes) -> None:
        conn.sendall(data)

    return script


def drip(data: bytes, every: float) -> Script:
    def script(conn: socket.socket, _: bytes) -> None:
        for index in range(len(data)):
            conn.sendall(data[index : index + 1])
            time.sleep(every)

    return script


def json_body(state: str = "running", **extra: object) -> bytes:
    return json.dumps({"state": state, **extra}).encode()


def failure_of(exchange: Exchange) -> TransportFailure:
    assert isinstance(exchange, TransportFailure), exchange
    return exchange


def response_of(exchange: Exchange) -> Response:
    assert isinstance(exchange, Response), exchange
    return exchange


# --- the request as sent --------------------------------------------------------------------------------------------


def test_a_plain_answer_and_the_request_that_asked_for_it(serve: Callable[[Script], RawServer]) -> None:
    server = serve(send(answer(headers=("Content-Type: application/json", "X-Request-Id: r-1"), body=json_body())))
    exchange, _ = poll(server)
    response = response_of(exchange)
    assert (response.status, response.body, response.truncated) == (200, json_body(), False)
    assert response.headers["x-request-id"] == "r-1"
    assert observe(contract_for(server.url), response).state == "running"
    head = server.requests[0].decode("latin-1").lower()
    assert head.startswith("get /jobs/job-1 http/1.1\r\n")
    assert f"authorization: bearer {SECRET.lower()}\r\n" in head
    assert f"accept-encoding: {ACCEPT_ENCODING}\r\n" in head
    # A status poll may keep its connection (tests/transport/test_http_keepalive.py); other requests ask for a close.
    assert "connection: close\r\n" not in head and "x-pollwarden-lease: 7\r\n" in head


def test_a_redirect_is_reported_not_followed(serve: Callable[[Script], RawServer]) -> None:
    server = serve(send(answer("302 Found", headers=("Location: http://elsewhere.example/x",))))
    response = response_of(poll(server)[0])
    assert response.status == 302 and server.connections == 1
    assert observe(contract_for(server.url), response).kind is Kind.REDIRECT


# --- item 10: the whole request is bounded by the contract's timeout ------------------------------------------------


def test_a_head_dripped_a_byte_at_a_time_is_cut_at_the_timeout(serve: Callable[[Script], RawServer]) -> None:
    head = answer(headers=tuple(f"X-Pad-{i}: {'y' * 20}" for i in range(20)), body=json_body())
    server = serve(drip(head, 0.1))  # ~60 s in all, each byte well inside a per-read timeout
    exchange, elapsed = poll(server, timeout=TIMEOUT)
    assert failure_of(exchange).kind is FailureKind.TIMEOUT
    assert elapsed < HANG_GUARD


def test_a_body_dripped_a_byte_at_a_time_is_cut_at_the_timeout(serve: Callable[[Script], RawServer]) -> None:
    body = json_body(pad="z" * 600)

    def script(conn: socket.socket, raw: bytes) -> None:
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        drip(body, 0.1)(conn, raw)  # ~60 s in all

    exchange, elapsed = poll(serve(script), timeout=TIMEOUT)
    assert failure_of(exchange).kind is FailureKind.TIMEOUT
    assert elapsed < HANG_GUARD


def test_a_silent_server_times_out(serve: Callable[[Script], RawServer]) -> None:
    stop = threading.Event()

    def script(conn: socket.socket, raw: bytes) -> None:
        stop.wait(2 * HANG_GUARD)

    server = serve(script)
    exchange, elapsed = poll(server, timeout=TIMEOUT)
    stop.set()
    assert failure_of(exchange).kind is FailureKind.TIMEOUT
    assert failure_of(exchange).delivery_unknown
    assert elapsed < HANG_GUARD


def test_the_transport_is_handed_one_deadline_the_contract_timeout_after_the_request(
    serve: Callable[[Script], RawServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound of the tests above, exactly and whatever the load: the deadline every read is held to (wire.py,
    wire_select.py) is the contract timeout after the request began; a slow machine only moves `after` later."""
    handed: list[float] = []

    class Recording(SocketTransport):
        def open(self, request: Request) -> Answer:  # the blocking path (https, non-poll requests)
            handed.append(request.deadline)
            return super().open(request)

    add = wire_round.Round.add

    def recording(round_: wire_round.Round, transport: SocketTransport, request: Request) -> wire_select.Exchanging:
        handed.append(request.deadline)  # the selector path (status polls)
        return add(round_, transport, request)

    monkeypatch.setattr(wire_round.Round, "add", recording)

    server = serve(send(answer(body=json_body())))
    contract = contract_for(server.url, timeout=TIMEOUT)
    with StatusClient(contract, SECRET, clock=clock, transport=Recording()) as client:
        before = time.monotonic()
        response_of(client.fetch("job-1"))
        after = time.monotonic()
    (deadline,) = handed
    assert before + TIMEOUT <= deadline <= after + TIMEOUT


# --- broken streams and lies: counted transport failures, never exceptions ------------------------------------------


@pytest.mark.parametrize(
    ("data", "kind", "needle"),
    [
        (b"", FailureKind.RESET, "without answering"),
        (b"HTTP/1.1 200 OK\r\nContent-Type: appl", FailureKind.RESET, "middle of the answer head"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n" + b'{"state":', FailureKind.RESET, "short"),
        (b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n{"state"', FailureKind.RESET, "chunked"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", FailureKind.RESET, "chunked"),
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", FailureKind.PROTOCOL, "status line"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * 70_000 + b"\r\n\r\n", FailureKind.PROTOCOL, "64 KiB"),
        (answer(headers=tuple(f"X-H{i}: v" for i in range(2000))), FailureKind.PROTOCOL, "headers"),
        (answer(headers=tuple(f"X-H{i}: {'v' * 1000}" for i in range(90))), FailureKind.PROTOCOL, "exceed 65536"),
        (answer(headers=("Content-Encoding: gzip",), body=b"not gzip at all"), FailureKind.PROTOCOL, "corrupt"),
        (
            answer(headers=("Content-Encoding: gzip",), body=gzip.compress(json_body())[:-12]),
            FailureKind.PROTOCOL,
            "ended",
        ),
    ],
    ids=[
        "closed-at-once",
        "closed-mid-headers",
        "content-length-longer-than-sent",
        "chunked-cut-short",
        "chunked-garbage",
        "not-http",
        "one-huge-header",
        "2000-headers",
        "90KB-of-headers",
        "corrupt-gzip",
        "gzip-cut-short",
    ],
)
def test_broken_answers_are_transport_failures(
    serve: Callable[[Script], RawServer], data: bytes, kind: FailureKind, needle: str
) -> None:
    exchange, elapsed = poll(serve(send(data)))
    failure = failure_of(exchange)
    assert failure.kind is kind, failure
    assert needle in failure.message
    assert elapsed < HANG_GUARD  # and not a TIMEOUT (the kind above): the broken answer ended it, not the clock
    assert observe(contract_for("http://127.0.0.1:1"), failure).kind is Kind.TRANSPORT


def test_a_content_length_shorter_than_the_body_reads_only_what_it_declares(
    serve: Callable[[Script], RawServer],
) -> None:
    body = json_body("succeeded", result_url="/x")
    server = serve(send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n" + body))
    response = response_of(poll(server)[0])
    assert response.body == body[:10]
    assert observe(contract_for(server.url), response).kind is Kind.INVALID_RESPONSE


def test_a_refused_connection_is_a_connect_failure() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    with StatusClient(contract_for(f"http://127.0.0.1:{port}"), SECRET, clock=clock) as client:
        failure = failure_of(client.fetch("job-1"))
    assert failure.kind is FailureKind.CONNECT and not failure.delivery_unknown


def test_https_to_a_plain_http_server_fails_at_connect(serve: Callable[[Script], RawServer]) -> None:
    server = serve(send(answer(body=json_body())))
    contract = contract_for(server.url.replace("http://", "https://"), timeout=TIMEOUT)
    with StatusClient(contract, SECRET, clock=clock) as client:
        failure = failure_of(client.fetch("job-1"))
    assert failure.kind is FailureKind.CONNECT and "TLS" in failure.message


# --- item 9: content codings ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw deflate, as some servers send it
        ("GZip", gzip.compress),
    ],
    ids=["gzip", "x-gzip", "deflate-zlib", "deflate-raw", "case"],
)
def test_compressed_bodies_are_decoded(
    serve: Callable[[Script], RawServer], coding: str, encode: Callable[[bytes], bytes]
) -> None:
    body = json_body("succeeded", result_url="/results/1")
    server = serve(send(answer(headers=(f"Content-Encoding: {coding}",), body=encode(body))))
    response = response_of(poll(server)[0])
    assert response.body == body and not response.truncated
    assert "content-encoding" not in response.headers and "content-length" not in response.headers
    assert observe(contract_for(server.url), response).category is not None


def test_a_chunked_gzip_body_is_decoded(serve: Callable[[Script], RawServer]) -> None:
    packed = gzip.compress(json_body())
    chunks = b"".join(f"{len(part):x}\r\n".encode() + part + b"\r\n" for part in (packed[:7], packed[7:]))
    data = answer(headers=("Transfer-Encoding: chunked", "Content-Encoding: gzip")) + chunks + b"0\r\n\r\n"
    assert response_of(poll(serve(send(data)))[0]).body == json_body()


def test_a_gzip_bomb_is_cut_at_the_decoded_cap(serve: Callable[[Script], RawServer]) -> None:
    bomb = gzip.compress(b"{" + b" " * (200 * 1024 * 1024), compresslevel=9)  # 200 MiB from ~200 KiB
    server = serve(send(answer(headers=("Content-Encoding: gzip",), body=bomb)))
    contract = contract_for(server.url)
    response = response_of(poll(server)[0])
    assert response.truncated and len(response.body) == contract.max_body_bytes
    obs = observe(contract, response)
    assert obs.kind is Kind.INVALID_RESPONSE and "cap" in obs.detail


def test_a_plain_body_over_the_cap_is_truncated(serve: Callable[[Script], RawServer]) -> None:
    server = serve(send(answer(body=b" " * (2 * 1024 * 1024))))
    response = response_of(poll(server)[0])
    assert response.truncated and len(response.body) == contract_for(server.url).max_body_bytes


def test_an_unknown_coding_arrives_encoded_and_is_invalid(serve: Callable[[Script], RawServer]) -> None:
    server = serve(send(answer(headers=("Content-Encoding: br",), body=b"\x8b\x02\x80")))
    response = response_of(poll(server)[0])
    assert response.headers["content-encoding"] == "br"
    obs = observe(contract_for(server.url), response)
    assert obs.kind is Kind.INVALID_RESPONSE and "Content-Encoding 'br'" in obs.detail


# --- item 17: refused here, before a byte was written ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "location"),
    [
        ({"X-Note": "caf\u0113"}, None),  # outside latin-1
        ({"X-Note": "a\r\nInjected: 1"}, None),
        ({"X Bad": "v"}, None),
        ({}, "/jobs/a b"),
        ({}, "/jobs/\x00"),
        ({}, "/jobs/\u00e9"),
    ],
    ids=["non-latin1-value", "crlf-value", "bad-name", "space-in-url", "nul-in-url", "non-ascii-url"],
)
def test_a_request_that_cannot_be_sent_is_a_local_failure_and_nothing_leaves(
    serve: Callable[[Script], RawServer], extra: dict[str, str], location: str | None
) -> None:
    server = serve(send(answer(body=json_body())))
    with StatusClient(contract_for(server.url), SECRET, clock=clock) as client:
        where = None if location is None else server.url + location
        failure = failure_of(client.fetch("job-1", extra, location=where))
    assert failure.kind is FailureKind.LOCAL and not failure.delivery_unknown
    assert server.connections == 0
    obs = observe(contract_for(server.url), failure)
    assert obs.kind is Kind.LOCAL_ERROR


def test_the_credential_goes_only_to_the_contracts_origin(serve: Callable[[Script], RawServer]) -> None:
    server = serve(send(answer(body=json_body())))
    with StatusClient(contract_for(server.url), SECRET, clock=clock) as client, pytest.raises(CredentialError):
        client.fetch("job-1", location="http://127.0.0.2:9/jobs/x")
    assert server.connections == 0


# --- items 12 and 13: the credential never comes back out -------------------------------------------------------------


def every_form(secret: str) -> list[bytes]:
    raw = secret.encode()
    return [raw, base64.b64encode(raw).rstrip(b"="), secret.replace("-", "%2D").encode()]


def exchange_bytes(exchange: Exchange) -> bytes:
    if isinstance(exchange, TransportFailure):
        return exchange.message.encode()
    headers = "".join(f"{k}:{v}\n" for k, v in exchange.headers.items())
    return headers.encode("utf-8", "surrogatepass") + exchange.body


def test_an_echoed_credential_is_scrubbed_from_every_part_of_the_answer(serve: Callable[[Script], RawServer]) -> None:
    echo = f"Bearer {SECRET}"
    b64 = base64.b64encode(SECRET.encode()).decode()
    body = json.dumps({"state": SECRET, "error": {"message": f"bad token {echo}", "b64": b64, "q": "sk%2Dlive"}})

    def script(conn: socket.socket, raw: bytes) -> None:
        headers = (f"X-Request-Id: {SECRET}", f"Retry-After: {SECRET}", f"X-{SECRET}: {b64}", "X-Auth: " + echo)
        conn.sendall(answer("503 Service Unavailable", headers, body.encode()))

    server = serve(script)
    exchange, _ = poll(server)
    response = response_of(exchange)
    seen = exchange_bytes(response)
    for form in every_form(SECRET):
        assert form not in seen
    assert json.loads(response.body)["state"] == "[secret]"
    assert response.headers["x-request-id"] == "[secret]"
    obs = observe(contract_for(server.url), response)
    assert SECRET not in json.dumps(obs.to_json())


def test_an_echo_hex_base64_entity_or_zero_width_spelled_is_scrubbed_from_headers_and_body(
    serve: Callable[[Script], RawServer],
) -> None:
    """Issue 23: the encodings the scrubber missed, each in a header and in the body of one answer."""
    hexed = SECRET.encode().hex()
    logged = base64.b64encode(f"x-auth: Bearer {SECRET}\r\n".encode()).decode()  # `Bearer` at offset 8: alignment 2
    entities = "".join(f"&#{ord(c)};" if i % 2 else f"&#x{ord(c):X}" for i, c in enumerate(SECRET))
    split = "\u200b".join(SECRET)
    body = json.dumps({"state": "running", "h": hexed.upper(), "b": logged, "e": entities, "z": split}).encode()

    def script(conn: socket.socket, raw: bytes) -> None:
        headers = (f"X-Hex: {hexed}", f"X-Log: {logged}", f"X-Html: {entities}")
        conn.sendall(answer("200 OK", headers, body).replace(b"X-Html", b"X-Zw: " + split.encode() + b"\r\nX-Html"))

    response = response_of(poll(serve(script))[0])
    assert response.headers["x-hex"] == "[secret]" and response.headers["x-html"] == "[secret]"
    assert response.headers["x-zw"] == "[secret]" and "[secret]" in response.headers["x-log"]
    fields = json.loads(response.body)
    assert fields["h"] == fields["e"] == fields["z"] == "[secret]" and "[secret]" in fields["b"]
    seen = exchange_bytes(response).decode("utf-8", "replace")
    assert hexed not in seen.lower() and SECRET not in base64.b64decode(
        response.headers["x-log"].split("[secret]")[0] + "=="
    ).decode("latin-1")


def test_an_echo_inside_a_gzip_body_is_scrubbed_after_decoding(serve: Callable[[Script], RawServer]) -> None:
    server = serve(send(answer(headers=("Content-Encoding: gzip",), body=gzip.compress(json_body(SECRET)))))
    response = response_of(poll(server)[0])
    assert SECRET.encode() not in response.body and b"[secret]" in response.body


def test_failure_messages_are_scrubbed() -> None:
    def handler(request: Request) -> Reply:
        raise WireError(FailureKind.RESET, f"peer said: {dict(request.headers)['Authorization']}")

    contract = contract_for("http://127.0.0.1:1")
    with StatusClient(contract, SECRET, clock=clock, transport=FakeTransport(handler)) as client:
        failure = failure_of(client.fetch("job-1"))
    assert SECRET not in failure.message and "[secret]" in failure.message


def test_the_fake_transport_answers_from_a_function() -> None:
    fake = FakeTransport(lambda request: Reply(200, {"Content-Encoding": "gzip"}, gzip.compress(json_body())))
    with StatusClient(contract_for("http://127.0.0.1:1"), None, clock=clock, transport=fake) as client:
        response = response_of(client.fetch("job-1"))
    assert response.body == json_body()
    assert fake.requests[0].url == "http://127.0.0.1:1/jobs/job-1"


@pytest.mark.parametrize(
    ("raw", "sent"),
    [(f"{SECRET}\n", SECRET), (f"{SECRET}\r\n", SECRET), (SECRET, SECRET), ("a b", "a b")],
)
def test_one_trailing_newline_is_stripped_from_the_credential(raw: str, sent: str) -> None:
    contract = contract_for("http://127.0.0.1:1")
    credential = resolve_secret(contract, {"PW_TOKEN": raw})
    assert credential is not None and contract.auth is not None
    headers: dict[str, str] = {}
    credential.apply("GET", "http://127.0.0.1:1/jobs/x", headers, None, clock())
    assert headers[contract.auth.header] == (f"{contract.auth.scheme} {sent}" if contract.auth.scheme else sent)


@pytest.mark.parametrize(
    "raw",
    [f"{SECRET}\n\n", f"{SECRET}\r", f"sk\x00{SECRET}", f"{SECRET}\t", f"sk\u00e9{SECRET}", f" {SECRET}", "\x1b[2J"],
    ids=["two-newlines", "bare-cr", "nul", "tab", "non-ascii", "leading-space", "ansi"],
)
def test_a_credential_that_cannot_be_sent_unchanged_is_refused_without_showing_it(raw: str) -> None:
    with pytest.raises(CredentialError) as caught:
        resolve_secret(contract_for("http://127.0.0.1:1"), {"PW_TOKEN": raw})
    message = str(caught.value)
    assert "PW_TOKEN" in message and "printable ASCII" in message
    assert SECRET not in message and raw not in message


def test_a_missing_or_empty_credential_is_refused() -> None:
    for env in ({}, {"PW_TOKEN": ""}, {"PW_TOKEN": "\n"}):
        with pytest.raises(CredentialError, match="PW_TOKEN, which is not set"):
            resolve_secret(contract_for("http://127.0.0.1:1"), env)


def test_an_unencodable_host_from_the_provider_is_a_local_failure() -> None:
    # A result URL is the provider's text and is fetched without the credential: its host may be anything.
    with StatusClient(contract_for("http://127.0.0.1:1"), SECRET, clock=clock) as client:
        failure = failure_of(client.send("GET", "http://a..b/x", credential=False))
    assert failure.kind is FailureKind.LOCAL and "host name" in failure.message


@pytest.mark.parametrize(
    ("head", "words"),
    [
        (b"Content-Length: 10\r\nContent-Length: 44", "two different Content-Length"),
        (b"Transfer-Encoding: chunked\r\nContent-Length: 44", "both Transfer-Encoding and Content-Length"),
        (b"Transfer-Encoding: gzip", "unsupported Transfer-Encoding"),
    ],
)
def test_an_answer_whose_length_is_ambiguous_is_not_read(
    serve: Callable[[Script], RawServer], head: bytes, words: str
) -> None:
    """RFC 9112 6.3: a reader that picks one length reads another's answer as its own (found by review)."""
    body = json_body("succeeded", result_url="/x")
    server = serve(send(b"HTTP/1.1 200 OK\r\n" + head + b"\r\n\r\n" + body))
    failure = failure_of(poll(server)[0])
    assert failure.kind is FailureKind.PROTOCOL and words in failure.message


def test_static_headers_go_to_the_contracts_origin_only() -> None:
    from pollwarden.core.contract.parse import parse_contract
    from pollwarden.transport.fake import FakeTransport, Reply
    from pollwarden.transport.http import StatusClient

    contract = parse_contract(
        'name = "h"\nstatus_url = "https://api.example/jobs/{job_id}"\n[headers]\nanthropic-version = "2023-06-01"\n'
        '[states]\npending = ["r"]\nsuccess = ["s"]\nfailure = ["f"]\n[fields]\nstate = "state"\n'
    )
    transport = FakeTransport(lambda request: Reply(200, {}, b'{"state": "s"}'))
    with StatusClient(contract, None, clock=lambda: datetime.now(UTC), transport=transport) as client:
        client.fetch("1")
        client.send("POST", "https://api.example/jobs/1/cancel")
        client.send("GET", "https://files.example/out", credential=False)
    sent = [dict(request.headers).get("anthropic-version") for request in transport.requests]
    assert sent == ["2023-06-01", "2023-06-01", None]
    assert [request.method for request in transport.requests] == ["GET", "POST", "GET"]


# --- issue 23: the client's last line of defence against a credential in clear text -------------------------------


def test_the_credential_never_goes_over_plain_http_off_the_loopback_whatever_the_request() -> None:
    """A contract that got past its load some other way (built in code, stored by an older version): the status
    poll, a cancel or submit (`send`) and a result download each end as a local failure, nothing sent."""
    plain = replace(contract_for("https://provider.example"), status_url="http://provider.example/jobs/{job_id}")
    fake = FakeTransport(lambda request: Reply(200, {}, json_body()))
    with StatusClient(plain, SECRET, clock=clock, transport=fake) as client:
        failures = [
            client.fetch("job-1"),
            client.send("POST", "http://provider.example/jobs/job-1/cancel"),
            client.download("http://provider.example/out", io.BytesIO(), cap=1024, credential=True),
        ]
        assert fake.requests == []
        # Without the credential the same origin is asked as before; with the contract's permission, with it.
        assert not isinstance(client.send("GET", "http://provider.example/x", credential=False), TransportFailure)
    for failure in failures:
        assert isinstance(failure, TransportFailure) and failure.kind is FailureKind.LOCAL
        assert "plain http" in failure.message and "allow_plain_http = true" in failure.message
    with StatusClient(replace(plain, allow_plain_http=True), SECRET, clock=clock, transport=fake) as client:
        response_of(client.fetch("job-1"))
    assert dict(fake.requests[-1].headers)["Authorization"] == f"Bearer {SECRET}"
