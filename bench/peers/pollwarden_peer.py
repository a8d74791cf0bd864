"""pollwarden itself, through its Python API (`pollwarden.Watch`), configured from a contract file.

The contract is the README's ("Watching a job"): the documented default schedule (base 5 s, max 120 s,
bounded jitter, first check at once), the provider's state table and fields, and limits: the scenario's
deadline, 20 status requests, 3 transport failures, 3 rate-limited answers. A restart runs `Watch(...)` again
with the same home and operation id, which resumes the stored operation with its deadline and counters.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pollwarden.api import Succeeded, Watch
from pollwarden.core.contract.result import result_text
from pollwarden.home.operating import open_store
from pollwarden.simulator import contract_text as simulator_contract

from .common import PeerConfig, PeerResult

MAX_REQUESTS = 20


def ms(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def contract_text(config: PeerConfig) -> str:
    """The README's schedule (5 s..120 s), scaled with the scenario."""
    return simulator_contract(
        config.base_url,
        name="bench",
        timeout="5s",
        base_delay=ms(5.0 * config.scale),
        max_delay=ms(120.0 * config.scale),
        deadline=ms(config.deadline),
        max_requests=MAX_REQUESTS,
        extra='[not_found]\ngrace = "30s"\n',
    )


def prepare(config: PeerConfig) -> Callable[[], PeerResult]:
    """Write the contract and open the home (keys, database) before the clock starts; the watch runs on `go`."""
    home = Path(config.home)
    home.mkdir(parents=True, exist_ok=True)
    contract = home / "contract.toml"
    if not contract.exists():  # a restart reuses the file, so the stored contract fingerprint still matches
        contract.write_text(contract_text(config), encoding="utf-8")
    store = open_store(home)
    watch = Watch(contract, config.job_id, store=store, operation_id=config.operation_id)

    def run() -> PeerResult:
        try:
            outcome = watch.run()
        finally:
            store.close()
        record = outcome.record
        attempts = record.status_requests_used if record is not None else None
        if isinstance(outcome, Succeeded):
            # The benchmark's contract has a string result; any other JSON is compared as its compact text.
            return PeerResult("success", "succeeded", result_text(outcome.result), attempts=attempts)
        kind = "failure" if outcome.job_ended else "stop"
        return PeerResult(kind, outcome.reason.value, attempts=attempts)

    return run
