"""The host's lookup inside the request's deadline (`pollwarden.transport.resolve`), on both paths, with a resolver
handed
to the transport (`SocketTransport(resolver=...)`, the seam) against a real loopback server: a lookup that never
answers ends its request as a connect failure at its deadline, and on the selector it delays no other poll of
the batch; lookups of one name are shared and their answers kept briefly, failures not; IP literals and
localhost are never looked up."""

from __future__ import annotations

import os
import selectors
import socket
import threading
import time
from collections.abc import Iterator, Sequence

import pytest

from pollwarden.core import FailureKind, Response, TransportFailure
from pollwarden.core.contract.parse import Contract, parse_contract
from pollwarden.simulator import contract_text
from pollwarden.transport import resolve, wire
from pollwarden.transport.http import StatusClient, fetch_all
from pollwarden.transport.messages import Answer, Request
from pollwarden.transport.resolve import AddrInfo
from pollwarden.transport.wire import SocketTransport
from tests.transport.test_http import HANG_GUARD, TIMEOUT
from tests.transport.test_http_keepalive import BODY, OK, KeepAliveServer, always, clock
from tests.transport.test_wire_select_tls import Batch
from tests.transport.test_wire_select_tls import batches as batches  # the fixture: what each selector batch was handed


def contract_for(url: str) -> Contract:
    """`test_http.contract_for` for the made-up names these tests resolve to the loopback (`hung.test`): plain
    http to a name that is not the loopback carries the credential only with `allow_plain_http = true`."""
    text = contract_text(url, timeout=f"{int(TIMEOUT * 1000)}ms", secret_env="PW_TOKEN")
    return parse_contract(text.replace("safe_status = true\n", "safe_status = true\nallow_plain_http = true\n", 1))


class Names:
    """A resolver: "hung.test" never answers (until the test ends), "gone.test" does not exist, any other name
    is 127.0.0.1. Counts its calls per name."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.release = threading.Event()

    def __call__(self, host: str, port: int) -> Sequence[AddrInfo]:
        self.calls.append(host)
        if host == "hung.test":
            self.release.wait(HANG_GUARD)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        if host == "gone.test":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", port))]


@pytest.fixture
def names() -> Iterator[Names]:
    resolver = Names()
    yield resolver
    resolver.release.set()


@pytest.fixture
def server() -> Iterator[KeepAliveServer]:
    one = KeepAliveServer(always(OK))
    yield one
    one.close()


class Blocking:
    """The blocking path with the test's resolver; records the requests it was handed (their deadlines)."""

    def __init__(self, names: Names) -> None:
        self._sockets = SocketTransport(resolver=names)
        self.requests: list[Request] = []

    def open(self, request: Request) -> Answer:
        self.requests.append(request)
        return self._sockets.open(request)

    def close(self) -> None:
        self._sockets.close()


def at(server: KeepAliveServer, host: str) -> str:
    return server.url.replace("127.0.0.1", host)


def test_a_hung_lookup_ends_its_own_poll_at_its_deadline_and_delays_no_other(
    names: Names, server: KeepAliveServer, batches: list[Batch]
) -> None:
    transport = SocketTransport(resolver=names)
    with (
        StatusClient(contract_for(at(server, "hung.test")), None, clock=clock, transport=transport) as hung,
        StatusClient(contract_for(at(server, "api.test")), None, clock=clock, transport=transport) as named,
        StatusClient(contract_for(server.url), None, clock=clock, transport=transport) as literal,
    ):
        assert hung.selects
        results = fetch_all([(hung, "a", None, None), (named, "b", None, None), (literal, "c", None, None)])
    failure, *answered = results
    assert all(isinstance(one, Response) and one.body == BODY for one in answered), answered
    assert isinstance(failure, TransportFailure) and failure.kind is FailureKind.CONNECT, failure
    assert failure.message == wire.DNS_TIMEOUT and not failure.delivery_unknown
    (batch,) = batches
    deadline = batch.requests[0].deadline
    assert deadline <= batch.returned < deadline + HANG_GUARD  # waited out its own deadline, then ended
    assert len(server.requests) == 2


def test_a_hung_lookup_ends_a_blocking_request_at_its_deadline(names: Names, server: KeepAliveServer) -> None:
    transport = Blocking(names)
    with StatusClient(contract_for(at(server, "hung.test")), None, clock=clock, transport=transport) as client:
        failure = client.fetch("a")
        returned = time.monotonic()
    assert isinstance(failure, TransportFailure) and failure.kind is FailureKind.CONNECT, failure
    assert failure.message == wire.DNS_TIMEOUT
    deadline = transport.requests[0].deadline
    assert deadline <= returned < deadline + HANG_GUARD
    assert server.requests == []


@pytest.mark.parametrize("path", ["selector", "blocking"])
def test_lookups_of_one_name_are_shared_and_kept_and_failures_are_not(
    path: str, names: Names, server: KeepAliveServer
) -> None:
    transport = SocketTransport(resolver=names) if path == "selector" else Blocking(names)
    with (
        StatusClient(contract_for(at(server, "api.test")), None, clock=clock, transport=transport) as named,
        StatusClient(contract_for(at(server, "gone.test")), None, clock=clock, transport=transport) as gone,
    ):
        first = fetch_all([(named, "a", None, None), (named, "b", None, None), (gone, "c", None, None)])
        transport.close()  # no pooled connection left: the next polls connect again, with the answer kept
        second = fetch_all([(named, "d", None, None), (gone, "e", None, None)])
    for answered in (first[:2], second[:1]):
        assert all(isinstance(one, Response) for one in answered), answered
    for failed in (first[2], second[1]):
        assert isinstance(failed, TransportFailure) and failed.kind is FailureKind.CONNECT, failed
        assert "gaierror" in failed.message and "not known" in failed.message
    assert sorted(names.calls) == ["api.test", "gone.test", "gone.test"]


@pytest.mark.parametrize("path", ["selector", "blocking"])
def test_ip_literals_and_localhost_are_never_looked_up(path: str, names: Names, server: KeepAliveServer) -> None:
    transport = SocketTransport(resolver=names) if path == "selector" else Blocking(names)
    with (
        StatusClient(contract_for(server.url), None, clock=clock, transport=transport) as literal,
        StatusClient(contract_for(at(server, "localhost")), None, clock=clock, transport=transport) as local,
    ):
        results = fetch_all([(literal, "a", None, None), (local, "b", None, None)])
    assert all(isinstance(one, Response) for one in results), results
    assert names.calls == []


def pipes() -> int:
    """This process's open pipe descriptors (the selector's wakeup pipe is one pair)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
        except FileNotFoundError:  # the listing's own descriptor
            continue
    return count


def test_a_lookup_that_answers_while_the_selector_waits_wakes_it(
    server: KeepAliveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name answers only once the batch waits in poll(2) with nothing else to watch: the selector must be woken
    to connect (else it would sleep to the deadline), and its wakeup pipe is closed with the batch."""
    waiting = threading.Event()

    class Watched(selectors.PollSelector):
        def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
            waiting.set()
            return super().select(timeout)

    def late(host: str, port: int) -> Sequence[AddrInfo]:
        waiting.wait(HANG_GUARD)
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", port))]

    monkeypatch.setattr(selectors, "PollSelector", Watched)  # the one wire_select makes per batch
    before = pipes()
    transport = SocketTransport(resolver=late)
    with StatusClient(contract_for(at(server, "late.test")), None, clock=clock, transport=transport) as client:
        result = client.fetch("a")
    assert isinstance(result, Response) and result.body == BODY, result
    assert pipes() == before


def test_a_forked_child_looks_up_again_rather_than_wait_on_its_parents_lookup(names: Names) -> None:
    """The parent's lookup thread does not exist in a child: sharing its future there would hang every poll of
    that name until the deadline, for ever."""
    parent = os.getpid()

    def resolver(host: str, port: int) -> Sequence[AddrInfo]:
        if os.getpid() == parent:
            return names(host, port)  # hung.test: never answers in the parent
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", port))]

    in_flight = resolve.lookup(resolver, "hung.test", 443)
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's own exit status is the assertion
        try:
            found = resolve.lookup(resolver, "hung.test", 443).result(timeout=HANG_GUARD)
            os._exit(0 if found[0][4] == ("127.0.0.1", 443) else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not in_flight.done()
