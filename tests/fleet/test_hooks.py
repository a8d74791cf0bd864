"""The push receiver's HTTP side (`fleet.hooks`), spoken to over a raw socket: what is not a well-formed
delivery is refused before the body is read or the store is asked, the answers tell nothing about which jobs
exist, and made-up names cannot grow the counters."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from pollwarden.core.contract.parse import parse_contract
from pollwarden.fleet.hooks import HooksServer, Receiver
from pollwarden.home.operating import open_store
from pollwarden.simulator import contract_text
from pollwarden.store.base import Store
from pollwarden.store.owner import process_owner
from tests.conftest import install
from tests.e2e.test_push_cli import PUSH, SECRET, signed


@pytest.fixture
def receiver(home: Path) -> Iterator[tuple[HooksServer, Store]]:
    store = open_store(home, keys="write")
    install(store, parse_contract(contract_text("http://127.0.0.1:9", extra=PUSH)))
    server = HooksServer(Receiver(store, owner=process_owner("hooks"), environ={"EXPORTS_HOOK": SECRET})).start()
    try:
        yield server, store
    finally:
        server.stop()
        store.close()


def _raw(server: HooksServer, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _undated(answer: bytes) -> list[bytes]:
    return [line for line in answer.split(b"\r\n") if not line.startswith(b"Date:")]


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def _post(path: str, headers: dict[str, str], body: bytes, *, length: bool = True) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_a_signed_push_is_accepted_and_bad_requests_are_refused_before_the_store(
    receiver: tuple[HooksServer, Store],
) -> None:
    server, _ = receiver
    headers, body = signed("exp-1", "msg_ok")
    assert _status(_raw(server, _post("/hooks/exports", headers, body))) == 202
    assert _status(_raw(server, _post("/hooks/exports", headers, body, length=False))) == 411
    chunked = _post("/hooks/exports", {**headers, "Transfer-Encoding": "chunked"}, b"0\r\n\r\n", length=False)
    assert _status(_raw(server, chunked)) == 411  # a length is required: no chunked body is read
    assert _status(_raw(server, _post("/hooks/exports", {**headers, "Content-Length": "-5"}, b"", length=False))) == 400
    short = _post("/hooks/exports", {**headers, "Content-Length": "100"}, b"{}", length=False)
    assert _status(_raw(server, short)) == 400  # the body ended early
    assert _status(_raw(server, _post("/hooks/../etc", headers, body))) == 404
    assert _status(_raw(server, _post("/elsewhere", headers, body))) == 404


def test_answers_name_nothing_and_made_up_names_share_one_counter(receiver: tuple[HooksServer, Store]) -> None:
    server, _ = receiver
    known = _raw(server, _post("/hooks/exports", *signed("exp-1", "msg_a")))
    unknown = _raw(server, _post("/hooks/exports", *signed("nobody", "msg_b")))
    assert _undated(known) == _undated(unknown)  # byte for byte, but for the date
    for n in range(20):
        _raw(server, _post(f"/hooks/made-up-{n}", *signed("exp-1", f"msg_{n}")))
    keys = {contract for contract, _ in server.receiver.counts}
    assert keys == {"exports", "-"}
    assert server.receiver.counts[("-", "unknown_contract")] == 20


def test_a_receiver_without_the_secret_answers_503_and_changes_nothing(home: Path) -> None:
    store = open_store(home, keys="write")
    install(store, parse_contract(contract_text("http://127.0.0.1:9", extra=PUSH)))
    server = HooksServer(Receiver(store, owner=process_owner("hooks"), environ={})).start()
    try:
        assert _status(_raw(server, _post("/hooks/exports", *signed("exp-1", "msg_c")))) == 503
    finally:
        server.stop()
        store.close()
    assert server.receiver.counts[("exports", "no_secret")] == 1
