"""https status polls on the selector (`wire_select`), against a real loopback TLS server with certificates made
for the test, beside the blocking path (`wire.SocketTransport.open`) given the same server: the same
verification (a good certificate polls; another host's, an untrusted CA's and an expired one fail alike), the
same keep-alive reuse, and a server that stalls in the handshake ends its own request at its deadline, never
the batch. The hostile answers of tests/transport/test_wire_select_hostile.py run over TLS there too."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from pollwarden.core import FailureKind, Response, TransportFailure
from pollwarden.core.observe import Exchange
from pollwarden.transport import wire, wire_round
from pollwarden.transport.http import StatusClient, fetch_all
from pollwarden.transport.messages import Request
from tests.tls import Certificates, Leaf, TlsServer, trusting
from tests.tls import certificates as certificates  # the fixture: a CA and leaves made once per session
from tests.tls import tls_server as tls_server  # the fixture: TLS servers with a leaf's certificate
from tests.transport.test_http import HANG_GUARD, TIMEOUT, contract_for
from tests.transport.test_http_keepalive import BODY, OK, KeepAliveServer, always, clock
from tests.transport.test_wire_select_hostile import PATHS


@dataclass
class Batch:
    requests: list[Request]
    returned: float


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[Batch]:
    """Every selector round (`wire_round.Round`): the requests it was handed (their deadlines) and when it was
    closed, its requests answered or past their deadlines."""
    seen: list[Batch] = []
    add, close = wire_round.Round.add, wire_round.Round.close
    handed: dict[int, list[Request]] = {}

    def adding(round_: wire_round.Round, transport: wire.SocketTransport, request: Request) -> Any:
        handed.setdefault(id(round_), []).append(request)
        return add(round_, transport, request)

    def closing(round_: wire_round.Round) -> None:
        close(round_)
        if id(round_) in handed:
            seen.append(Batch(handed.pop(id(round_)), time.monotonic()))

    monkeypatch.setattr(wire_round.Round, "add", adding)
    monkeypatch.setattr(wire_round.Round, "close", closing)
    return seen


def polls(url: str, path: str, count: int) -> list[Exchange]:
    with StatusClient(contract_for(url), None, clock=clock, transport=PATHS[path]()) as client:
        return [client.fetch(f"job-{n}") for n in range(count)]


@pytest.mark.parametrize("path", PATHS)
def test_a_good_certificate_polls_and_its_connection_is_kept(
    path: str, certificates: Certificates, tls_server: Callable[[Leaf], TlsServer], batches: list[Batch]
) -> None:
    server = tls_server(certificates.good)
    with trusting(certificates.ca):
        results = polls(server.url, path, 3)
    assert all(isinstance(r, Response) and r.body == BODY for r in results), results
    assert (len(server.requests), server.connections, server.handshakes) == (3, 1, 1)
    assert len(batches) == (3 if path == "selector" else 0)


def test_a_localhost_name_is_verified_against_the_certificate(
    certificates: Certificates, tls_server: Callable[[Leaf], TlsServer]
) -> None:
    """The host name the request names (localhost: no lookup, RFC 6761) is the one checked and sent as SNI."""
    server = tls_server(certificates.good)
    with trusting(certificates.ca):
        (result,) = polls(server.url.replace("127.0.0.1", "localhost"), "selector", 1)
    assert isinstance(result, Response) and result.body == BODY


REFUSED = {
    "wrong-host": ("wrong_host", "mismatch"),
    "untrusted-ca": ("untrusted", "unable to get local issuer certificate"),
    "expired": ("expired", "certificate has expired"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_certificate_the_blocking_path_refuses_is_refused_alike_on_the_selector(
    case: str, certificates: Certificates, tls_server: Callable[[Leaf], TlsServer]
) -> None:
    leaf, words = REFUSED[case]
    server = tls_server(getattr(certificates, leaf))
    failures: dict[str, TransportFailure] = {}
    with trusting(certificates.ca):
        for path in PATHS:
            (result,) = polls(server.url, path, 1)
            assert isinstance(result, TransportFailure), result
            failures[path] = result
    selector, blocking = failures["selector"], failures["blocking"]
    assert selector.kind is blocking.kind is FailureKind.CONNECT and not selector.delivery_unknown
    assert selector.message == blocking.message
    assert "certificate verify failed" in selector.message and words in selector.message, selector.message
    assert server.requests == []


@pytest.mark.parametrize("path", PATHS)
def test_a_server_that_stalls_in_the_handshake_ends_its_request_at_its_deadline(
    path: str, certificates: Certificates, tls_server: Callable[[Leaf], TlsServer], batches: list[Batch]
) -> None:
    good = tls_server(certificates.good)
    # A plain server waits for a request head that a ClientHello never completes: it reads and never answers.
    stalling = KeepAliveServer(always(OK))
    url = stalling.url.replace("http://", "https://")
    try:
        with (
            trusting(certificates.ca),
            StatusClient(contract_for(url, timeout=TIMEOUT), None, clock=clock, transport=PATHS[path]()) as stalled,
            StatusClient(contract_for(good.url), None, clock=clock, transport=PATHS[path]()) as client,
        ):
            # The blocking path sends a batch's polls in turn (a worker puts them on threads): one at a time there.
            together = path == "selector"
            results = fetch_all([(stalled, "a", None, None)] + [(client, "b", None, None)] * together)
    finally:
        stalling.close()
    hung, *answered = results
    assert all(isinstance(one, Response) and one.body == BODY for one in answered), answered
    assert isinstance(hung, TransportFailure) and hung.kind is FailureKind.CONNECT, hung
    assert hung.message == wire.TLS_TIMEOUT
    if path == "selector":
        (batch,) = batches
        deadline = batch.requests[0].deadline
        assert deadline <= batch.returned < deadline + HANG_GUARD  # waited out its own deadline, then ended
