"""Is this delivery the provider's? Pure verification of a pushed webhook, one function per `[push] kind`.

No I/O and no clock of its own: the receiver gives the headers (names lower-cased), the raw body, the secret
read from its environment and the time. Every comparison of a secret-derived value is constant-time.

- Standard Webhooks (https://www.standardwebhooks.com; OpenAI, Replicate): `webhook-signature` holds one or
  more space-separated `v1,<base64 HMAC-SHA256>` over "`webhook-id`.`webhook-timestamp`.body" keyed with the
  base64 secret after its `whsec_` prefix; the timestamp must be within `TOLERANCE` of now.
- GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>` keyed with the secret's bytes.
- GitLab: `X-Gitlab-Token` is the secret itself.
- hmac-sha256: the contract's header holds the hex HMAC-SHA256 of the body (a `sha256=` prefix is allowed).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from .contract.push import Push
from .digits import whole_number

TOLERANCE = timedelta(minutes=5)
"""How far a Standard Webhooks timestamp may be from now, either way (the spec's libraries' default)."""

MAX_BODY_BYTES = 256 * 1024
"""The largest push body read: a job's end event is a few KiB; anything larger is refused unread (413)."""


class Refusal(StrEnum):
    """Why a delivery was refused; each is counted in the receiver's metrics under this name."""

    BAD_SIGNATURE = "bad_signature"
    STALE = "stale"
    TOO_LARGE = "too_large"
    MALFORMED = "malformed"
    NO_SECRET = "no_secret"


STATUS = {
    Refusal.BAD_SIGNATURE: 401,
    Refusal.STALE: 401,
    Refusal.TOO_LARGE: 413,
    Refusal.MALFORMED: 400,
    Refusal.NO_SECRET: 503,
}


@dataclass(frozen=True)
class Verified:
    delivery_id: str
    """The provider's name for the delivery (its header), else the body's SHA-256: what replays are known by."""


@dataclass(frozen=True)
class Refused:
    why: Refusal
    detail: str
    """For the receiver's log: what was wrong, never a secret or the body."""

    @property
    def status(self) -> int:
        return STATUS[self.why]


def verify(
    push: Push, secret: str | None, headers: Mapping[str, str], body: bytes, now: datetime
) -> Verified | Refused:
    """Whether the delivery is signed by the holder of `secret`; `headers` keyed by lower-case name."""
    if len(body) > MAX_BODY_BYTES:
        return Refused(Refusal.TOO_LARGE, f"body larger than {MAX_BODY_BYTES} bytes")
    if not secret:
        return Refused(Refusal.NO_SECRET, f"the receiver's environment has no {push.secret_env}")
    refused: Refused | None
    if push.kind == "standard-webhooks":
        refused = _standard(secret, headers, body, now)
    elif push.kind == "github":
        refused = _hex_hmac(secret, headers.get("x-hub-signature-256"), body, "X-Hub-Signature-256", prefix=True)
    elif push.kind == "gitlab":
        refused = _token(secret, headers.get("x-gitlab-token"))
    else:
        assert push.header is not None  # the contract refuses hmac-sha256 without one
        refused = _hex_hmac(secret, headers.get(push.header.lower()), body, push.header, prefix=False)
    if refused is not None:
        return refused
    named = headers.get(push.delivery_header.lower()) if push.delivery_header is not None else None
    if named is not None and not _printable(named, 200):
        return Refused(Refusal.MALFORMED, f"{push.delivery_header} is not a short printable id")
    return Verified(named or "sha256:" + hashlib.sha256(body).hexdigest())


def _printable(text: str, limit: int) -> bool:
    return 0 < len(text) <= limit and all(32 < ord(ch) < 127 for ch in text)


def standard_key(secret: str) -> bytes | None:
    """The HMAC key of a Standard Webhooks secret (`whsec_` and base64), or None when it is not one."""
    try:
        return base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError):
        return None


def standard_signature(key: bytes, delivery_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64>`: what a sender puts in `webhook-signature` (the simulator signs with this)."""
    signed = f"{delivery_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def standard_headers(secret: str, delivery_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers a Standard Webhooks sender signs a delivery with (the simulator's pushes, the tests')."""
    key = standard_key(secret)
    if key is None:
        raise ValueError("not a whsec_ base64 secret")
    return {
        "webhook-id": delivery_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": standard_signature(key, delivery_id, timestamp, body),
    }


def _standard(secret: str, headers: Mapping[str, str], body: bytes, now: datetime) -> Refused | None:
    key = standard_key(secret)
    if key is None:
        return Refused(Refusal.NO_SECRET, "the webhook secret is not a whsec_ base64 secret")
    delivery_id, stamp, signatures = (headers.get(f"webhook-{n}") for n in ("id", "timestamp", "signature"))
    if delivery_id is None or stamp is None or signatures is None:
        return Refused(Refusal.BAD_SIGNATURE, "webhook-id, webhook-timestamp and webhook-signature are required")
    seconds = whole_number(stamp, 12)
    if seconds is None:
        return Refused(Refusal.BAD_SIGNATURE, "webhook-timestamp is not whole seconds since the epoch")
    sent = datetime.fromtimestamp(seconds, UTC)
    if abs(now - sent) > TOLERANCE:
        return Refused(Refusal.STALE, f"webhook-timestamp is more than {TOLERANCE} from now")
    expected = standard_signature(key, delivery_id, seconds, body).encode()
    for given in signatures.split(" "):
        if given.startswith("v1,") and hmac.compare_digest(given.encode(), expected):
            return None
    return Refused(Refusal.BAD_SIGNATURE, "no v1 signature in webhook-signature matches")


def hex_signature(secret: str, body: bytes) -> str:
    """The hex HMAC-SHA256 of the body keyed with the secret's UTF-8 bytes (GitHub's, and hmac-sha256's)."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _hex_hmac(secret: str, given: str | None, body: bytes, header: str, *, prefix: bool) -> Refused | None:
    if given is None:
        return Refused(Refusal.BAD_SIGNATURE, f"no {header} header")
    text = given.removeprefix("sha256=") if not prefix or given.startswith("sha256=") else None
    if text is None:
        return Refused(Refusal.BAD_SIGNATURE, f"{header} is not sha256=<hex>")
    if not hmac.compare_digest(text.lower().encode(), hex_signature(secret, body).encode()):
        return Refused(Refusal.BAD_SIGNATURE, f"{header} does not match the body")
    return None


def _token(secret: str, given: str | None) -> Refused | None:
    if given is None or not hmac.compare_digest(given.encode(), secret.encode()):
        return Refused(Refusal.BAD_SIGNATURE, "X-Gitlab-Token is missing or wrong")
    return None
