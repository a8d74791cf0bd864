"""The contract's `[push]` table: how the provider announces a job's end with a signed webhook (issue 27).

A push only makes the matching operation due now; the status request that follows decides, never the push's
own body. So the table says how to verify a delivery (`kind`, `secret_env`), where the event names the
provider's job (`job_id`, a JMESPath into the event), which event types wake (`events`; none listed: any) and
how often a push may wake one operation (`min_interval`). It is not part of the contract's fingerprint: it
changes when a poll happens, never what a poll means.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from .reader import Reader, check_token

KINDS = ("standard-webhooks", "github", "gitlab", "hmac-sha256")
"""Standard Webhooks (OpenAI, Replicate), GitHub's `X-Hub-Signature-256`, GitLab's `X-Gitlab-Token`, and a
plain HMAC-SHA256 of the body in a header the contract names."""

DEFAULT_MIN_INTERVAL = timedelta(seconds=1)

_EVENT_TYPE = {
    "standard-webhooks": "type",
    "github": "header:X-GitHub-Event",
    "gitlab": "object_kind",
}
"""Where each kind names its event type unless the table says otherwise: a body path or `header:NAME`."""

_DELIVERY_HEADER = {
    "standard-webhooks": "webhook-id",
    "github": "X-GitHub-Delivery",
    "gitlab": "Idempotency-Key",
}
"""The header each kind names its delivery with, the same on the provider's retries (what replays are recognised
by); GitLab sends `Idempotency-Key` from 17.4 on, and before it the body's SHA-256 names the delivery."""


@dataclass(frozen=True)
class Push:
    kind: str
    secret_env: str
    """The environment variable holding the webhook secret the receiver verifies with (never the API credential)."""
    job_id: str
    """A JMESPath expression into the event: the provider's job id, as the operations of the contract name it."""
    events: tuple[str, ...] | None = None
    """The event types that wake; None: any."""
    event_type: str | None = None
    """Where the event type is: a body path, or `header:NAME`; None: the event has no type."""
    header: str | None = None
    """`hmac-sha256`: the header holding the hex HMAC-SHA256 of the body (a `sha256=` prefix is allowed)."""
    delivery_header: str | None = None
    """The header naming the delivery; None: the body's SHA-256 names it (replays are still recognised)."""
    min_interval: timedelta = DEFAULT_MIN_INTERVAL
    """At most one woken check per operation per this long: a push storm costs a few requests, not a thousand."""


_KEYS = {"kind", "secret_env", "job_id", "events", "event_type", "header", "delivery_header", "min_interval"}


def parse_push(r: Reader) -> Push | None:
    """The `[push]` table, strictly: an unknown key, kind or malformed expression stops the load (exit 2)."""
    if "push" not in r.data:
        return None
    p = r.table("push")
    p.only(_KEYS)
    kind = p.text("kind", required=True)
    if kind not in KINDS:
        raise p.fail("kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    secret_env = p.text("secret_env", required=True)
    check_token(p, "secret_env", secret_env)
    if r.table("auth").data.get("secret_env") == secret_env:
        raise p.fail("secret_env", "must name the webhook secret, never the API credential of [auth]")
    header = p.text("header")
    if kind == "hmac-sha256" and header is None:
        raise p.fail("header", 'required for kind = "hmac-sha256": the header holding the body\'s HMAC')
    if kind != "hmac-sha256" and header is not None:
        raise p.fail("header", f'only for kind = "hmac-sha256"; {kind} names its own signature header')
    for key in ("header", "delivery_header"):
        if (value := p.text(key)) is not None:
            check_token(p, key, value)
    event_type = p.text("event_type") or _EVENT_TYPE.get(kind)
    if "event_type" in p.data and event_type is not None and not event_type.startswith("header:"):
        p.expression("event_type")  # checked now, so a typo stops the load
    events = p.strings("events") if "events" in p.data else None
    if events is not None and event_type is None:
        raise p.fail("events", "lists event types, but this kind's events name none: give [push].event_type")
    return Push(
        kind=kind,
        secret_env=secret_env,
        job_id=p.expression("job_id", required=True) or "id",
        events=events,
        event_type=event_type,
        header=header,
        delivery_header=p.text("delivery_header") or _DELIVERY_HEADER.get(kind),
        min_interval=p.duration("min_interval", DEFAULT_MIN_INTERVAL, positive=True),
    )
