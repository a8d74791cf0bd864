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
from pollwarden.operating import open_store

from .common import PeerConfig, PeerResult

MAX_REQUESTS = 20

CONTRACT = """\
name = "bench"
status_url = "{base}/jobs/{{job_id}}"
timeout = "5s"
safe_status = true

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
jitter = "bounded"
first_check = "0s"

[limits]
deadline = "{deadline}"
max_requests = {max_requests}
max_transport_failures = 3
max_rate_limited = 3

[not_found]
grace = "30s"
"""


def ms(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def contract_text(config: PeerConfig) -> str:
    return CONTRACT.format(
        base=config.base_url,
        base_delay=ms(5.0 * config.scale),
        max_delay=ms(120.0 * config.scale),
        deadline=ms(config.deadline),
        max_requests=MAX_REQUESTS,
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
            return PeerResult("success", "succeeded", outcome.result, attempts=attempts)
        kind = "failure" if outcome.job_ended else "stop"
        return PeerResult(kind, outcome.reason.value, attempts=attempts)

    return run
