"""Loopback HTTP servers that record every request: `Loopback` answers from a table of routes (the fetch-result
and submit tests use two of them to be two origins); `provider()` answers each path from a script of replies in
order, the last one repeating (the catalogue tests)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

POLL_INTERVAL = 0.02


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    drop: bool = False
    """Close the connection without answering: the request was received, its outcome unknown to the client."""


Route = Callable[[Seen], Answer]


class Loopback:
    def __init__(self, routes: Mapping[tuple[str, str], Route | Answer], host: str = "127.0.0.1") -> None:
        """`host`: any 127/8 address is loopback on Linux, so 127.0.0.2 is another host on this machine (a stand-in
        for an internal address, such as a cloud's metadata service)."""
        self.routes = dict(routes)
        self.seen: list[Seen] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                seen = Seen(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length)
                )
                outer.seen.append(seen)
                route = outer.routes.get((self.command, self.path), Answer(404, b'{"error":"not found"}'))
                answer = route if isinstance(route, Answer) else route(seen)
                if answer.drop:
                    self.close_connection = True
                    return
                try:
                    self.send_response(answer.status)
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(answer.body)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(answer.body)
                except (BrokenPipeError, ConnectionResetError):  # the client went away (a held answer outlived it)
                    self.close_connection = True

            do_GET = do_POST = do_PUT = _answer

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: pytest shows what a test asserts."""

        self._server = ThreadingHTTPServer((host, 0), Handler)
        # serve_forever looks at shutdown() every poll_interval: its default 0.5 s was half a second of every
        # test's teardown, doing nothing.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(POLL_INTERVAL,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Loopback:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def serving(
    routes: Mapping[tuple[str, str], Route | Answer] | None = None, host: str = "127.0.0.1"
) -> Iterator[Loopback]:
    server = Loopback(routes or {}, host).start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Provider:
    url: str = ""
    script: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, path: str, *replies: tuple[int, Any]) -> None:
        self.script[path] = list(replies)

    def requests(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.path == path]

    def _next(self, path: str) -> tuple[int, Any]:
        with self.lock:
            replies = self.script.get(path)
            if not replies:
                return 404, {"message": "404 Not found"}
            return replies.pop(0) if len(replies) > 1 else replies[0]


@contextmanager
def provider() -> Iterator[Provider]:
    state = Provider()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with state.lock:
                state.seen.append(Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            status, payload = state._next(self.path)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the assertions read `state.seen`."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(POLL_INTERVAL,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


class HeldHook:
    """A webhook receiver that holds every POST until the test calls `release()`, then answers 204: a receiver
    that hangs. `posts` are the POSTs that reached it (each recorded as it arrives, before it is held)."""

    def __init__(self) -> None:
        self.posts: list[Seen] = []
        self.released = threading.Event()
        self._arrived = threading.Condition()

    def route(self, seen: Seen) -> Answer:
        with self._arrived:
            self.posts.append(seen)
            self._arrived.notify_all()
        self.released.wait(120)  # a guard: a test that never releases still ends
        return Answer(204)

    def release(self) -> None:
        self.released.set()

    def wait_for(self, count: int, within: float = 60) -> None:
        """Until `count` POSTs have arrived (a guard of `within` seconds, never a pace)."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.posts) >= count, within):
                raise AssertionError(f"the webhook received {len(self.posts)} POST(s), not {count}, in {within} s")


@contextmanager
def held_hook() -> Iterator[tuple[HeldHook, str]]:
    """A `HeldHook` on loopback and its URL; released when the block ends, whatever the test did."""
    hook = HeldHook()
    with serving({("POST", "/hook"): hook.route}) as server:
        try:
            yield hook, f"{server.url}/hook"
        finally:
            hook.release()


def post(url: str, headers: Mapping[str, str], body: bytes) -> int:
    """POST `body` to `url` as a provider's push is sent; the answer's status, an error status included."""
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
