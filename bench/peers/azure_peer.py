"""azure-core's `LROPoller` with a custom polling method built from azure.core.polling's base classes.

Docs: "Long-running operation (LRO) customization" in the Azure SDK for Python
(https://github.com/Azure/azure-sdk-for-python/blob/main/doc/dev/customize_long_running_operation.md) and
https://learn.microsoft.com/python/api/azure-core/azure.core.polling.base_polling.lrobasepolling: an LRO that
diverges from the Azure guidelines gets its own polling strategy, a subclass of `LongRunningOperation`
(can_poll / get_polling_url / set_initial_status / get_status / get_final_get_url) passed to
`LROBasePolling(timeout=..., lro_algorithms=[...])`, and the caller waits with `poller.result()` as the samples
do. Configuration: the default polling interval (`timeout=30` s, used when an answer has no Retry-After), the
pipeline a generated client builds (request id, headers, content decode, redirect, and `RetryPolicy()` with its
defaults: 3 status retries on 408/429/5xx, backoff 0.8 s x 2^n, Retry-After honoured), the default `requests`
transport.

The algorithm maps the provider's states onto Azure's LRO vocabulary, the only one LROBasePolling knows:
succeeded -> Succeeded, failed/expired -> Failed, cancelled -> Canceled; anything else is still in progress.
The initial response (in Azure, the answer to the request that started the job) is the first status GET.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from azure.core import PipelineClient
from azure.core.exceptions import AzureError
from azure.core.pipeline import PipelineRequest, PipelineResponse
from azure.core.pipeline.policies import (
    ContentDecodePolicy,
    HeadersPolicy,
    RedirectPolicy,
    RequestIdPolicy,
    RetryPolicy,
    SansIOHTTPPolicy,
)
from azure.core.polling import LROPoller
from azure.core.polling.base_polling import LongRunningOperation, LROBasePolling
from azure.core.rest import HttpRequest

from .common import Counter, PeerConfig, PeerResult, body_result, body_state, describe

POLLING_INTERVAL = 30.0
_AZURE_STATES = {"succeeded": "Succeeded", "failed": "Failed", "expired": "Failed", "cancelled": "Canceled"}


class CountAttempts(SansIOHTTPPolicy[Any, Any]):
    """Placed after RetryPolicy, so it sees every attempt the retry policy makes."""

    def __init__(self, counter: Counter) -> None:
        super().__init__()
        self.counter = counter

    def on_request(self, request: PipelineRequest[Any]) -> None:
        self.counter.value += 1


def _body(pipeline_response: PipelineResponse[Any, Any]) -> Any:
    text: str = pipeline_response.http_response.text()
    return json.loads(text) if text else None


class JobStatePolling(LongRunningOperation[Any, Any]):
    """The custom LRO algorithm: the status URL is known up front and the state is the body's `state`."""

    def __init__(self, status_url: str) -> None:
        self.status_url = status_url

    def can_poll(self, pipeline_response: PipelineResponse[Any, Any]) -> bool:
        return True

    def get_polling_url(self) -> str:
        return self.status_url

    def set_initial_status(self, pipeline_response: PipelineResponse[Any, Any]) -> str:
        return self.get_status(pipeline_response)

    def get_status(self, pipeline_response: PipelineResponse[Any, Any]) -> str:
        state = body_state(_body(pipeline_response)) or "Unknown"
        return _AZURE_STATES.get(state, state)

    def get_final_get_url(self, pipeline_response: PipelineResponse[Any, Any]) -> str | None:
        return None


def prepare(config: PeerConfig) -> Callable[[], PeerResult]:
    counter = Counter()
    s = config.scale
    policies = [
        RequestIdPolicy(),
        HeadersPolicy(),
        ContentDecodePolicy(),
        RedirectPolicy(),
        RetryPolicy(retry_backoff_factor=0.8 * s, retry_backoff_max=120 * s),
        CountAttempts(counter),
    ]
    client: PipelineClient[Any, Any] = PipelineClient(config.base_url, policies=policies)
    polling: LROBasePolling[Any, Any, Any] = LROBasePolling(
        timeout=POLLING_INTERVAL * s, lro_algorithms=[JobStatePolling(config.status_url)]
    )
    client.__enter__()  # opens the transport's session now, as a long-lived client would have

    def run() -> PeerResult:
        try:
            initial = client._pipeline.run(HttpRequest("GET", config.status_url), stream=False)
            poller: LROPoller[Any] = LROPoller(client, initial, _body, polling)
            body = poller.result()
        except AzureError as exc:
            status = polling.status() if getattr(polling, "_status", None) else ""
            response = getattr(exc, "response", None)
            job_failed = status in ("Failed", "Canceled") and getattr(response, "status_code", 0) == 200
            return PeerResult("failure" if job_failed else "stop", describe(exc), attempts=counter.value)
        except Exception as exc:
            return PeerResult("stop", describe(exc), attempts=counter.value)
        finally:
            client.close()
        return PeerResult("success", str(body_state(body)), body_result(body), attempts=counter.value)

    return run
