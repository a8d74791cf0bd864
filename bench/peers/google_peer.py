"""google-api-core's long-running operation future over HTTP/JSON: `operation.from_http_json(...).result(timeout)`.

Docs: https://googleapis.dev/python/google-api-core/latest/operation.html (`from_http_json(operation,
api_request, result_type)`; `PollingFuture.result(timeout=X)` is what the docstring tells users to call).
Polling uses the library's `DEFAULT_POLLING` (initial 1 s, x1.5, max 20 s, full jitter); the polling RPC is
retried with the library's `DEFAULT_RETRY` for LRO RPCs (429, 500, 502, 503; initial 1 s, x2, max 60 s,
120 s) passed as `result(retry=...)`, which is what a generated client's default retry config does.

The provider here is not a Google API, so `api_request(method, path)` is the shim: it GETs the job's status
URL, raises `google.api_core.exceptions.from_http_status(...)` for error answers (as google-cloud-core's
`Connection.api_request` does) and maps the body to the `google.longrunning.Operation` JSON shape: `done` when
the state is terminal, `response` (a `Struct` of the body) on success, `error` on failed/cancelled/expired.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

from google.api_core import exceptions, operation
from google.api_core.future import polling
from google.protobuf import struct_pb2

from .common import FAILURE, TERMINAL, Counter, PeerConfig, PeerResult, body_state, counting_client, describe

_CODES = {"failed": 2, "cancelled": 1, "expired": 4}  # google.rpc.Code UNKNOWN, CANCELLED, DEADLINE_EXCEEDED


def as_operation(job_id: str, body: Any) -> dict[str, Any]:
    state = body_state(body)
    op: dict[str, Any] = {"name": job_id, "done": state in TERMINAL}
    if state == "succeeded":
        op["response"] = {"@type": "type.googleapis.com/google.protobuf.Struct", "value": body}
    elif state in FAILURE:
        op["error"] = {"code": _CODES[str(state)], "message": f"job {state}"}
    return op


def prepare(config: PeerConfig) -> Callable[[], PeerResult]:
    counter = Counter()
    client = counting_client(counter)
    s = config.scale

    def api_request(method: str, path: str) -> dict[str, Any]:
        response = client.get(config.status_url)
        if response.status_code >= 400:
            raise exceptions.from_http_status(response.status_code, response.text[:200], response=response)
        return as_operation(config.job_id, response.json())

    poll = polling.DEFAULT_POLLING.with_delay(initial=1.0 * s, maximum=20.0 * s, multiplier=1.5)
    retry = polling.DEFAULT_RETRY.with_delay(initial=1.0 * s, maximum=60.0 * s, multiplier=2.0).with_timeout(120.0 * s)

    def run() -> PeerResult:
        with client:
            future = operation.from_http_json(
                {"name": config.job_id, "done": False}, api_request, struct_pb2.Struct, polling=poll
            )
            try:
                result = future.result(timeout=config.deadline, retry=retry)
            except concurrent.futures.TimeoutError as exc:
                return PeerResult("stop", describe(exc), attempts=counter.value)
            except exceptions.GoogleAPICallError as exc:
                done = bool(future.operation.done) and future.operation.HasField("error")
                return PeerResult("failure" if done else "stop", describe(exc), attempts=counter.value)
            except Exception as exc:
                return PeerResult("stop", describe(exc), attempts=counter.value)
        fields = dict(result.items()) if result is not None else {}
        url = fields.get("result_url")
        found = url if isinstance(url, str) and url else None
        return PeerResult("success", str(fields.get("state")), found, attempts=counter.value)

    return run
