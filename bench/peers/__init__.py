"""The pollers people use today, each configured as its documentation recommends, plus pollwarden itself.

Each peer is a module with `run(PeerConfig) -> PeerResult`; `python -m bench.peers NAME` runs one in a child
process (see `__main__`). The registry below says which distribution a peer needs (None: nothing beyond
pollwarden's own dependencies) and, in one line, how it is configured; the module docstrings have the detail
and the documentation each configuration follows.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class Peer:
    name: str
    module: str
    distribution: str | None
    import_name: str | None
    docs: str
    configured: str

    @property
    def available(self) -> bool:
        return self.import_name is None or importlib.util.find_spec(self.import_name) is not None


PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        Peer(
            "pollwarden",
            "bench.peers.pollwarden_peer",
            None,
            None,
            "README.md (Watching a job, Python API)",
            "`pollwarden.Watch(contract, job, home, operation_id).run()`; README contract: base 5 s, max 120 s, "
            "bounded jitter, deadline = scenario's, 20 requests, 3 transport failures, 3 rate-limited",
        ),
        Peer(
            "azure-core",
            "bench.peers.azure_peer",
            "azure-core",
            "azure.core",
            "https://github.com/Azure/azure-sdk-for-python/blob/main/doc/dev/customize_long_running_operation.md",
            "`LROPoller` + `LROBasePolling(timeout=30, lro_algorithms=[custom LongRunningOperation])`, pipeline "
            "with default `RetryPolicy()`; `poller.result()` without a timeout, as in the samples",
        ),
        Peer(
            "botocore",
            "bench.peers.botocore_peer",
            "botocore",
            "botocore",
            "https://boto3.amazonaws.com/v1/documentation/api/latest/guide/clients.html#waiters",
            "`Waiter` from a `WaiterModel` (delay 15 s, path acceptors on `state`), "
            "`WaiterConfig` MaxAttempts = deadline // 15; client shim with botocore's default 'standard' retries",
        ),
        Peer(
            "google-api-core",
            "bench.peers.google_peer",
            "google-api-core",
            "google.api_core",
            "https://googleapis.dev/python/google-api-core/latest/operation.html",
            "`operation.from_http_json(...)` with `DEFAULT_POLLING` (1 s x1.5 to 20 s, jitter), "
            "`result(timeout=deadline, retry=DEFAULT_RETRY)`",
        ),
        Peer(
            "tenacity",
            "bench.peers.tenacity_peer",
            "tenacity",
            "tenacity",
            "https://tenacity.readthedocs.io/en/latest/",
            "`retry_if_result(not terminal)` or-ed with `retry_if_exception(transient)`, "
            "`wait_exponential(multiplier=1, min=4, max=10)`, `stop_after_delay(deadline)`",
        ),
        Peer(
            "stamina",
            "bench.peers.stamina_peer",
            "stamina",
            "stamina",
            "https://stamina.hynek.me/en/stable/api.html",
            "`retry_context(on=backoff hook returning Retry-After, attempts=None, timeout=deadline)`, "
            "default waits (0.1 s x2 to 5 s, +0..1 s jitter); the status call raises while not terminal",
        ),
        Peer(
            "fixed-10s",
            "bench.peers.fixed_loop",
            None,
            None,
            "hand-written",
            "`while True: get; if terminal: break; sleep(10)`; errors are ignored",
        ),
    )
}

LIBRARY_PEERS = tuple(name for name, peer in PEERS.items() if peer.distribution is not None)
