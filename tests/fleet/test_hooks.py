"""The push receiver's HTTP side (`fleet.hooks`), spoken to over a raw socket: what is not a well-formed
delivery is refused before the body is read or the store is asked, the answers tell nothing about which jobs
exist, and made-up names cannot grow the counters."""

from __future__ import annotations

import socket
import threading
import time
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


def test_pushes_during_a_check_in_flight_share_one_retry_that_wakes_once_the_check_is_recorded(
    receiver: tuple[HooksServer, Store],
) -> None:
    """A storm landing while a check holds the lease: each push is busy, but one retry per operation waits for
    that check's answer (not a thread per push), then wakes the operation."""
    from datetime import timedelta

    from pollwarden.core.admission import WatchRequest
    from pollwarden.core.reasons import DelaySource
    from pollwarden.engine import Engine
    from pollwarden.events import Paced

    server, store = receiver
    contract = parse_contract(contract_text("http://127.0.0.1:9", base_delay="10m", max_delay="10m", extra=PUSH))
    install(store, contract)
    operation_id = Engine(store, owner="watch-1").admit(WatchRequest(contract, "exp-9", by="test")).record.operation_id
    claimed = store.claim(operation_id, "watch-1", store.db_now(), timedelta(seconds=30))  # its first check
    assert claimed is not None
    lease, record = claimed
    for n in range(30):
        assert _status(_raw(server, _post("/hooks/exports", *signed("exp-9", f"msg_busy_{n}")))) == 202
    retries = [t for t in threading.enumerate() if t.name == "pollwarden-push-retry"]
    assert len(retries) == 1, len(retries)
    now = store.db_now()
    answered = record.observed(at=now, http_status=200, request_id=None, state="running", rate_limited=False)
    later = answered.waiting(now + timedelta(minutes=10), DelaySource.LOCAL_BACKOFF)
    assert store.write(lease, later, [Paced(provider="test", until=None)], now, release=True)
    deadline = time.monotonic() + 60
    while "woken_by_push" not in [event.kind for event in store.events(operation_id)]:
        assert time.monotonic() < deadline, "the retry never woke the operation"
        time.sleep(0.01)
    stored = store.get(operation_id)
    assert stored is not None and stored.record.next_poll_at <= store.db_now()


def test_stop_waits_for_a_retry_thread_caught_mid_wake(home: Path) -> None:
    """A retry thread that is waking its operation when the receiver stops finishes before `stop` returns: after
    it, the caller closes the store the thread was writing to. Held mid-wake by the receiver's own log (what it
    tells once the wake is written), released when `stop` says it waits for it, or else once `stop` returned."""
    from datetime import timedelta

    from pollwarden.core.admission import WatchRequest
    from pollwarden.core.reasons import DelaySource
    from pollwarden.engine import Engine
    from pollwarden.events import Paced

    told: list[str] = []
    mid_wake, waited, returned = threading.Event(), threading.Event(), threading.Event()

    def log(event: str, **fields: object) -> None:
        if event == "push_retries_waited":
            waited.set()
        if event == "push_woke":  # in the retry thread, the wake just written
            mid_wake.set()
            assert waited.wait(60) or returned.wait(60)
            told.append("retry finished" + (" after stop returned" if returned.is_set() else ""))

    store = open_store(home, keys="write")
    contract = parse_contract(contract_text("http://127.0.0.1:9", base_delay="10m", max_delay="10m", extra=PUSH))
    install(store, contract)
    server = HooksServer(Receiver(store, owner=process_owner("hooks"), log=log, environ={"EXPORTS_HOOK": SECRET}))
    server.start()
    try:
        operation_id = Engine(store, owner="w").admit(WatchRequest(contract, "exp-7", by="test")).record.operation_id
        claimed = store.claim(operation_id, "w", store.db_now(), timedelta(seconds=30))  # a check in flight
        assert claimed is not None
        assert _status(_raw(server, _post("/hooks/exports", *signed("exp-7", "msg_mid")))) == 202  # busy: a retry
        now = store.db_now()
        answered = claimed[1].observed(at=now, http_status=200, request_id=None, state="running", rate_limited=False)
        later = answered.waiting(now + timedelta(minutes=10), DelaySource.LOCAL_BACKOFF)
        assert store.write(claimed[0], later, [Paced(provider="test", until=None)], now, release=True)
        assert mid_wake.wait(60), "the retry never woke the operation"
        server.stop()
        told.append("stop returned")
        returned.set()
    finally:
        returned.set()
        store.close()
    assert told[:2] == ["retry finished", "stop returned"], told
    assert not [t for t in threading.enumerate() if t.name == "pollwarden-push-retry" and t.is_alive()]


def test_a_delivery_still_reading_its_body_when_stop_returns_writes_nothing(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handler threads are the server's daemon threads, which `stop` does not join: a slow sender still
    sending its body when `stop` returns must find the receiver closed, and wake nothing (after `stop` the caller
    closes the store). Held mid-body by the sender itself; that its handler has begun is told by the handler."""
    from pollwarden.core.admission import WatchRequest
    from pollwarden.engine import Engine
    from pollwarden.fleet import hooks

    store = open_store(home, keys="write")
    contract = parse_contract(contract_text("http://127.0.0.1:9", base_delay="10m", max_delay="10m", extra=PUSH))
    install(store, contract)
    operation_id = Engine(store, owner="w").admit(WatchRequest(contract, "exp-5", by="test")).record.operation_id
    begun = threading.Event()
    handle = hooks._Handler.do_POST

    def do_post(self: hooks._Handler) -> None:
        begun.set()
        handle(self)

    monkeypatch.setattr(hooks._Handler, "do_POST", do_post)
    log: list[str] = []
    server = HooksServer(
        Receiver(
            store,
            owner=process_owner("hooks"),
            log=lambda event, **fields: log.append(event),
            environ={"EXPORTS_HOOK": SECRET},
        )
    ).start()
    request = _post("/hooks/exports", *signed("exp-5", "msg_late"))
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
            conn.sendall(request[:-5])  # all but the body's last bytes: its handler waits for them
            assert begun.wait(60), "the handler never began"
            server.stop()
            conn.sendall(request[-5:])
            conn.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        assert _status(b"".join(chunks)) == 503
        assert "woken_by_push" not in [event.kind for event in store.events(operation_id)]
        assert log == []
    finally:
        server.stop()
        store.close()


def test_a_retry_thread_that_cannot_start_leaves_nothing_for_stop_and_is_counted(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A push meeting a check in flight starts a retry thread; when the thread cannot start ("can't start new
    thread"), nothing is left behind for `stop` to join (it raised joining a thread never started), the
    operation is not held as retrying (a later push tries again), and the delivery is counted and told."""
    from datetime import timedelta

    from pollwarden.core.admission import WatchRequest
    from pollwarden.engine import Engine

    start = threading.Thread.start

    def start_but_retries(thread: threading.Thread) -> None:
        if thread.name == "pollwarden-push-retry":
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", start_but_retries)
    told: list[tuple[str, dict[str, object]]] = []
    store = open_store(home, keys="write")
    contract = parse_contract(contract_text("http://127.0.0.1:9", base_delay="10m", max_delay="10m", extra=PUSH))
    install(store, contract)
    receiver = Receiver(
        store,
        owner=process_owner("hooks"),
        log=lambda event, **fields: told.append((event, fields)),
        environ={"EXPORTS_HOOK": SECRET},
    )
    server = HooksServer(receiver).start()
    try:
        operation_id = Engine(store, owner="w").admit(WatchRequest(contract, "exp-3", by="test")).record.operation_id
        assert store.claim(operation_id, "w", store.db_now(), timedelta(seconds=30)) is not None  # a check in flight
        for n in range(2):
            assert _status(_raw(server, _post("/hooks/exports", *signed("exp-3", f"msg_nothread_{n}")))) == 202
    finally:
        server.stop()
        store.close()
    assert receiver.counts[("exports", "retry_not_started")] == 2  # the second push tried again
    failed = [fields for event, fields in told if event == "push_failed"]
    assert len(failed) == 2 and failed[0]["operations"] == [operation_id], told
    assert "can't start new thread" in str(failed[0]["why"])


@pytest.mark.parametrize("length", [b"\xb2", b"9" * 5000], ids=["superscript-two", "5000-digits"])
def test_a_content_length_that_only_looks_numeric_is_refused_with_400_not_a_traceback(
    receiver: tuple[HooksServer, Store], length: bytes, capfd: pytest.CaptureFixture[str]
) -> None:
    """'²' (0xB2, read as latin-1) passes str.isdigit and 5,000 digits pass it too; int() refuses both."""
    server, _ = receiver
    headers, body = signed("exp-1", "msg_len")
    request = _post("/hooks/exports", headers, b"", length=False).removesuffix(b"\r\n")
    answer = _raw(server, request + b"Content-Length: " + length + b"\r\n\r\n" + body)
    assert answer, "the connection closed with no answer"
    assert _status(answer) == 400
    assert "Traceback" not in capfd.readouterr().err
    assert sum(n for (_, outcome), n in server.receiver.counts.items() if outcome == "length_required") == 1


def test_two_different_content_lengths_are_refused_with_400(receiver: tuple[HooksServer, Store]) -> None:
    """Where the body ends would be unknown, and its rest would be read as the next request (RFC 9112 §6.3)."""
    server, _ = receiver
    headers, body = signed("exp-1", "msg_two")
    request = _post("/hooks/exports", headers, b"", length=False).removesuffix(b"\r\n")
    lengths = f"Content-Length: {len(body)}\r\nContent-Length: {len(body) - 1}\r\n".encode()
    assert _status(_raw(server, request + lengths + b"\r\n" + body)) == 400
