"""The receiver of provider pushes: `POST /hooks/{contract}` on a small standard-library HTTP server (issue 27).

`pollwarden hooks`, the worker's `--hooks-port` and the broker serve it; it is meant to sit behind the user's
HTTPS proxy and binds loopback unless told otherwise. For each contract name it verifies with the newest
installed version that has a `[push]` table, and the webhook secret named by that table's `secret_env`, read
from this process's environment. Everything a delivery may change goes through `engine.push.receive`; this
module only reads the request (the body capped before it is read), answers, counts and logs.

Answers carry no detail: 202 for every verified delivery (whatever it woke), 401 for a bad or stale
signature, 413 for an oversized body, 400 for a malformed one, 404 for a contract with no `[push]` table,
503 when the secret is not in the environment. `GET /metrics` counts outcomes per contract (Prometheus text).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..core.contract.parse import Contract, ContractError, parse_contract
from ..core.digits import whole_number
from ..core.lease import lease_ttl
from ..core.push_signature import MAX_BODY_BYTES, STATUS, Refusal
from ..engine.push import Received, receive, wake_one
from ..store.base import Store, StoreError

PATH = "/hooks/"

READ_TIMEOUT = 5.0
"""Seconds a connection may take to send its request: a slow sender holds one thread, never the receiver."""

RETRY = 0.05
"""Seconds between tries to wake an operation whose check was in flight when its push came."""
STOP_WAIT = 10.0
"""Seconds `HooksServer.stop` waits at most for the deliveries and retry threads in flight to finish their store
calls: after stop its caller closes the store, which a thread still writing would then meet closed."""

Log = Callable[..., None]
"""Where refusals and wakes are told: `log(event, **fields)` (the worker's `JsonLog`), never a body or secret."""


class Contracts:
    """The `[push]` contract of each name, as the store's registry holds it, read again when a name is unknown
    or a newer version is installed (a push is rare next to the cost of reading the registry)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._by_name: dict[str, tuple[str, Contract]] = {}

    def known(self, name: str) -> bool:
        """Whether a `[push]` contract of this name has been met (no store read: a refusal before the body)."""
        with self._lock:
            return name in self._by_name

    def get(self, name: str) -> Contract | None:
        versions = self._store.installed_contracts(name)
        pushed = None
        for version in reversed(versions):  # newest first: the one an operator installed last
            with self._lock:
                known = self._by_name.get(name)
            if known is not None and known[0] == version.digest:
                return known[1]
            try:
                contract = parse_contract(version.text, source=f"installed contract {name}")
            except ContractError:
                continue
            if contract.push is not None:
                pushed = contract
                with self._lock:
                    self._by_name[name] = (version.digest, contract)
                break
        return pushed


class Receiver:
    """What the handler threads share: the store, the contracts, the environment's secrets and the counters."""

    def __init__(
        self, store: Store, *, owner: str, log: Log | None = None, environ: Mapping[str, str] | None = None
    ) -> None:
        self.store = store
        self.owner = owner
        self.contracts = Contracts(store)
        self.log = log or (lambda event, **fields: None)
        self._environ = os.environ if environ is None else environ
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        """Deliveries admitted (`admitted`) and not yet answered, which `close` waits for."""
        self.counts: Counter[tuple[str, str]] = Counter()
        self.closing = threading.Event()
        self._retrying: set[str] = set()
        """Operations a retry thread is waiting on: a storm during one check in flight starts one, not one a push."""
        self._threads: set[threading.Thread] = set()
        """The retry threads running, which `close` waits for."""

    @contextmanager
    def admitted(self) -> Iterator[bool]:
        """Whether a delivery may go on to the store, the counters and the log: False once closing. Decided under the
        lock `close` sets closing under, so each delivery is either refused or waited for by `close`, never both
        (the server's handler threads are daemons, which nothing else joins: a slow sender may finish its body
        after `stop` returned)."""
        with self._lock:
            admitted = not self.closing.is_set()
            self._in_flight += int(admitted)
        try:
            yield admitted
        finally:
            if admitted:
                with self._lock:
                    self._in_flight -= 1
                    self._idle.notify_all()

    def count(self, contract: str, outcome: str) -> None:
        with self._lock:
            self.counts[(contract, outcome)] += 1

    def deliver(self, name: str, headers: Mapping[str, str], body: bytes) -> Received:
        contract = self.contracts.get(name)
        if contract is None or contract.push is None:
            return Received(404, "unknown_contract", "no installed contract of that name has a [push] table")
        secret = self._environ.get(contract.push.secret_env)
        received = receive(self.store, contract, headers, body, secret=secret, owner=self.owner)
        failed: RuntimeError | None = None
        with self._lock:
            # None once closing: a delivery finishing as the receiver stops starts no thread `close` would miss
            # (the operation's own schedule still checks it).
            fresh = [] if self.closing.is_set() else [o for o in received.busy if o not in self._retrying]
            if fresh:
                thread = threading.Thread(
                    target=self._wake_after, args=(contract, received, fresh), name="pollwarden-push-retry", daemon=True
                )
                try:
                    thread.start()
                except RuntimeError as exc:  # "can't start new thread": nothing is left for `close` to join
                    failed = exc
                else:
                    # Under the lock: the thread's own discard, when it ends, waits for this add.
                    self._threads.add(thread)
                    self._retrying.update(fresh)
        if failed is not None:
            # The delivery was verified and remembered (a provider's retry is a replay): 202 as ever, but counted
            # and told; the operations' own schedules still check them.
            self.log("push_failed", contract=name, operations=fresh, why=f"no retry thread: {failed}")
            return replace(received, outcome="retry_not_started")
        return received

    def close(self, wait: float = STOP_WAIT) -> None:
        """No delivery is admitted and no retry starts from now on, and those in flight end their current store
        call: waited for up to `wait` seconds in all (a store call that hangs longer is told, not waited for)."""
        ends = time.monotonic() + wait
        with self._lock:
            self.closing.set()
            in_flight = self._in_flight
        if in_flight:
            self.log("push_deliveries_waited", deliveries=in_flight)
            with self._lock:
                while self._in_flight and self._idle.wait(max(0.0, ends - time.monotonic())):
                    pass
                left = self._in_flight
            if left:
                self.log("push_deliveries_unfinished", deliveries=left)
        with self._lock:
            threads = list(self._threads)
        if not threads:
            return
        self.log("push_retries_waited", threads=len(threads))
        for thread in threads:
            thread.join(max(0.0, ends - time.monotonic()))
        left = sum(1 for thread in threads if thread.is_alive())
        if left:
            self.log("push_retries_unfinished", threads=left)

    def _wake_after(self, contract: Contract, received: Received, waiting: list[str]) -> None:
        """A push that met a check in flight wakes its operation once that check is recorded (its answer may be
        from before the job ended): tried again every `RETRY` until the holder's lease would have expired."""
        assert received.wake is not None
        ends = time.monotonic() + lease_ttl(contract).total_seconds() + 1.0
        try:
            while waiting and time.monotonic() < ends and not self.closing.wait(RETRY):
                for operation_id in list(waiting):
                    try:
                        outcome = wake_one(
                            self.store, contract, operation_id, received.wake, received.delivery_id, owner=self.owner
                        )
                    except StoreError:
                        continue
                    if outcome != "busy":
                        waiting.remove(operation_id)
                        self._done_retrying(operation_id)  # before the ring: a push during the next check retries
                    if outcome == "moved":
                        self.store.bell().ring()
                        self.log("push_woke", contract=contract.name, operations=[operation_id])
        finally:
            for operation_id in waiting:
                self._done_retrying(operation_id)
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _done_retrying(self, operation_id: str) -> None:
        with self._lock:
            self._retrying.discard(operation_id)

    def metrics(self) -> str:
        with self._lock:
            counts = sorted(self.counts.items())
        lines = [
            "# HELP pollwarden_push_deliveries_total Provider pushes received, by contract and outcome.",
            "# TYPE pollwarden_push_deliveries_total counter",
        ]
        for (contract, outcome), n in counts:
            lines.append(f'pollwarden_push_deliveries_total{{contract="{contract}",outcome="{outcome}"}} {n}')
        return "\n".join(lines) + "\n"


def _contract_name(path: str) -> str | None:
    name = path.partition("?")[0].removeprefix(PATH)
    if not path.startswith(PATH) or not name or len(name) > 200 or not all(c.isalnum() or c in "-_." for c in name):
        return None
    return name


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "pollwarden-hooks"
    sys_version = ""
    timeout = READ_TIMEOUT

    def do_POST(self) -> None:
        receiver = self.server.receiver
        name = _contract_name(self.path)
        if name is None:
            self._answer(404, "no such hook: POST /hooks/CONTRACT")
            return
        lengths = set(self.headers.get_all("Content-Length") or ())
        length_text = next(iter(lengths)) if lengths else None
        # One value, of 19 digits at most (past any body): two different ones leave where the body ends unknown
        # (RFC 9112 §6.3), and the rest of it would be read as the next request.
        length = whole_number(length_text, 19) if length_text is not None and len(lengths) == 1 else None
        if self.headers.get("Transfer-Encoding") is not None or length is None:
            self._refused(name, 411 if length_text is None else 400, "length_required", "a Content-Length is required")
            return
        if length > MAX_BODY_BYTES:
            self._refused(name, STATUS[Refusal.TOO_LARGE], Refusal.TOO_LARGE.value, f"{length} bytes")
            return
        try:
            body = self.rfile.read(length)
        except OSError:
            self.close_connection = True
            return
        if len(body) != length:
            self._refused(name, 400, Refusal.MALFORMED.value, "the body ended early")
            return
        with receiver.admitted() as admitted:
            if admitted:
                self._deliver(name, body)
            else:
                self._answer(503, "the receiver is stopping; the provider may retry")

    def _deliver(self, name: str, body: bytes) -> None:
        receiver = self.server.receiver
        headers = {key.lower(): value for key, value in self.headers.items()}
        try:
            received = receiver.deliver(name, headers, body)
        except StoreError as exc:
            receiver.count(name if receiver.contracts.known(name) else "-", "store_unavailable")
            receiver.log("push_failed", contract=name, why=str(exc))
            self._answer(503, "the store is unavailable; the provider may retry")
            return
        # A name with no [push] contract is counted under one label: made-up names must not grow the counters.
        receiver.count(name if received.outcome != "unknown_contract" else "-", received.outcome)
        if received.status >= 400:
            receiver.log("push_refused", contract=name, outcome=received.outcome, why=received.detail)
            self._answer(received.status, "refused")
            return
        if received.woken:
            receiver.log("push_woke", contract=name, operations=list(received.woken))
        self._answer(received.status, "accepted")

    def do_GET(self) -> None:
        if self.path == "/metrics":
            self._answer(200, self.server.receiver.metrics(), "text/plain; version=0.0.4")
        else:
            self._answer(404, "POST /hooks/CONTRACT")

    def _refused(self, name: str, status: int, outcome: str, why: str) -> None:
        receiver = self.server.receiver
        with receiver.admitted() as admitted:
            if admitted:  # else stopped: nothing is told after `stop` returned
                receiver.count(name if receiver.contracts.known(name) else "-", outcome)
                receiver.log("push_refused", contract=name, outcome=outcome, why=why)
        self.close_connection = True  # the unread body must not be taken for the next request
        self._answer(status, "refused")

    def _answer(self, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> None:
        data = (text if text.endswith("\n") else text + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # each delivery is told through `Receiver.log`, without its headers


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], receiver: Receiver) -> None:
        self.receiver = receiver
        super().__init__(address, _Handler)


class HooksServer:
    """The receiver on `host:port` (port 0: any free one), served by a thread of this process."""

    def __init__(self, receiver: Receiver, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.receiver = receiver
        self._server = _Server((host, port), receiver)
        self._thread = threading.Thread(target=self._server.serve_forever, name="pollwarden-hooks", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    def start(self) -> HooksServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops serving, then waits (bounded) for the deliveries in flight and the retry threads' wakes: the caller
        may close the store next. A delivery whose body is still coming is refused (503) once it has come."""
        self.receiver.closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self.receiver.close()
