"""Webhook notification of a decision request: signed, idempotent by decision id, one bounded attempt at a time.

The console and `pollwarden decisions` show the same requests; the webhook only makes sure someone is told. It
is sent from the outbox (`pollwarden.home.outbox`), never from the thread that committed the request, which retries
it with backoff and audits the outcome; a delivery failure never blocks or changes the stop itself.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .. import __version__
from ..core.contract.parse import Contract
from ..core.escalation import DecisionRequest

SIGNATURE_HEADER = "X-Pollwarden-Signature"
TIMESTAMP_HEADER = "X-Pollwarden-Timestamp"


@dataclass(frozen=True)
class Attempt:
    """One POST of a decision request to its webhook, and what came of it."""

    ok: bool
    status: int | None
    error: str | None
    final: bool = False
    """Another attempt could not go otherwise (the webhook refused the request itself: a 4xx other than 429)."""


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """HMAC-SHA256 over `timestamp.body`, so a captured delivery cannot be replayed with a new time."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def webhook_payload(request: DecisionRequest) -> bytes:
    return json.dumps(
        {"type": "decision_requested", "decision": request.to_json(), "text": request.render()}, sort_keys=True
    ).encode()


def attempt(
    url: str,
    secret_env: str | None,
    request: DecisionRequest,
    *,
    environ: Mapping[str, str],
    timeout: float,
    clock: Callable[[], float] = time.time,
) -> Attempt:
    """POST the request to `url` once, signed with the secret `secret_env` names in `environ`, the whole exchange
    (the host's lookup included) within `timeout` seconds."""
    secret = environ.get(secret_env) if secret_env else None
    if secret_env and not secret:
        return Attempt(False, None, f"webhook secret variable {secret_env} is not set; nothing was sent")
    body = webhook_payload(request)
    timestamp = str(int(clock()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": f"pollwarden/{__version__}",
        "Idempotency-Key": request.decision_id,
        TIMESTAMP_HEADER: timestamp,
    }
    if secret:
        headers[SIGNATURE_HEADER] = sign(secret, timestamp, body)
    status, error = post(url, body, headers, timeout)
    if status is None:
        return Attempt(False, None, error)
    if 200 <= status < 300:
        return Attempt(True, status, None)
    if status < 500 and status != 429:
        return Attempt(False, status, f"the webhook answered {status}; not retried", final=True)
    return Attempt(False, status, f"the webhook answered {status}")


def webhook_of(contract: Contract) -> tuple[str, str | None] | None:
    """The contract's webhook URL and the variable its signing secret is in; None when it names none."""
    url = contract.escalation.webhook_url
    return None if url is None else (url, contract.escalation.webhook_secret_env)


def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> tuple[int | None, str | None]:
    """One POST on a fresh connection under one deadline, connect to answer head, the host's lookup included (so a
    receiver that hangs, or drips its answer a byte at a time, costs `timeout` at most); redirects are not
    followed. Returns (the status, None), or (None, what went wrong, in words that hold nothing the receiver
    sent)."""
    # The socket layer is imported when something is really posted: every driver imports this module.
    from ..core.observe import FailureKind
    from .messages import Request, WireError
    from .wire import SocketTransport

    transport = SocketTransport()
    try:
        request = Request("POST", url, tuple(headers.items()), body, deadline=time.monotonic() + timeout)
        answer = transport.open(request)
    except WireError as exc:
        # A protocol failure's message may quote what the receiver sent: not kept (it goes to the audit log).
        said = "the answer is not HTTP this client reads" if exc.kind is FailureKind.PROTOCOL else exc.message
        return None, f"{exc.kind.value}: {said[:200]}"
    except (OSError, ValueError, UnicodeError) as exc:
        return None, type(exc).__name__
    finally:
        transport.close()
    try:
        return answer.status, None
    finally:
        answer.close()
