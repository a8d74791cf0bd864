"""The hostile answers, each with what must come of it; the drivers' tests run every case through one table.

An outcome is "succeeded", a stop reason, or "refused" (exit 2 / a named tool error, nothing sent). A case
lists every outcome that is a correct reading of its answer: a 2,000-header answer may be understood or
counted as a transport failure, but a duplicated `state` key may never be a success.
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .server import Answer, Pause, Request, Script, Send, Trickle, answer, http, in_turn

TIMEOUT = "1s"
# A bounded case's script plays for 20 s unless the client goes away, and the 1 s contract timeout must make it
# go: the check is that the server saw the client leave before the script was over (`Request.client_left`), never
# how fast, so a loaded machine cannot fail it while a per-read timeout (each byte restarts it) always does.
SCRIPT_SECONDS = 20.0  # well inside COMMAND_TIMEOUT, so a client that sits it out is seen doing so
MAX_BODY_BYTES = 65536
MAX_REQUESTS = 3
MAX_TRANSPORT_FAILURES = 2
# A decoded gzip bomb must not be held in memory: the whole `watch` process stays far below the bomb's size.
MAX_RSS_MB = 400

TRANSPORT = frozenset({"ambiguous_delivery", "provider_failure"})
_PENDING_OR_INVALID = frozenset({"invalid_response", "request_budget_exhausted"})
_NOT_SUCCESS = TRANSPORT | _PENDING_OR_INVALID


@dataclass(frozen=True)
class Secret:
    env: str
    value: str
    scheme: str

    def forms(self) -> dict[str, bytes]:
        """Every spelling of the credential that must appear nowhere, by name (for the failure message)."""
        bare = self.value.strip()
        forms = {
            "raw": self.value,
            "stripped": bare,
            "with scheme": f"{self.scheme} {bare}",
            "base64": base64.b64encode(bare.encode()).decode(),
        }
        if self.scheme == "Basic":
            decoded = base64.b64decode(bare).decode()
            forms["base64-decoded"] = decoded
            forms["password"] = decoded.partition(":")[2]
        return {name: value.encode() for name, value in forms.items()}


@dataclass(frozen=True)
class Case:
    name: str
    script: Script
    outcomes: frozenset[str]
    bounded: bool = False  # the script outlasts the timeout: the client must leave every request before its end
    terminal: bool = False  # provider text with control characters: check what a person reads
    secret: Secret | None = None
    main: bool = False  # also through the worker on PostgreSQL
    bomb: bool = False  # memory bound on the `watch` process

    @property
    def job(self) -> str:
        return f"h-{self.name}"

    def __str__(self) -> str:
        return self.name

    def prime(self) -> None:
        """Build the answer once now, so its cost never eats into the client's timeout."""
        self.script(Request(job_id=self.job, method="GET", path=f"/jobs/{self.job}", headers={}, arrived_at=0.0), 0)


def contract_text(base_url: str, *, name: str = "hostile", secret: Secret | None = None) -> str:
    """Short timeout, small cap, small budgets, short delays: every case ends in a few seconds."""
    auth = f'[auth]\nsecret_env = "{secret.env}"\nscheme = "{secret.scheme}"\n' if secret else ""
    return f"""\
name = "{name}"
status_url = "{base_url}/jobs/{{job_id}}"
timeout = "{TIMEOUT}"
safe_status = true
max_body_bytes = {MAX_BODY_BYTES}
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
poll_after_seconds = "poll_after_seconds"

[schedule]
base_delay = "50ms"
max_delay = "100ms"
learn = false  # hostile answers against a 3-request budget, not the learnt schedule (tests/engine/test_learning.py)

[headers]
X-Pollwarden-Reservation = "{{reservation}}"

[limits]
deadline = "30s"
max_requests = {MAX_REQUESTS}
max_transport_failures = {MAX_TRANSPORT_FAILURES}
max_rate_limited = 2
"""


def write_contract(directory: Path, base_url: str, *, name: str = "hostile", secret: Secret | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.toml"
    path.write_text(contract_text(base_url, name=name, secret=secret), encoding="utf-8")
    return path


def good_script(job_id: str) -> Script:
    """The well-behaved job beside each hostile one: pending once, then a validated success."""
    done = json.dumps({"state": "succeeded", "result_url": f"/results/{job_id}"}).encode()
    return in_turn(answer(http(b'{"state":"running"}')), answer(http(done)))


def exit_code_for(outcome: str) -> int:
    if outcome == "succeeded":
        return 0
    if outcome == "refused":
        return 2
    return 3 if outcome in {"job_failed", "job_cancelled", "job_expired"} else 4


# -- bodies ----------------------------------------------------------------------------------------------

_SUCCESS = b'{"state":"succeeded","result_url":"/results/x"}'
# The forged answer left in the pipe names itself, so a job that reports it was fed another job's leftovers.
SMUGGLED_RESULT = "/results/smuggled"


def _once(data: bytes) -> Script:
    return in_turn(answer(data))


def _gzip_header() -> bytes:
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


@functools.cache
def _gzip_of_zeros(total_mb: int) -> bytes:
    """A valid gzip member of `total_mb` MiB of zeros in about a KiB per MiB, without ever holding the zeros:
    one full-flushed deflate block of 1 MiB, repeated (each repetition refers only to itself)."""
    mib = b"\0" * (1 << 20)
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = squeeze.compress(mib) + squeeze.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(total_mb):
        crc = zlib.crc32(mib, crc)
    final = zlib.compressobj(9, zlib.DEFLATED, -15).flush()  # the empty last block
    trailer = struct.pack("<II", crc, (total_mb << 20) & 0xFFFFFFFF)
    return _gzip_header() + block * total_mb + final + trailer


@functools.cache
def _nested_bomb() -> Answer:
    """`Content-Encoding: gzip, gzip`, which a client decodes twice: ~2.5 KB on the wire, 1 GiB decoded."""
    return answer(http(gzip.compress(_gzip_of_zeros(1024), 9), headers=[("Content-Encoding", "gzip, gzip")]))


@functools.cache
def _bomb() -> Answer:
    padded = b'{"state":"running","pad":"' + b" " * (10 << 20) + b'"}'  # 10 MiB decoded, ~10 KiB sent
    return answer(http(gzip.compress(padded, 9), headers=[("Content-Encoding", "gzip")]))


def _lazy(build: Callable[[], Answer]) -> Script:
    """For answers that take a second to build: `Case.prime` builds them before a client is waiting."""
    return lambda request, n: build()


def _chunked(body: bytes, size: int) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return head + b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces) + b"0\r\n\r\n"


def _slow_head() -> Script:
    """The status line and headers a byte at a time, 20 s for the head: each byte would restart a read timeout."""
    whole = http(_SUCCESS)
    head, _, body = whole.partition(b"\r\n\r\n")
    head += b"\r\n\r\n"
    return in_turn(Answer((Trickle(head, every=SCRIPT_SECONDS / len(head)), Send(body))))


def _slow_body() -> Script:
    body = b'{"state":"succeeded","result_url":"/results/x","pad":"' + b"." * 150 + b'"}'
    whole = http(body)
    head = whole[: len(whole) - len(body)]
    return in_turn(Answer((Send(head), Trickle(body, every=SCRIPT_SECONDS / len(body)))))


def _informational_storm() -> Script:
    """`100 Continue` after `100 Continue` for 20 s, then a success: the storm must not outlast the timeout."""
    storm = b"HTTP/1.1 100 Continue\r\n\r\n" * int(SCRIPT_SECONDS / 0.025)
    return in_turn(Answer((Trickle(storm, every=0.025, size=25), Send(http(_SUCCESS)))))


def _cut_short() -> Script:
    return in_turn(Answer((Send(http(_SUCCESS, length=len(_SUCCESS) + 100)), Pause(0.05))))


def _smuggled_success() -> Script:
    """Content-Length covers a pending body; a forged success follows in the same pipe, left open."""
    pending = http(b'{"state":"running"}', close=False)
    forged = json.dumps({"state": "succeeded", "result_url": SMUGGLED_RESULT}).encode()
    return in_turn(answer(pending + http(forged, close=False), keep_open=True))


def _nested(depth: int) -> bytes:
    return b'{"state":"running","poll_after_seconds":' + b"[" * depth + b"1" + b"]" * depth + b"}"


def _echo() -> Script:
    """A provider that echoes what it received: the credential in Retry-After, X-Request-Id, the error, the state."""

    def script(request: Request, n: int) -> Answer:
        header = request.headers.get("authorization", "")
        token = header.partition(" ")[2]
        try:
            decoded = base64.b64decode(token, validate=True).decode()
        except ValueError:
            decoded = token
        echoed = {"auth": header, "token": token, "decoded": decoded, "b64": base64.b64encode(token.encode()).decode()}
        if n == 0:
            body = json.dumps({"error": echoed}).encode()
            headers = [("Retry-After", token), ("X-Request-Id", header)]
            return answer(http(body, status=503, reason="Unavailable", headers=headers))
        if n == 1:
            body = json.dumps({"state": "running", "error": echoed}).encode()
            return answer(http(body, headers=[("X-Request-Id", token), ("Retry-After", decoded)]))
        return answer(http(json.dumps({"state": token or "?"}).encode(), headers=[("X-Request-Id", decoded)]))

    return script


def _many_headers() -> bytes:
    return http(_SUCCESS, headers=[(f"X-Filler-{n}", "v") for n in range(2000)])


_CONTROL_STATE = "\x1b[2J\x07running\r\nStopped because: job_succeeded\rOK\x00\x1b]0;pwned\x07"
_CONTROL_ERROR = "\x1b]0;pwned\x07\r\nDecision: approved by alice\x1b[2J\r\x1b[31m"


def _tolerant_many() -> frozenset[str]:
    return frozenset({"succeeded", "invalid_response"}) | TRANSPORT


SECRETS = {
    "bearer": Secret("PW_HOSTILE_BEARER", "tok-SECRET-123", "Bearer"),
    "newline": Secret("PW_HOSTILE_NEWLINE", "tok-SECRET-NL-123\n", "Bearer"),  # as a mounted secret reads
    "basic": Secret("PW_HOSTILE_BASIC", base64.b64encode(b"alice:pw-SECRET-456").decode(), "Basic"),
}


def _secret_case(kind: str) -> Case:
    outcomes = {"unknown_state"}
    if kind == "newline":  # stripping one trailing newline or refusing it with a clear message are both fine
        outcomes |= {"refused", "integration_failure"}
    return Case(f"secret_{kind}", _echo(), frozenset(outcomes), secret=SECRETS[kind], main=True)


CASES: tuple[Case, ...] = (
    Case("lone_surrogate", _once(http(rb'{"state":"\ud800"}')), frozenset({"invalid_response", "unknown_state"}),
         main=True),
    Case("lone_surrogate_error", _once(http(rb'{"state":"failed","error":{"message":"\udfff"}}')),
         frozenset({"job_failed", "invalid_response"})),
    Case("deep_nesting", _once(http(_nested(1000))), _PENDING_OR_INVALID, main=True),
    Case("deep_nesting_900", _once(http(_nested(900))), _PENDING_OR_INVALID),
    Case("duplicate_keys", _once(http(b'{"state":"running","state":"succeeded","result_url":"/x"}')),
         frozenset({"invalid_response"}), main=True),
    Case("gzip", _once(http(gzip.compress(_SUCCESS), headers=[("Content-Encoding", "gzip")])),
         frozenset({"succeeded"}), main=True),
    Case("gzip_bomb", _lazy(_bomb), frozenset({"invalid_response"}), bomb=True),
    Case("gzip_bomb_nested", _lazy(_nested_bomb), frozenset({"invalid_response"}), bomb=True, main=True),
    Case("slow_headers", _slow_head(), TRANSPORT, bounded=True, main=True),
    Case("slow_body", _slow_body(), TRANSPORT, bounded=True),
    Case("informational_storm", _informational_storm(), TRANSPORT, bounded=True),
    Case("body_too_long", _once(http(_SUCCESS[:-1] + b',"pad":"' + b"x" * 200_000 + b'"}')),
         frozenset({"invalid_response"})),
    Case("body_too_long_chunked", _once(_chunked(_SUCCESS[:-1] + b',"pad":"' + b"x" * 200_000 + b'"}', 4096)),
         frozenset({"invalid_response"})),
    Case("body_cut_short", _cut_short(), TRANSPORT, main=True),
    Case("content_length_smaller", _smuggled_success(), _NOT_SUCCESS, main=True),
    Case("invalid_utf8", _once(http(b'{"state":"running\xff\xfe"}')), frozenset({"invalid_response"})),
    Case("utf8_bom", _once(http(b"\xef\xbb\xbf" + _SUCCESS)), frozenset({"succeeded", "invalid_response"})),
    Case("top_level_array", _once(http(b"[" + _SUCCESS + b"]")), frozenset({"invalid_response"})),
    Case("nan_infinity", _once(http(b'{"state":"running","poll_after_seconds":NaN,"x":Infinity,"y":-Infinity}')),
         _PENDING_OR_INVALID),
    Case("huge_float", _once(http(b'{"state":"running","poll_after_seconds":1e999}')), _PENDING_OR_INVALID),
    Case("huge_int", _once(http(b'{"state":"running","poll_after_seconds":' + b"7" * 5000 + b"}")),
         _PENDING_OR_INVALID),
    Case("many_headers", _once(_many_headers()), _tolerant_many()),
    Case("huge_header_line", _once(http(_SUCCESS, headers=[("X-Big", "b" * 100_000)])), _tolerant_many()),
    Case("no_status_line", in_turn(Answer(())), TRANSPORT),
    Case("garbage_status_line", _once(b"HTTP/1.1 OK-ish \x00\xff garbage\r\n\r\n" + _SUCCESS), TRANSPORT),
    Case("http09", _once(_SUCCESS), TRANSPORT),
    Case("control_state", _once(http(json.dumps({"state": _CONTROL_STATE}).encode())),
         frozenset({"unknown_state", "invalid_response"}), terminal=True, main=True),
    Case("control_error", _once(http(json.dumps({"state": "failed", "error": _CONTROL_ERROR}).encode())),
         frozenset({"job_failed"}), terminal=True),
    _secret_case("bearer"),
    _secret_case("newline"),
    _secret_case("basic"),
)  # fmt: skip

MAIN_CASES = tuple(case for case in CASES if case.main)
