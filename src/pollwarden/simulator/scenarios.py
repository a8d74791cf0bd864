"""The builtin scenarios a job id names (`happy`, `happy-42`), and the contract that reads their bodies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, TypedDict, Unpack

from .script import Step


def _state(state: str, **extra: Any) -> dict[str, Any]:
    return {"job_id": "{job_id}", "state": state, **extra}


_SUCCEEDED = Step(body=_state("succeeded", result_url="/results/{job_id}"))
_RUNNING = Step(body=_state("running"))


@cache
def _huge_body() -> bytes:
    """The `huge` scenario's 5 MB body, built when first served: every command's parser imports this module (for
    `simulate --help`), and none of them should carry 5 MB (10 at the peak of building it) for that."""
    return b'{"state": "running", "padding": "' + b"x" * (5 * 1024 * 1024) + b'"}'


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
        (Step(body=_huge_body, headers={"Content-Type": "application/json"}),),
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


def scenario_for(job_id: str) -> str | None:
    """The builtin scenario a job id names (`happy`, `happy-42`); the longest name wins."""
    matches = [name for name in SCENARIOS if job_id == name or job_id.startswith(name + "-")]
    return max(matches, key=len) if matches else None


RESERVATION_HEADER = '\n[headers]\nX-Pollwarden-Reservation = "{reservation}"\n'
"""A `[headers]` table that asks for each status request's reservation number (docs/contracts.md)."""

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


class ContractShape(TypedDict, total=False):
    """What `contract_text` may change of its contract (the defaults in brackets)."""

    name: str  # ("exports")
    timeout: str  # ("2s")
    base_delay: str  # ("100ms")
    max_delay: str  # ("400ms")
    deadline: str  # ("1m")
    max_requests: int  # (12)
    max_transport_failures: int  # (3)
    max_rate_limited: int  # (3)
    secret_env: str | None  # (None: no [auth])
    extra: str  # (""), TOML appended as it is
    reservation_header: bool  # (False)


def contract_text(base_url: str, **shape: Unpack[ContractShape]) -> str:
    """The contract that reads this simulator's scenario bodies: the demo, the tests and the benchmarks use it.

    `reservation_header`: its `[headers]` ask for each status request's reservation number in
    `X-Pollwarden-Reservation` (pollwarden sends nothing of its own otherwise), so a provider can tell a slot
    polled twice; the simulator itself counts requests per job (`Simulator.request_count`)."""
    if unknown := sorted(set(shape) - ContractShape.__optional_keys__):  # a caller typed as Any misspelt one
        raise TypeError(f"contract_text() got an unexpected keyword argument {unknown[0]!r}")
    secret_env = shape.get("secret_env")
    auth = f'\n[auth]\nsecret_env = "{secret_env}"\n' if secret_env else ""
    extra = (RESERVATION_HEADER if shape.get("reservation_header", False) else "") + shape.get("extra", "")
    return _CONTRACT.format(
        name=shape.get("name", "exports"),
        base=base_url,
        timeout=shape.get("timeout", "2s"),
        base_delay=shape.get("base_delay", "100ms"),
        max_delay=shape.get("max_delay", "400ms"),
        deadline=shape.get("deadline", "1m"),
        max_requests=shape.get("max_requests", 12),
        max_transport_failures=shape.get("max_transport_failures", 3),
        max_rate_limited=shape.get("max_rate_limited", 3),
        auth=auth,
        extra=extra,
    )
