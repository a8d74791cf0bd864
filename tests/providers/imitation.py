"""One loopback HTTP imitation that can play each shipped contract's provider.

A test scripts, per job, the answers the provider's documentation shows, in order (the last one repeats),
and the imitation answers the contract's status request with them, after checking the credential the way
that provider does (a refused credential gets that provider's documented error body, never the script).
It also serves the result endpoints (OpenAI file content, Anthropic results JSONL, a foreign "delivery"
origin) and records every request it received, so a test can assert method, headers and body.

The provider profiles here hold only what a provider does on the wire (its routes, credential check and
error bodies); the bodies a job goes through are in each provider's test module, next to the citation of
the page or SDK file they were copied from. Nothing here knows pollwarden's contracts: it is the other side.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import re
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, cast

JSONValue = str | int | float | bool | None | list["JSONValue"] | dict[str, "JSONValue"]
_MAX_REQUEST_BODY = 1024 * 1024


@dataclass(frozen=True)
class Answer:
    """One scripted answer: a JSON value (or raw bytes) with its status and headers."""

    status: int = 200
    body: JSONValue | bytes = None
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = "application/json"

    def encoded(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        return b"" if self.body is None and self.status == 204 else json.dumps(self.body).encode()


def ok(body: JSONValue, **headers: str) -> Answer:
    return Answer(200, body, {k.replace("_", "-"): v for k, v in headers.items()})


@dataclass(frozen=True)
class Seen:
    """A request as the provider received it (header names lower-cased)."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    body: bytes
    job: str | None
    status: int
    credential_ok: bool
    at: float

    def json(self) -> JSONValue:
        value: JSONValue = json.loads(self.body)
        return value


@dataclass(frozen=True)
class Incoming:
    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    body: bytes


Check = Callable[[Incoming], "Answer | None"]
"""A credential check: None when the provider would accept the request, else the provider's refusal."""
Route = Callable[[Incoming], "str | None"]
"""Which job a request asks about, or None when it is not a status request."""


@dataclass(frozen=True)
class Profile:
    """What one provider does on the wire, besides the job's own lifecycle."""

    name: str
    route: Route
    check: Check | None
    not_found: Callable[[str], Answer]
    headers: Mapping[str, str] = field(default_factory=dict)
    """Sent on every answer (GitHub's x-ratelimit-* for instance)."""
    job_key: Callable[[str], str] = str
    """How the provider reads a job's name: a test's `script(job)` and `seen(job)` name it as `route` does (Azure
    reads paths without case)."""


# --- credential checks ------------------------------------------------------------------------------


def header_equals(name: str, value: str, refusal: Answer, **also: str) -> Check:
    """The credential header must be exactly `value`; `also` are further required headers (anthropic-version)."""
    wanted = {name.lower(): value, **{k.lower().replace("_", "-"): v for k, v in also.items()}}

    def check(request: Incoming) -> Answer | None:
        for key, expected in wanted.items():
            if not hmac.compare_digest(request.headers.get(key, "").encode(), expected.encode()):
                return refusal
        return None

    return check


def bearer(token: str, refusal: Answer) -> Check:
    return header_equals("authorization", f"Bearer {token}", refusal)


@dataclass(frozen=True)
class SigV4:
    """Checks an AWS Signature Version 4 Authorization header by recomputing the signature.

    The algorithm is AWS's ("Create a signed AWS API request", docs.aws.amazon.com/IAM/latest/UserGuide/
    reference_sigv4-create-signed-request.html); it is written here independently of any signer so the
    contract's signer is checked against the algorithm, not against itself.
    """

    access_key: str
    secret_key: str
    region: str
    service: str
    session_token: str | None = None
    refusal: Callable[[str, str], Answer] = field(default=lambda kind, message: Answer(400, {}))
    must_sign: tuple[str, ...] = ("host", "x-amz-date")
    max_skew: float = 300.0

    def __call__(self, request: Incoming) -> Answer | None:
        problem = self.problem(request)
        if problem is None:
            return None
        return self.refusal(*problem)

    def problem(self, request: Incoming) -> tuple[str, str] | None:
        header = request.headers.get("authorization", "")
        match = re.fullmatch(
            r"AWS4-HMAC-SHA256 Credential=([^/,]+)/(\d{8})/([^/,]+)/([^/,]+)/aws4_request,\s*"
            r"SignedHeaders=([a-z0-9;-]+),\s*Signature=([0-9a-f]{64})",
            header,
        )
        if match is None:
            return ("MissingAuthenticationTokenException", "Missing Authentication Token")
        key, day, region, service, signed, signature = match.groups()
        if key != self.access_key:
            return ("UnrecognizedClientException", "The security token included in the request is invalid.")
        if (region, service) != (self.region, self.service):
            return ("InvalidSignatureException", f"Credential should be scoped to a valid region ({self.region}).")
        names = signed.split(";")
        if names != sorted(names) or any(n not in request.headers for n in names):
            return ("InvalidSignatureException", "SignedHeaders names headers that were not sent, or unsorted.")
        needed = set(self.must_sign) | ({"x-amz-security-token"} if self.session_token else set())
        if not needed <= set(names):
            return ("InvalidSignatureException", f"these headers must be signed: {sorted(needed - set(names))}")
        if self.session_token is not None and request.headers.get("x-amz-security-token") != self.session_token:
            return ("UnrecognizedClientException", "The security token included in the request is invalid.")
        stamp = request.headers.get("x-amz-date", "")
        try:
            moment = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        except ValueError:
            return ("IncompleteSignatureException", "X-Amz-Date is not in ISO 8601 basic format.")
        if stamp[:8] != day or abs(moment.timestamp() - time.time()) > self.max_skew:
            return ("InvalidSignatureException", "Signature expired or the credential date is not the request's.")
        expected = self.signature(request, names, stamp)
        if not hmac.compare_digest(expected, signature):
            return ("InvalidSignatureException", "The request signature we calculated does not match the signature.")
        return None

    def signature(self, request: Incoming, names: Sequence[str], stamp: str) -> str:
        def trim(value: str) -> str:
            return " ".join(value.strip().split())

        query = "&".join(
            f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
            for k, v in sorted(urllib.parse.parse_qsl(request.query, keep_blank_values=True))
        )
        canonical = "\n".join(
            [
                request.method,
                urllib.parse.quote(request.path, safe="/-_.~"),
                query,
                "".join(f"{n}:{trim(request.headers[n])}\n" for n in names),
                ";".join(names),
                hashlib.sha256(request.body).hexdigest(),
            ]
        )
        scope = f"{stamp[:8]}/{self.region}/{self.service}/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        key = f"AWS4{self.secret_key}".encode()
        for part in (stamp[:8], self.region, self.service, "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


# --- the server ---------------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, imitation: Imitation, tls: ssl.SSLContext | None) -> None:
        self.imitation = imitation
        self.tls = tls
        super().__init__(("127.0.0.1", 0), _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Over https, the handshake runs on the request's own thread, so a client that stalls in it holds only
        that thread (a client that refuses the certificate ends it at once)."""
        if self.tls is not None:
            try:
                request = self.tls.wrap_socket(request, server_side=True)
            except (OSError, ssl.SSLError):
                return
        super().finish_request(request, client_address)

    def handle_error(self, request: object, client_address: object) -> None:
        """A client hanging up mid-answer is not worth a traceback in the test output."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "imitation/1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:
        """Silent: the test owns stderr."""

    def _dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(length, _MAX_REQUEST_BODY)) if length > 0 else b""
        path, _, query = self.path.partition("?")
        request = Incoming(
            method=self.command,
            path=path,
            query=query,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        answer = cast(_Server, self.server).imitation._answer(request)
        payload = answer.encoded()
        self.send_response(answer.status)
        if payload or answer.status != 204:
            self.send_header("Content-Type", answer.content_type)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(payload)

    do_GET = _dispatch
    do_POST = _dispatch
    do_DELETE = _dispatch


class Imitation:
    """The provider; a context manager so the server never outlives the test."""

    def __init__(self, profile: Profile, *, tls: tuple[Path, Path] | None = None) -> None:
        """`tls`: a certificate and its key, to answer over https (a cluster's API server signed by its own CA)."""
        self.profile = profile
        self._tls = tls
        self._lock = threading.Lock()
        self._scripts: dict[str, list[Answer]] = {}
        self._files: dict[str, tuple[bytes, str, bool]] = {}
        self._actions: dict[tuple[str, str], Answer] = {}
        self._seen: list[Seen] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Imitation:
        context = None
        if self._tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self._tls)
        self._server = _Server(self, context)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join()

    @property
    def url(self) -> str:
        assert self._server is not None, "the imitation is not running"
        host, port = self._server.server_address[:2]
        return f"{'https' if self._tls else 'http'}://{host!s}:{port}"

    @property
    def port(self) -> int:
        assert self._server is not None, "the imitation is not running"
        return int(self._server.server_address[1])

    def script(self, job: str, *answers: Answer) -> None:
        """The job's lifecycle: each status request takes the next answer; the last one repeats."""
        if not answers:
            raise ValueError("a script needs at least one answer")
        with self._lock:
            self._scripts[self.profile.job_key(job)] = list(answers)

    def file(
        self, path: str, content: bytes, *, content_type: str = "application/octet-stream", credential: bool = True
    ) -> None:
        """A download at `path` (exact); `credential` says whether the provider requires the credential there."""
        with self._lock:
            self._files[path] = (content, content_type, credential)

    def action(self, method: str, path: str, answer: Answer) -> None:
        """What a request that is neither a status poll nor a download is answered (a cancel: DELETE, POST)."""
        with self._lock:
            self._actions[(method, path)] = answer

    def actions(self, method: str) -> list[Seen]:
        with self._lock:
            return [s for s in self._seen if s.job is None and s.method == method and s.method != "GET"]

    def seen(self, job: str | None = None) -> list[Seen]:
        key = None if job is None else self.profile.job_key(job)
        with self._lock:
            return [s for s in self._seen if key is None or s.job == key]

    def status_requests(self, job: str) -> int:
        return len(self.seen(job))

    def downloads(self, path: str) -> list[Seen]:
        with self._lock:
            return [s for s in self._seen if s.job is None and s.path == path]

    def _answer(self, request: Incoming) -> Answer:
        job = self.profile.route(request)
        with self._lock:
            refusal = self.profile.check(request) if self.profile.check is not None else None
            if job is None:
                answer = self._download(request, refusal)
            elif refusal is not None:
                answer = refusal
            elif job in self._scripts:
                script = self._scripts[job]
                answer = script.pop(0) if len(script) > 1 else script[0]
            else:
                answer = self.profile.not_found(job)
            answer = Answer(answer.status, answer.body, {**self.profile.headers, **answer.headers}, answer.content_type)
            self._seen.append(
                Seen(
                    method=request.method,
                    path=request.path,
                    query=request.query,
                    headers=dict(request.headers),
                    body=request.body,
                    job=job,
                    status=answer.status,
                    credential_ok=refusal is None,
                    at=time.time(),
                )
            )
            return answer

    def _download(self, request: Incoming, refusal: Answer | None) -> Answer:
        action = self._actions.get((request.method, request.path))
        if action is not None:
            return refusal if refusal is not None else action
        found = self._files.get(request.path)
        if request.method != "GET" or found is None:
            return self.profile.not_found(request.path)
        content, content_type, needs_credential = found
        if needs_credential and refusal is not None:
            return refusal
        return Answer(200, content, {}, content_type)


def free_port() -> int:
    """A loopback port nobody listens on (for a provider that is down)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the providers -------------------------------------------------------------------------------------
# Routes and error bodies; each comment names the page or SDK file the shape comes from.


def _path_route(method: str, pattern: str) -> Route:
    compiled = re.compile(pattern)

    def route(request: Incoming) -> str | None:
        match = compiled.fullmatch(request.path)
        if request.method != method or match is None:
            return None
        return urllib.parse.unquote(match.group("job"))

    return route


def openai(token: str) -> Profile:
    """openai-python `_exceptions.py` / API reference "Error codes": `{"error": {message, type, param, code}}`."""

    def error(status: int, message: str, type_: str, code: str | None) -> Answer:
        return Answer(status, {"error": {"message": message, "type": type_, "param": None, "code": code}})

    return Profile(
        name="openai",
        route=_path_route("GET", r"/v1/batches/(?P<job>[^/]+)"),
        check=bearer(token, error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")),
        not_found=lambda job: error(404, f"No batch found with id '{job}'.", "invalid_request_error", None),
    )


def openai_rate_limited(retry_after_ms: int) -> Answer:
    """openai-python `_base_client._parse_retry_after_header`: retry-after-ms first, then retry-after."""
    return Answer(
        429,
        {
            "error": {
                "message": "Rate limit reached for requests",
                "type": "requests",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        },
        {"retry-after-ms": str(retry_after_ms), "retry-after": str(max(1, retry_after_ms // 1000))},
    )


def openai_insufficient_quota() -> Answer:
    """OpenAI "Error codes" guide: 429 "You exceeded your current quota": billing, not a transient limit."""
    message = (
        "You exceeded your current quota, please check your plan and billing details. For more information on"
        " this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."
    )
    return Answer(
        429, {"error": {"message": message, "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}}
    )


def anthropic_error(status: int, type_: str, message: str) -> Answer:
    """anthropic-sdk-python `types/shared/error_response.py`:
    `{"type": "error", "error": {type, message}, request_id}`."""
    return Answer(
        status, {"type": "error", "error": {"type": type_, "message": message}, "request_id": "req_imitation"}
    )


def anthropic(key: str) -> Profile:
    def check(request: Incoming) -> Answer | None:
        if request.headers.get("anthropic-version") != "2023-06-01":
            return anthropic_error(400, "invalid_request_error", "anthropic-version: header is required")
        refused = header_equals("x-api-key", key, anthropic_error(401, "authentication_error", "invalid x-api-key"))
        return refused(request)

    return Profile(
        name="anthropic",
        route=_path_route("GET", r"/v1/messages/batches/(?P<job>[^/]+)"),
        check=check,
        not_found=lambda job: anthropic_error(404, "not_found_error", "Not found"),
    )


def google_error(code: int, status: str, message: str, details: list[JSONValue] | None = None) -> Answer:
    """Google API error model (cloud.google.com/apis/design/errors): `{"error": {code, message, status, details}}`."""
    return Answer(code, {"error": {"code": code, "message": message, "status": status, "details": details or []}})


def google(token: str, *, version: str = "v1") -> Profile:
    return Profile(
        name="google",
        # api-core operations_v1 REST transport: `/v1/{name=**/operations/*}`, the name's slashes kept; an API of
        # another version serves its operations under its own (Cloud Run Admin v2: `v2/{+name}`).
        route=_path_route("GET", rf"/{re.escape(version)}/(?P<job>(?:[^/]+/)*operations/[^/]+)"),
        check=bearer(
            token,
            google_error(
                401, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 access token."
            ),
        ),
        not_found=lambda job: google_error(404, "NOT_FOUND", f"Operation {job} not found."),
    )


def github_error(status: int, message: str) -> Answer:
    """GitHub REST error body: `{"message", "documentation_url", "status"}`."""
    return Answer(
        status, {"message": message, "documentation_url": "https://docs.github.com/rest", "status": str(status)}
    )


def github(token: str, *, repo: str) -> Profile:
    base = bearer(token, github_error(401, "Bad credentials"))

    def check(request: Incoming) -> Answer | None:
        # "Requests with no User-Agent header will be rejected" (REST docs, "Getting started").
        if not request.headers.get("user-agent"):
            return github_error(
                403, "Request forbidden by administrative rules. Please make sure your request has a User-Agent header"
            )
        return base(request)

    return Profile(
        name="github",
        route=_path_route("GET", rf"/repos/{re.escape(repo)}/actions/runs/(?P<job>[^/]+)"),
        check=check,
        not_found=lambda job: github_error(404, "Not Found"),
        headers={"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "4999", "x-ratelimit-resource": "core"},
    )


def github_rate_limited(reset_epoch: int, *, status: int = 403) -> Answer:
    """ "Troubleshooting the REST API": 403 or 429 with x-ratelimit-remaining 0; wait until x-ratelimit-reset."""
    return Answer(
        status,
        {
            "message": "API rate limit exceeded for user ID 1.",
            "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
        },
        {"x-ratelimit-remaining": "0", "x-ratelimit-used": "5000", "x-ratelimit-reset": str(reset_epoch)},
    )


def replicate(token: str) -> Profile:
    """replicate-python `client.py`; 401 and 404 in the problem-details style the API answers with."""
    return Profile(
        name="replicate",
        route=_path_route("GET", r"/v1/predictions/(?P<job>[^/]+)"),
        check=bearer(
            token,
            Answer(
                401,
                {"title": "Unauthenticated", "detail": "You did not pass a valid authentication token", "status": 401},
            ),
        ),
        not_found=lambda job: Answer(404, {"detail": "Not found."}),
    )


def azure(key: str) -> Profile:
    """Document Intelligence / Cognitive Services: the key in Ocp-Apim-Subscription-Key, api-version required."""
    refused = header_equals(
        "ocp-apim-subscription-key",
        key,
        Answer(
            401,
            {
                "error": {
                    "code": "401",
                    "message": "Access denied due to invalid subscription key or wrong API endpoint. Make sure to"
                    " provide a valid key for an active subscription and use a correct regional API endpoint for"
                    " your resource.",
                }
            },
        ),
    )

    def route(request: Incoming) -> str | None:
        path = request.path.lower()  # ASP.NET routing: a path is read without regard to case
        # Document Intelligence analyzeResults, ARM and Speech operations, Translator batches, Language jobs.
        monitors = ("/analyzeresults/", "/operations/", "/document/batches/", "/analyze-text/jobs/")
        if request.method != "GET" or not any(monitor in path for monitor in monitors):
            return None
        return path

    def check(request: Incoming) -> Answer | None:
        if "api-version=" not in request.query:
            return Answer(404, {"error": {"code": "404", "message": "Resource not found"}})
        return refused(request)

    return Profile(
        name="azure",
        route=route,
        check=check,
        not_found=lambda job: Answer(404, {"error": {"code": "NotFound", "message": "Resource not found."}}),
        job_key=str.lower,
    )


def aws_error(status: int, type_: str, message: str, content_type: str = "application/x-amz-json-1.1") -> Answer:
    """botocore `parsers.py` (JSON protocol): `{"__type", "message"}`, in the protocol's content type."""
    return Answer(status, {"__type": type_, "message": message}, {}, content_type)


def aws_throttled(*, namespaced: bool = False) -> Answer:
    prefix = "com.amazonaws.textract#" if namespaced else ""
    return aws_error(400, f"{prefix}ThrottlingException", "Rate exceeded")


@dataclass(frozen=True)
class AwsJson:
    """One operation of an AWS JSON protocol service (botocore's service-2.json): POST / with X-Amz-Target, the job
    named by one member of the JSON body, SigV4 for the service's signing name; errors in the protocol's type."""

    service: str
    target: str
    member: str
    content_type: str

    def profile(
        self,
        access_key: str,
        secret_key: str,
        region: str,
        session_token: str | None,
        not_found: Callable[[str], Answer],
    ) -> Profile:
        def route(request: Incoming) -> str | None:
            if request.method != "POST" or request.path != "/":
                return None
            if request.headers.get("x-amz-target") != self.target:
                return "<unknown operation>"
            if request.headers.get("content-type") != self.content_type:
                return f"<not {self.content_type}>"
            try:
                body = json.loads(request.body)
            except ValueError:
                return "<not json>"
            job = body.get(self.member) if isinstance(body, dict) else None
            return job if isinstance(job, str) else f"<no {self.member}>"

        signer = SigV4(
            access_key,
            secret_key,
            region,
            self.service,
            session_token,
            refusal=lambda kind, message: aws_error(
                400 if kind != "MissingAuthenticationTokenException" else 403, kind, message, self.content_type
            ),
            must_sign=("host", "x-amz-date", "x-amz-target"),
        )
        return Profile(name=self.service, route=route, check=signer, not_found=not_found)


def textract(access_key: str, secret_key: str, *, region: str, session_token: str | None = None) -> Profile:
    """Textract JSON 1.1 protocol (botocore `data/textract/2018-06-27/service-2.json`): POST / + X-Amz-Target."""
    operation = AwsJson("textract", "Textract.GetDocumentAnalysis", "JobId", "application/x-amz-json-1.1")
    return operation.profile(
        access_key,
        secret_key,
        region,
        session_token,
        lambda job: aws_error(400, "InvalidJobIdException", "An invalid job identifier was passed."),
    )


def delivery() -> Profile:
    """A foreign file origin (replicate.delivery, github.com): anonymous downloads, never a status request."""
    return Profile(
        name="delivery",
        route=lambda request: None,
        check=None,
        not_found=lambda path: Answer(404, {"detail": "Not found"}),
    )


def gitlab_error(status: int, message: str) -> Answer:
    """GitLab's REST error body (lib/api/helpers.rb `render_api_error!`): `{"message": "<status> <reason>"}`."""
    return Answer(status, {"message": message})


def gitlab(token: str, *, project: str) -> Profile:
    """GitLab REST v4 (docs.gitlab.com/api/pipelines): the token in PRIVATE-TOKEN, `GET .../pipelines/:id`."""
    return Profile(
        name="gitlab",
        route=_path_route("GET", rf"/api/v4/projects/{re.escape(project)}/pipelines/(?P<job>[^/]+)"),
        check=header_equals("private-token", token, gitlab_error(401, "401 Unauthorized")),
        not_found=lambda job: gitlab_error(404, "404 Not found"),
    )
