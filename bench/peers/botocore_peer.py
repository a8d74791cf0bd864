"""A botocore `Waiter` built from a waiter model, in botocore's default delay/max-attempts style.

Docs: https://boto3.amazonaws.com/v1/documentation/api/latest/guide/clients.html#waiters (waiters poll an
operation every `Delay` seconds up to `MaxAttempts`, so the longest wait is Delay x MaxAttempts; both can be
overridden with `WaiterConfig`) and the waiter model format in botocore/data/*/waiters-2.json. The model here
has the most common shape in botocore's own data (delay 15 s; 214 of botocore's waiters use 15 s x 40):
`path` acceptors on the state field, success on `succeeded`, failure on `failed`/`cancelled`/`expired`.
`WaiterConfig` sets MaxAttempts = deadline // Delay, so Delay x MaxAttempts is the scenario's deadline.

The operation is `GetJob` on a tiny client shim (`JobsClient.get_job`) wrapped in botocore's own
`NormalizedOperationMethod`, exactly what `create_waiter_with_client` wraps a real client method in. A real
botocore client does not exist for this provider, so the shim does what a client in botocore's default retry
mode ("standard": 3 attempts in all, truncated binary exponential backoff from
`botocore.retries.standard.ExponentialBackoff`, retrying transport errors, 429 and 5xx) would do, returns the
parsed body with `ResponseMetadata`, and raises `ClientError` for error answers and
`EndpointConnectionError` when it cannot connect. Like botocore, it does not read Retry-After.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import httpx
from botocore.exceptions import ClientError, EndpointConnectionError, WaiterError
from botocore.retries.standard import ExponentialBackoff, RetryContext
from botocore.waiter import NormalizedOperationMethod, Waiter, WaiterModel

from .common import Counter, PeerConfig, PeerResult, body_result, body_state, counting_client, describe

DELAY = 15.0
CLIENT_MAX_ATTEMPTS = 3  # botocore "standard" retry mode, the default


def waiter_model(delay: float) -> dict[str, Any]:
    acceptors = [{"matcher": "path", "argument": "state", "expected": "succeeded", "state": "success"}]
    acceptors += [
        {"matcher": "path", "argument": "state", "expected": bad, "state": "failure"}
        for bad in ("failed", "cancelled", "expired")
    ]
    return {
        "version": 2,
        "waiters": {"JobSucceeded": {"operation": "GetJob", "delay": delay, "maxAttempts": 40, "acceptors": acceptors}},
    }


class _Throttling:
    """botocore decides throttling from the error code; 429 is a throttling error, 5xx is not."""

    def __init__(self, throttled: bool) -> None:
        self.throttled = throttled

    def is_throttling_error_from_context(self, context: Any) -> bool:
        return self.throttled


class JobsClient:
    """The shim a waiter needs: one operation method, botocore-shaped answers and errors."""

    def __init__(self, client: httpx.Client, base_url: str, scale: float) -> None:
        self.client = client
        self.base_url = base_url
        self.scale = scale

    def get_job(self, JobId: str) -> dict[str, Any]:
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self.client.get(f"{self.base_url}/jobs/{JobId}")
            except httpx.TransportError as exc:
                if attempt >= CLIENT_MAX_ATTEMPTS:
                    raise EndpointConnectionError(endpoint_url=self.base_url, error=exc) from exc
                self._backoff(attempt, throttled=False)
                continue
            status = response.status_code
            if (status == 429 or status >= 500) and attempt < CLIENT_MAX_ATTEMPTS:
                self._backoff(attempt, throttled=status == 429)
                continue
            metadata = {"HTTPStatusCode": status, "HTTPHeaders": dict(response.headers), "RetryAttempts": attempt - 1}
            if status >= 300:
                code = {429: "ThrottlingException", 401: "UnauthorizedException"}.get(status, str(status))
                error = {"Error": {"Code": code, "Message": response.text[:200]}, "ResponseMetadata": metadata}
                raise ClientError(error, "GetJob")
            body = response.json()
            parsed: dict[str, Any] = dict(body) if isinstance(body, dict) else {"body": body}
            parsed["ResponseMetadata"] = metadata
            return parsed

    def _backoff(self, attempt: int, *, throttled: bool) -> None:
        backoff = ExponentialBackoff(random=random.random, throttling_detector=_Throttling(throttled))
        delay: float = backoff.delay_amount(RetryContext(attempt_number=attempt))
        time.sleep(delay * self.scale)


def prepare(config: PeerConfig) -> Callable[[], PeerResult]:
    counter = Counter()
    http = counting_client(counter)
    delay = DELAY * config.scale
    max_attempts = max(1, int(config.deadline // delay))
    shim = JobsClient(http, config.base_url, config.scale)
    model = WaiterModel(waiter_model(delay))
    last: dict[str, Any] = {}

    def get_job(**kwargs: Any) -> dict[str, Any]:
        answer = shim.get_job(**kwargs)
        last.clear()
        last.update(answer)
        return answer

    waiter = Waiter("JobSucceeded", model.get_waiter("JobSucceeded"), NormalizedOperationMethod(get_job))

    def run() -> PeerResult:
        with http:
            try:
                waiter.wait(JobId=config.job_id, WaiterConfig={"Delay": delay, "MaxAttempts": max_attempts})
            except WaiterError as exc:
                state = body_state(exc.last_response)
                kind = "failure" if "terminal failure state" in str(exc) else "stop"
                return PeerResult(kind, f"{describe(exc)} (state {state})", attempts=counter.value)
            except Exception as exc:
                return PeerResult("stop", describe(exc), attempts=counter.value)
        return PeerResult("success", str(body_state(last)), body_result(last), attempts=counter.value)

    return run
