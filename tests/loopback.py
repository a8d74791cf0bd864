"""A scripted provider on loopback for the shipped contracts' tests: each path answers its list of replies in
order (the last one repeats) and every request is kept (method, path, headers, body) for the assertions."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


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
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
