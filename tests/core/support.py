"""Builders shared by the core tests: contracts, responses and a poll helper, all on an explicit clock."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pollwarden.core import (
    Contract,
    Decision,
    FailureKind,
    OperationRecord,
    Response,
    TransportFailure,
    decide,
    new_record,
    observe,
    parse_contract,
    reserve,
)
from pollwarden.core.observe import Exchange

T0 = datetime(2025, 4, 18, 10, 20, 0, tzinfo=UTC)

EXAMPLE_CONTRACT = """\
name = "exports"                                  # required
status_url = "http://127.0.0.1:8080/jobs/{job_id}" # required; {job_id} is URL-quoted
timeout = "5s"                                    # one status request, connect+read; default 10s
safe_status = true                                # R22

[auth]                                            # optional
header = "Authorization"                          # default
scheme = "Bearer"                                 # default; "" sends the bare secret
secret_env = "EXPORTS_TOKEN"                      # required in [auth]

[states]                                          # required; every listed value is matched exactly
pending = ["queued", "running"]
success = ["succeeded"]
failure = ["failed"]
cancelled = ["cancelled"]                         # optional
expired = ["expired"]                             # optional

[fields]                                          # dotted paths into the JSON body
state = "state"                                   # required
result = "result_url"                             # when set, success requires a non-empty string here
error = "error"                                   # provider error kept on failure
expires_at = "expires_at"                         # RFC 3339; pending after it -> contradictory_status
poll_after_seconds = "poll_after_seconds"         # provider hint, validated (R9)
next_check_at = "next_check_at"                   # provider hint, RFC 3339, validated (R9)

[schedule]                                        # all optional
base_delay = "5s"
max_delay = "120s"
jitter = "bounded"                                # "bounded" = uniform(50%..100%); "full" = uniform(0..raw)
first_check = "0s"                                # delay before the first poll (R8)

[limits]                                          # defaults for new operations; all optional
deadline = "40m"
max_requests = 12
max_transport_failures = 3
max_rate_limited = 3                              # consecutive 429s before rate_limited

[not_found]                                       # optional (R26)
grace = "30s"                                     # a 404 this soon after the operation started means "not visible yet"
"""


def contract_text(
    *,
    base_delay: str = "5s",
    max_delay: str = "120s",
    jitter: str = "bounded",
    first_check: str = "0s",
    deadline: str = "40m",
    max_requests: int = 12,
    max_transport_failures: int = 3,
    max_rate_limited: int = 3,
    grace: str | None = None,
    result: str | None = "result_url",
    state_field: str = "state",
    request_id_header: str | None = None,
    needs_person: bool = False,
) -> str:
    lines = [
        'name = "exports"',
        'status_url = "https://provider.example/v1/jobs/{job_id}"',
    ]
    if request_id_header is not None:
        lines.append(f'request_id_header = "{request_id_header}"')
    lines += [
        "[states]",
        'pending = ["queued", "running"]',
        'success = ["succeeded"]',
        'failure = ["failed"]',
        'cancelled = ["cancelled"]',
        'expired = ["expired"]',
        *(['needs_person = ["action_required"]'] if needs_person else []),
        "[fields]",
        f'state = "{state_field}"',
        'error = "error"',
        'expires_at = "expires_at"',
        'poll_after_seconds = "poll_after_seconds"',
        'next_check_at = "next_check_at"',
    ]
    if result is not None:
        lines.append(f'result = "{result}"')
    lines += [
        "[schedule]",
        f'base_delay = "{base_delay}"',
        f'max_delay = "{max_delay}"',
        f'jitter = "{jitter}"',
        f'first_check = "{first_check}"',
        "[limits]",
        f'deadline = "{deadline}"',
        f"max_requests = {max_requests}",
        f"max_transport_failures = {max_transport_failures}",
        f"max_rate_limited = {max_rate_limited}",
    ]
    if grace is not None:
        lines += ["[not_found]", f'grace = "{grace}"']
    return "\n".join(lines) + "\n"


def make_contract(**options: Any) -> Contract:
    return parse_contract(contract_text(**options), source="test.toml")


def make_record(contract: Contract | None = None, *, now: datetime = T0, **overrides: Any) -> OperationRecord:
    return new_record(
        contract if contract is not None else make_contract(),
        operation_id="report-export-2025-04-18-01",
        job_id="exp_71c",
        now=now,
        **overrides,
    )


def body(state: Any = "running", **fields: Any) -> bytes:
    return json.dumps({"state": state, **fields}).encode()


def response(
    payload: bytes | None = None,
    *,
    status: int = 200,
    at: datetime = T0,
    headers: Mapping[str, str] | None = None,
    truncated: bool = False,
) -> Response:
    return Response(
        status=status,
        headers=dict(headers or {}),
        body=body() if payload is None else payload,
        sent_at=at,
        received_at=at,
        truncated=truncated,
    )


def failure(kind: FailureKind, *, at: datetime = T0) -> TransportFailure:
    return TransportFailure(kind=kind, message=f"simulated {kind.value}", sent_at=at, failed_at=at)


def poll(
    contract: Contract,
    record: OperationRecord,
    exchange: Exchange,
    *,
    u: float = 0.5,
) -> Decision:
    """One complete slot as a driver does it: reserve at the send time, observe, decide at the receive time."""
    sent = exchange.sent_at
    received = exchange.received_at if isinstance(exchange, Response) else exchange.failed_at
    reserved = reserve(record, sent)
    return decide(reserved, observe(contract, exchange), received, u)
