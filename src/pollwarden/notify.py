"""Webhook notification of a decision request: signed, retried with backoff, idempotent by decision id.

The console and `pollwarden decisions` show the same requests; the webhook only makes sure someone is
told. A delivery failure is recorded and never blocks or changes the stop itself.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from . import __version__
from . import events as ev
from .core.contract import Contract
from .core.escalation import DecisionRequest

SIGNATURE_HEADER = "X-Pollwarden-Signature"
TIMESTAMP_HEADER = "X-Pollwarden-Timestamp"


@dataclass(frozen=True)
class Delivery:
    ok: bool
    attempts: int
    status: int | None
    error: str | None

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "attempts": self.attempts, "status": self.status, "error": self.error}


def delivery_event(request: DecisionRequest, delivery: Delivery) -> ev.DeliveryEvent:
    """What a delivery leaves in the operation's log: `notified`, or `notify_failed` with the error."""
    kind = ev.Notified if delivery.ok else ev.NotifyFailed
    return kind(
        decision_id=request.decision_id,
        ok=delivery.ok,
        attempts=delivery.attempts,
        status=delivery.status,
        error=delivery.error,
    )


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """HMAC-SHA256 over `timestamp.body`, so a captured delivery cannot be replayed with a new time."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def webhook_payload(request: DecisionRequest) -> bytes:
    return json.dumps(
        {"type": "decision_requested", "decision": request.to_json(), "text": request.render()}, sort_keys=True
    ).encode()


def deliver(
    contract: Contract,
    request: DecisionRequest,
    *,
    environ: Mapping[str, str] | None = None,
    attempts: int = 4,
    base_delay: float = 0.5,
    timeout: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> Delivery | None:
    """POST the request to the contract's webhook; None when the contract names none."""
    url = contract.escalation.webhook_url
    if url is None:
        return None
    env = os.environ if environ is None else environ
    secret_env = contract.escalation.webhook_secret_env
    secret = env.get(secret_env) if secret_env else None
    if secret_env and not secret:
        return Delivery(False, 0, None, f"webhook secret variable {secret_env} is not set; nothing was sent")
    # httpx is imported only when a webhook is really posted: every driver imports this module, few contracts
    # name a webhook, and httpx (with its dependencies) is most of what a lean `import pollwarden` leaves out.
    import httpx

    body = webhook_payload(request)
    status: int | None = None
    error: str | None = None
    with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client:
        for attempt in range(1, attempts + 1):
            timestamp = str(int(clock()))
            headers = {
                "Content-Type": "application/json",
                "User-Agent": f"pollwarden/{__version__}",
                "Idempotency-Key": request.decision_id,
                TIMESTAMP_HEADER: timestamp,
            }
            if secret:
                headers[SIGNATURE_HEADER] = sign(secret, timestamp, body)
            try:
                response = client.post(url, content=body, headers=headers)
                status, error = response.status_code, None
                if 200 <= status < 300:
                    return Delivery(True, attempt, status, None)
                if status < 500 and status != 429:
                    return Delivery(False, attempt, status, f"the webhook answered {status}; not retried")
                error = f"the webhook answered {status}"
            except httpx.HTTPError as exc:
                status, error = None, f"{exc.__class__.__name__}"
            if attempt < attempts:
                sleep(base_delay * 2 ** (attempt - 1) * (0.5 + random.random() / 2))
    return Delivery(False, attempts, status, error)
