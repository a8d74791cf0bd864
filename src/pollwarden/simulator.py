"""A real HTTP job provider on loopback whose job lifecycles are scripted step by step.

The demo, the end-to-end tests and the benchmarks need a provider that misbehaves on purpose
(503 with Retry-After, 429 storms, states outside the table, bodies that are not JSON, resets)
and that tells afterwards exactly which requests it saw. A mock inside the client would prove
nothing about the wire, so this is a real `ThreadingHTTPServer` speaking HTTP/1.1.

Scripting model: a job is a list of `Step`s. Each status request is answered by the current
step; a step ends after it answered `times` requests, or, when it has `seconds`, once that much
(scaled) time has passed since it became active. The last step answers forever.

Placeholders: body strings (at any depth of a JSON body) and header values are rendered at
answer time by `substitute`, because a static script cannot know the job id or "now":

- `{job_id}`          the job's id
- `{rfc3339+N}`       now + N seconds as RFC 3339 UTC (`{rfc3339-N}` for the past)
- `{http_date+N}`     now + N seconds as an RFC 9110 HTTP-date (`{http_date-N}` too)

N is scaled by `time_scale` like every scenario time except `delay`.

The simulator never keeps an Authorization value or any header whose name suggests a
credential: recorded requests end up in test output and logs.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import email.utils
import hmac
import json
import math
import re
import signal
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any, cast

__all__ = [
    "SCENARIOS",
    "RecordedRequest",
    "Simulator",
    "Step",
    "contract_text",
    "scenario_listing",
    "serve",
    "substitute",
]

_MAX_REQUEST_BODY = 1024 * 1024
_SECRET_NAME_PARTS = ("token", "key", "secret")
_SECRET_NAMES = frozenset({"authorization", "proxy-authorization", "cookie"})
_PLACEHOLDER = re.compile(r"\{(job_id|(rfc3339|http_date)([+-])(\d+(?:\.\d+)?))\}")
_JOB_PATH = re.compile(r"^/jobs/([^/]+)$")
_CANCEL_PATH = re.compile(r"^/jobs/([^/]+)/cancel$")
_RESULT_PATH = re.compile(r"^/results/([^/]+)$")


@dataclass(frozen=True)
class Step:
    """One phase of a scripted job; see the module docstring for how steps advance."""

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    times: int = 1
    seconds: float | None = None
    delay: float = 0.0
    close: bool = False

    def __post_init__(self) -> None:
        # A script error should fail where the script is written, not as a hung test later.
        if not 100 <= self.status <= 599:
            raise ValueError(f"status must be 100..599, got {self.status}")
        if self.times < 1:
            raise ValueError(f"times must be at least 1, got {self.times}")
        if self.seconds is not None and (math.isnan(self.seconds) or self.seconds < 0):
            raise ValueError(f"seconds must be >= 0, got {self.seconds}")
        if math.isnan(self.delay) or self.delay < 0:
            raise ValueError(f"delay must be >= 0, got {self.delay}")


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


def substitute(text: str, *, job_id: str, now: float, time_scale: float = 1.0) -> str:
    """Render the placeholders in one string; unknown `{...}` text is left alone on purpose."""

    def one(match: re.Match[str]) -> str:
        if match.group(1) == "job_id":
            return job_id
        offset = float(match.group(4)) * time_scale
        when = now + offset if match.group(3) == "+" else now - offset
        if match.group(2) == "rfc3339":
            return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        # HTTP-dates have whole seconds; round up so "+N" is never earlier than asked.
        return email.utils.formatdate(math.ceil(when), usegmt=True)

    return _PLACEHOLDER.sub(one, text)


def _render(value: Any, *, job_id: str, now: float, time_scale: float) -> Any:
    if isinstance(value, str):
        return substitute(value, job_id=job_id, now=now, time_scale=time_scale)
    if isinstance(value, Mapping):
        return {k: _render(v, job_id=job_id, now=now, time_scale=time_scale) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_render(v, job_id=job_id, now=now, time_scale=time_scale) for v in value]
    return value


def _state(state: str, **extra: Any) -> dict[str, Any]:
    return {"job_id": "{job_id}", "state": state, **extra}


_SUCCEEDED = Step(body=_state("succeeded", result_url="/results/{job_id}"))
_RUNNING = Step(body=_state("running"))
_HUGE_BODY = b'{"state": "running", "padding": "' + b"x" * (5 * 1024 * 1024) + b'"}'

SCENARIOS: Mapping[str, tuple[str, Sequence[Step]]] = {
    "happy": (
        "queued once, running twice, then succeeded with a result_url",
        (Step(body=_state("queued")), Step(body=_state("running"), times=2), _SUCCEEDED),
    ),
    "slow": ("running for 3 s, then succeeded", (Step(body=_state("running"), seconds=3.0), _SUCCEEDED)),
    "retry_after": (
        "queued, 503 with Retry-After: 1, running, succeeded",
        (
            Step(body=_state("queued")),
            Step(status=503, body={"error": "service unavailable"}, headers={"Retry-After": "1"}),
            _RUNNING,
            _SUCCEEDED,
        ),
    ),
    "retry_after_date": (
        "503 with an HTTP-date Retry-After 2 s ahead, then succeeded",
        (
            Step(status=503, body={"error": "service unavailable"}, headers={"Retry-After": "{http_date+2}"}),
            _SUCCEEDED,
        ),
    ),
    "rate_limited": ("429 forever, never a Retry-After", (Step(status=429, body={"error": "rate limited"}),)),
    "rate_limited_retry_after": (
        "429 with Retry-After: 1, then succeeded",
        (Step(status=429, body={"error": "rate limited"}, headers={"Retry-After": "1"}), _SUCCEEDED),
    ),
    "unauthorized": (
        "401 forever",
        (Step(status=401, body={"error": "unauthorized"}, headers={"WWW-Authenticate": "Bearer"}),),
    ),
    "forbidden": ("403 forever", (Step(status=403, body={"error": "forbidden"}),)),
    "unknown_state": (
        "running, then awaiting_review forever",
        (_RUNNING, Step(body=_state("awaiting_review"))),
    ),
    "no_result": ("running, then succeeded without result_url", (_RUNNING, Step(body=_state("succeeded")))),
    "expired_running": (
        "running forever with expires_at one hour in the past",
        (Step(body=_state("running", expires_at="{rfc3339-3600}")),),
    ),
    "never": ("running forever", (_RUNNING,)),
    "down": ("500 forever", (Step(status=500, body={"error": "internal error"}),)),
    "flaky": (
        "502, 503, running, succeeded",
        (
            Step(status=502, body={"error": "bad gateway"}),
            Step(status=503, body={"error": "service unavailable"}),
            _RUNNING,
            _SUCCEEDED,
        ),
    ),
    "hint": (
        "running with poll_after_seconds: 1 twice, then succeeded",
        (Step(body=_state("running", poll_after_seconds=1), times=2), _SUCCEEDED),
    ),
    "bad_hint": (
        "running with a negative, an unparseable and an absurd hint, then succeeded",
        (
            Step(body=_state("running", poll_after_seconds=-5)),
            Step(body=_state("running", next_check_at="not a time")),
            Step(body=_state("running", poll_after_seconds=1e12)),
            _SUCCEEDED,
        ),
    ),
    "garbage": (
        "200 with an HTML body",
        (Step(body=b"<html>not json</html>", headers={"Content-Type": "text/html"}),),
    ),
    "not_utf8": (
        "200 claiming JSON with bytes that are not UTF-8",
        (Step(body=b'\xff\xfe{"state": "running"}', headers={"Content-Type": "application/json"}),),
    ),
    "huge": (
        "200 with a 5 MB JSON body",
        (Step(body=_HUGE_BODY, headers={"Content-Type": "application/json"}),),
    ),
    "failed": (
        "running, then failed with a provider error",
        (
            _RUNNING,
            Step(body=_state("failed", error={"code": "E_QUOTA", "message": "export quota exceeded"})),
        ),
    ),
    "cancelled": ("running, then cancelled", (_RUNNING, Step(body=_state("cancelled")))),
    "expired": ("running, then expired", (_RUNNING, Step(body=_state("expired")))),
    "not_found_then_ok": (
        "404 once (eventual consistency), running, succeeded",
        (Step(status=404, body={"error": "no such job"}), _RUNNING, _SUCCEEDED),
    ),
    "redirect": (
        "302 to another host",
        (Step(status=302, body=None, headers={"Location": "http://127.0.0.2:9/elsewhere"}),),
    ),
    "timeout": ("every answer is delayed 5 s (then running)", (Step(body=_state("running"), delay=5.0),)),
    "reset": ("the connection is closed without a response, forever", (Step(close=True),)),
    "teapot": ("418 forever", (Step(status=418, body={"error": "I'm a teapot"}),)),
}


def scenario_listing() -> str:
    """The builtin scenarios, one `name  description` line each: `simulate --help` and its start-up print."""
    lines = [f"  {name:26} {description}" for name, (description, _) in SCENARIOS.items()]
    return "\n".join(["scenarios (GET /jobs/<scenario>-<anything>):", *lines])


def _scenario_for(job_id: str) -> str | None:
    """The builtin scenario a job id names (`happy`, `happy-42`); the longest name wins."""
    matches = [name for name in SCENARIOS if job_id == name or job_id.startswith(name + "-")]
    return max(matches, key=len) if matches else None


def _is_secret_header(name: str) -> bool:
    lowered = name.lower()
    return lowered in _SECRET_NAMES or any(part in lowered for part in _SECRET_NAME_PARTS)


class _Job:
    """Progress through a script; every method is called with the simulator lock held."""

    def __init__(self, steps: Sequence[Step], now: float) -> None:
        if not steps:
            raise ValueError("a job needs at least one step")
        self.steps = tuple(steps)
        self.index = 0
        self.answered = 0
        self.active_since = now
        self.cancelled = False

    def take(self, now: float, time_scale: float) -> Step:
        """The step answering a request arriving at `now`, advancing the script past it."""
        last = len(self.steps) - 1
        while self.index < last:
            current = self.steps[self.index]
            if current.seconds is None:
                break
            ends = self.active_since + current.seconds * time_scale
            if now < ends:
                break
            self.index += 1
            self.answered = 0
            self.active_since = ends
        step = self.steps[self.index]
        if step.seconds is None and self.index < last:
            self.answered += 1
            if self.answered >= step.times:
                self.index += 1
                self.answered = 0
                self.active_since = now
        return step


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
        self, host: str = "127.0.0.1", port: int = 0, *, token: str | None = None, time_scale: float = 1.0
    ) -> None:
        if not (math.isfinite(time_scale) and time_scale > 0):  # nan compares false, inf would never advance
            raise ValueError(f"time_scale must be a finite number > 0, got {time_scale}")
        self._host = host
        self._port = port
        self._token = token
        self._time_scale = time_scale
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}
        self._log: list[RecordedRequest] = []
        self._idempotency: dict[str, tuple[str, str]] = {}
        self._request_counter = 0
        self._submit_counter = 0
        self._server: _Server | None = None
        self._url = ""
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

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
        job = _Job(steps, time.monotonic())
        with self._lock:
            self._jobs[job_id] = job

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

    def _job(self, job_id: str) -> _Job | None:
        job = self._jobs.get(job_id)
        if job is None:
            name = _scenario_for(job_id)
            if name is not None:
                job = self._jobs[job_id] = _Job(SCENARIOS[name][1], time.monotonic())
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
        if isinstance(step.body, bytes):
            body = step.body
            headers["Content-Type"] = "application/octet-stream"
        elif step.body is None:
            body = b""
        else:
            rendered = _render(step.body, job_id=job_id, now=now, time_scale=self._time_scale)
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
            self._jobs[job_id] = _Job(SCENARIOS[scenario][1], time.monotonic())
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
                job_id, steps = _parse_script(raw)
            except ValueError as exc:
                return _json_answer(400, {"error": str(exc)})
            self.add_job(job_id, steps)
            return _json_answer(201, {"job_id": job_id, "status_url": f"{self.url}/jobs/{job_id}"})
        return _json_answer(404, {"error": "not found"})


def _parse_script(raw: bytes) -> tuple[str, list[Step]]:
    """Read a `/_sim/jobs` body; bytes bodies travel as `body_base64` because JSON cannot carry them."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ValueError("body is not JSON") from exc
    if not isinstance(data, dict):
        raise ValueError("expected an object with job_id and steps")
    job_id, raw_steps = data.get("job_id"), data.get("steps")
    if not isinstance(job_id, str) or not job_id or "/" in job_id:
        raise ValueError("job_id must be a non-empty string without '/'")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ValueError("steps must be a non-empty list")
    steps: list[Step] = []
    allowed = {"status", "body", "body_base64", "headers", "times", "seconds", "delay", "close"}
    for i, item in enumerate(raw_steps):
        if not isinstance(item, dict) or not set(item) <= allowed:
            raise ValueError(f"step {i}: expected an object with keys from {sorted(allowed)}")
        headers = item.get("headers", {})
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise ValueError(f"step {i}: headers must map strings to strings")
        body: Any = item.get("body")
        if "body_base64" in item:
            try:
                body = base64.b64decode(item["body_base64"], validate=True)
            except (binascii.Error, TypeError) as exc:
                raise ValueError(f"step {i}: body_base64 is not base64") from exc
        status, times, seconds, delay, close = (
            item.get("status", 200),
            item.get("times", 1),
            item.get("seconds"),
            item.get("delay", 0.0),
            item.get("close", False),
        )
        if type(status) is not int or type(times) is not int or type(close) is not bool:
            raise ValueError(f"step {i}: status and times must be integers, close a boolean")
        if seconds is not None and not isinstance(seconds, int | float):
            raise ValueError(f"step {i}: seconds must be a number or null")
        if not isinstance(delay, int | float) or isinstance(delay, bool):
            raise ValueError(f"step {i}: delay must be a number")
        steps.append(Step(status, body, headers, times, seconds, float(delay), close))
    return job_id, steps


_CONTRACT = """\
name = "{name}"
status_url = "{base}/jobs/{{job_id}}"
timeout = "{timeout}"
safe_status = true
{auth}
[states]
pending = ["queued", "running"]
success = ["succeeded"]
failure = ["failed"]
cancelled = ["cancelled"]
expired = ["expired"]

[fields]
state = "state"
result = "result_url"
error = "error"
expires_at = "expires_at"
poll_after_seconds = "poll_after_seconds"
next_check_at = "next_check_at"

[schedule]
base_delay = "{base_delay}"
max_delay = "{max_delay}"

[limits]
deadline = "{deadline}"
max_requests = {max_requests}
max_transport_failures = {max_transport_failures}
max_rate_limited = {max_rate_limited}
{extra}
"""


def contract_text(
    base_url: str,
    *,
    name: str = "exports",
    timeout: str = "2s",
    base_delay: str = "100ms",
    max_delay: str = "400ms",
    deadline: str = "1m",
    max_requests: int = 12,
    max_transport_failures: int = 3,
    max_rate_limited: int = 3,
    secret_env: str | None = None,
    extra: str = "",
) -> str:
    """The contract that reads this simulator's scenario bodies: the demo, the tests and the benchmarks use it."""
    auth = f'\n[auth]\nsecret_env = "{secret_env}"\n' if secret_env else ""
    return _CONTRACT.format(
        name=name,
        base=base_url,
        timeout=timeout,
        base_delay=base_delay,
        max_delay=max_delay,
        deadline=deadline,
        max_requests=max_requests,
        max_transport_failures=max_transport_failures,
        max_rate_limited=max_rate_limited,
        auth=auth,
        extra=extra,
    )


def serve(host: str, port: int, *, token: str | None, time_scale: float, on_ready: Callable[[str], None]) -> None:
    """Run a simulator in the foreground for the demo or a subprocess test; SIGTERM stops it cleanly."""
    done = threading.Event()
    previous: Any = None
    previous_int: Any = None
    in_main = threading.current_thread() is threading.main_thread()

    def on_term(signum: int, frame: FrameType | None) -> None:
        done.set()

    if in_main:  # SIGINT explicitly as well: a shell's background job inherits it ignored
        previous = signal.signal(signal.SIGTERM, on_term)
        previous_int = signal.signal(signal.SIGINT, on_term)
    try:
        with Simulator(host, port, token=token, time_scale=time_scale) as sim:
            on_ready(sim.url)
            try:
                while not done.wait(0.5):
                    pass
            except KeyboardInterrupt:
                pass
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, previous_int)
