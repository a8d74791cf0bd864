"""The HTTP side: a `ThreadingHTTPServer` that answers from the scripts, records every request, and `serve`."""

from __future__ import annotations

import contextlib
import hmac
import json
import math
import re
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, cast

from ..foreground import stop_signals, wait_for
from .push import Pusher
from .scenarios import SCENARIOS, scenario_for
from .script import Job, Step, parse_script, render, substitute

_MAX_REQUEST_BODY = 1024 * 1024
_SECRET_NAME_PARTS = ("token", "key", "secret")
_SECRET_NAMES = frozenset({"authorization", "proxy-authorization", "cookie"})
_JOB_PATH = re.compile(r"^/jobs/([^/]+)$")
_CANCEL_PATH = re.compile(r"^/jobs/([^/]+)/cancel$")
_RESULT_PATH = re.compile(r"^/results/([^/]+)$")


@dataclass(frozen=True)
class RecordedRequest:
    """What the provider saw, kept so tests can count and date requests exactly (R13, R28)."""

    method: str
    path: str
    job_id: str | None
    at: float
    status: int | None
    auth_ok: bool | None
    headers: Mapping[str, str]
    request_id: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able form for `/_sim/requests`, where subprocess tests read it."""
        return {
            "method": self.method,
            "path": self.path,
            "job_id": self.job_id,
            "at": self.at,
            "status": self.status,
            "auth_ok": self.auth_ok,
            "headers": dict(self.headers),
            "request_id": self.request_id,
        }


def _is_secret_header(name: str) -> bool:
    lowered = name.lower()
    return lowered in _SECRET_NAMES or any(part in lowered for part in _SECRET_NAME_PARTS)


@dataclass
class _Answer:
    status: int | None
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def _json_answer(status: int, value: Any, headers: Mapping[str, str] | None = None) -> _Answer:
    out = {"Content-Type": "application/json"}
    out.update(headers or {})
    return _Answer(status, json.dumps(value).encode(), out)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The default listen backlog of 5 drops SYNs when a fleet or 50 embedded watches connect at once, and a
    # dropped SYN is retried only a second later: a simulator must not invent that lateness.
    request_queue_size = 1024
    # Handler threads idle in keep-alive reads; stop() closes their sockets instead of joining them.
    block_on_close = False

    def __init__(self, address: tuple[str, int], simulator: Simulator) -> None:
        self.simulator = simulator
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up mid-answer (timeouts, resets) are part of the script, not worth a traceback.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pollwarden-sim/1"
    # Headers and body go out in two writes; with Nagle on, delayed ACKs add ~40 ms per answer.
    disable_nagle_algorithm = True

    @property
    def _sim(self) -> Simulator:
        return cast(_Server, self.server).simulator

    def setup(self) -> None:
        super().setup()
        server = cast(_Server, self.server)
        with server.connections_lock:
            server.connections.add(self.connection)

    def finish(self) -> None:
        server = cast(_Server, self.server)
        with server.connections_lock:
            server.connections.discard(self.connection)
        with contextlib.suppress(OSError):  # the client or stop() already closed the socket
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: tests and the demo own stderr."""

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_REQUEST_BODY:
            raise ValueError("request body too large")
        return self.rfile.read(length) if length > 0 else b""

    def _dispatch(self) -> None:
        at = time.time()
        try:
            raw = self._body()
        except ValueError:
            self.close_connection = True
            raw = b""
            answer = self._sim._record_and_answer(self, at, None, None, _json_answer(413, {"error": "too large"}))
        else:
            answer = self._sim._handle(self, at, raw)
        self._send(answer)

    do_GET = _dispatch
    do_POST = _dispatch
    do_PUT = _dispatch
    do_DELETE = _dispatch
    do_PATCH = _dispatch

    def _send(self, answer: _Answer) -> None:
        if answer.delay > 0 and self._sim._stopping.wait(answer.delay):
            answer = _Answer(None)
        if answer.status is None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_response(answer.status)
        for name, value in answer.headers.items():
            if name.lower() not in ("content-length", "x-request-id"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.body)))
        self.send_header("X-Request-Id", answer.headers["X-Request-Id"])
        self.end_headers()
        try:
            self.wfile.write(answer.body)
        except OSError:
            self.close_connection = True


class Simulator:
    """The provider; use as a context manager so the server never outlives the test."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        token: str | None = None,
        time_scale: float = 1.0,
        pusher: Pusher | None = None,
    ) -> None:
        """`pusher`: each scripted job's end is announced with a signed push (`simulator.push`)."""
        if not (math.isfinite(time_scale) and time_scale > 0):  # nan compares false, inf would never advance
            raise ValueError(f"time_scale must be a finite number > 0, got {time_scale}")
        self._host = host
        self._port = port
        self._token = token
        self._time_scale = time_scale
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}
        self._log: list[RecordedRequest] = []
        self._idempotency: dict[str, tuple[str, str]] = {}
        self._request_counter = 0
        self._submit_counter = 0
        self._server: _Server | None = None
        self._url = ""
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.pusher = pusher

    def __enter__(self) -> Simulator:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("simulator already started")
        self._stopping.clear()
        self._server = _Server((self._host, self._port), self)
        host, port = self._server.server_address[:2]
        self._url = f"http://{host!s}:{port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), name="pollwarden-sim", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        if self.pusher is not None:
            self.pusher.stop()
        server.shutdown()
        with server.connections_lock:
            open_connections = list(server.connections)
        for conn in open_connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        server.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def url(self) -> str:
        if not self._url:
            raise RuntimeError("simulator was never started")
        return self._url

    def add_job(self, job_id: str, steps: Sequence[Step]) -> None:
        """Script (or re-script) a job; its first step becomes active now, as if just submitted."""
        job = Job(steps, time.monotonic())
        with self._lock:
            self._jobs[job_id] = job
        if self.pusher is not None:
            self.pusher.schedule(job_id, steps, self._time_scale)

    def requests(self, job_id: str | None = None) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self._log if job_id is None or r.job_id == job_id]

    def request_count(self, job_id: str) -> int:
        """Status requests (`GET /jobs/{id}`, refused ones included) the provider received for a job.

        Cancel and result fetches are left out: this is the number a status budget bounds.
        """
        with self._lock:
            return sum(1 for r in self._log if r.job_id == job_id and r.method == "GET" and r.path.startswith("/jobs/"))

    # --- request handling (called from handler threads) -------------------------------------

    def _job(self, job_id: str) -> Job | None:
        job = self._jobs.get(job_id)
        if job is None:
            name = scenario_for(job_id)
            if name is not None:
                job = self._jobs[job_id] = Job(SCENARIOS[name][1], time.monotonic())
        return job

    def _record_and_answer(
        self, handler: _Handler, at: float, job_id: str | None, auth_ok: bool | None, answer: _Answer
    ) -> _Answer:
        """Record before the answer is written, so a client never sees a response not yet counted."""
        with self._lock:
            self._request_counter += 1
            request_id = f"sim-{self._request_counter}"
            headers = {k.lower(): v for k, v in handler.headers.items() if not _is_secret_header(k)}
            self._log.append(
                RecordedRequest(handler.command, handler.path, job_id, at, answer.status, auth_ok, headers, request_id)
            )
        answer.headers["X-Request-Id"] = request_id
        return answer

    def _auth(self, handler: _Handler) -> bool | None:
        if self._token is None:
            return None
        given = handler.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {self._token}".encode())

    def _handle(self, handler: _Handler, at: float, raw: bytes) -> _Answer:
        parsed = urllib.parse.urlsplit(handler.path)
        path, method = parsed.path, handler.command
        if path.startswith("/_sim/"):
            return self._control(handler, method, path, parsed.query, raw)
        job_id = self._job_id_of(path)
        auth_ok: bool | None = None
        if path == "/jobs" or path.startswith(("/jobs/", "/results/")):
            auth_ok = self._auth(handler)
            if auth_ok is False:
                answer = _json_answer(401, {"error": "unauthorized"}, {"WWW-Authenticate": "Bearer"})
                return self._record_and_answer(handler, at, job_id, auth_ok, answer)
        idempotency_key = handler.headers.get("Idempotency-Key")
        with self._lock:
            answer, job_id = self._route(method, path, job_id, raw, idempotency_key)
        return self._record_and_answer(handler, at, job_id, auth_ok, answer)

    @staticmethod
    def _job_id_of(path: str) -> str | None:
        for pattern in (_JOB_PATH, _CANCEL_PATH, _RESULT_PATH):
            match = pattern.match(path)
            if match:
                return urllib.parse.unquote(match.group(1))
        return None

    def _route(
        self, method: str, path: str, job_id: str | None, raw: bytes, idempotency_key: str | None
    ) -> tuple[_Answer, str | None]:
        """Decide the answer with the lock held; the step moves on here, before any delay."""
        if path == "/jobs":
            if method != "POST":
                return _json_answer(405, {"error": "method not allowed"}, {"Allow": "POST"}), None
            return self._submit(raw, idempotency_key)
        if job_id is None:
            return _json_answer(404, {"error": "not found"}), None
        kind = "status" if _JOB_PATH.match(path) else "cancel" if _CANCEL_PATH.match(path) else "result"
        wanted = "POST" if kind == "cancel" else "GET"
        if method != wanted:
            return _json_answer(405, {"error": "method not allowed"}, {"Allow": wanted}), job_id
        job = self._job(job_id)
        if job is None:
            return _json_answer(404, {"error": "no such job"}), job_id
        if kind == "cancel":
            job.cancelled = True
            return _json_answer(200, {"job_id": job_id, "state": "cancelled"}), job_id
        if kind == "result":
            return _json_answer(200, {"job_id": job_id, "data": f"result of {job_id}"}), job_id
        if job.cancelled:
            return _json_answer(200, {"job_id": job_id, "state": "cancelled"}), job_id
        return self._step_answer(job.take(time.monotonic(), self._time_scale), job_id), job_id

    def _step_answer(self, step: Step, job_id: str) -> _Answer:
        if step.close:
            return _Answer(None, delay=step.delay)
        now = time.time()
        headers: dict[str, str] = {}
        if isinstance(step.body, bytes) or callable(step.body):
            # A callable is a builtin scenario's bytes, made when first served; a script's body is JSON or bytes.
            body = step.body() if callable(step.body) else step.body
            headers["Content-Type"] = "application/octet-stream"
        elif step.body is None:
            body = b""
        else:
            rendered = render(step.body, job_id=job_id, now=now, time_scale=self._time_scale)
            body = json.dumps(rendered).encode()
            headers["Content-Type"] = "application/json"
        for name, value in step.headers.items():
            headers[name] = substitute(value, job_id=job_id, now=now, time_scale=self._time_scale)
        return _Answer(step.status, body, headers, step.delay)

    def _submit(self, raw: bytes, key: str | None) -> tuple[_Answer, str | None]:
        try:
            request = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return _json_answer(400, {"error": "body is not JSON"}), None
        scenario = request.get("scenario", "happy") if isinstance(request, dict) else None
        if not isinstance(scenario, str) or scenario not in SCENARIOS:
            return _json_answer(400, {"error": "unknown scenario", "known": sorted(SCENARIOS)}), None
        if key is not None and key in self._idempotency:
            job_id, first_scenario = self._idempotency[key]
            if first_scenario != scenario:
                return _json_answer(409, {"error": "idempotency key reused for a different request"}), job_id
        else:
            self._submit_counter += 1
            job_id = f"{scenario}-sub{self._submit_counter}"
            self._jobs[job_id] = Job(SCENARIOS[scenario][1], time.monotonic())
            if key is not None:
                self._idempotency[key] = (job_id, scenario)
        location = f"/jobs/{urllib.parse.quote(job_id)}"
        body = {"job_id": job_id, "status_url": f"{self.url}{location}"}
        return _json_answer(202, body, {"Location": location}), job_id

    def _control(self, handler: _Handler, method: str, path: str, query: str, raw: bytes) -> _Answer:
        """Test-only endpoints; unrecorded and unauthenticated so they never disturb the counts."""
        with self._lock:
            self._request_counter += 1
            request_id = f"sim-{self._request_counter}"
        answer = self._control_answer(method, path, query, raw)
        answer.headers["X-Request-Id"] = request_id
        return answer

    def _control_answer(self, method: str, path: str, query: str, raw: bytes) -> _Answer:
        if path == "/_sim/requests" and method == "GET":
            job = urllib.parse.parse_qs(query).get("job", [None])[0]
            return _json_answer(200, [r.as_dict() for r in self.requests(job)])
        if path == "/_sim/jobs" and method == "POST":
            try:
                job_id, steps = parse_script(raw)
            except ValueError as exc:
                return _json_answer(400, {"error": str(exc)})
            self.add_job(job_id, steps)
            return _json_answer(201, {"job_id": job_id, "status_url": f"{self.url}/jobs/{job_id}"})
        return _json_answer(404, {"error": "not found"})


def serve(
    host: str,
    port: int,
    *,
    token: str | None,
    time_scale: float,
    on_ready: Callable[[str], None],
    pusher: Pusher | None = None,
) -> None:
    """Run a simulator in the foreground for the demo or a subprocess test; SIGTERM stops it cleanly."""
    with stop_signals() as done, Simulator(host, port, token=token, time_scale=time_scale, pusher=pusher) as sim:
        on_ready(sim.url)
        wait_for(done)
