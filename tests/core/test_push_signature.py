"""Verifying a provider's push (`core.push_signature`): each kind against its spec's own test vectors, and every
way a delivery can be wrong refused with the reason the receiver counts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pollwarden.core.contract.push import Push
from pollwarden.core.push_signature import (
    MAX_BODY_BYTES,
    Refusal,
    Refused,
    Verified,
    hex_signature,
    standard_key,
    standard_signature,
    verify,
)

# The Standard Webhooks libraries' own vector (standard-webhooks/standard-webhooks, libraries/python/tests).
SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SW_STAMP = 1614265330
SW_BODY = b'{"test": 2432232314}'
SW_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
SW_NOW = datetime.fromtimestamp(SW_STAMP, UTC)

STANDARD = Push(kind="standard-webhooks", secret_env="WH", job_id="data.id", delivery_header="webhook-id")
GITHUB = Push(kind="github", secret_env="WH", job_id="workflow_run.id", delivery_header="X-GitHub-Delivery")
GITLAB = Push(kind="gitlab", secret_env="WH", job_id="object_attributes.id", delivery_header="X-Gitlab-Event-UUID")
GENERIC = Push(kind="hmac-sha256", secret_env="WH", job_id="id", header="X-Signature")


def _sw_headers(signature: str = SW_SIGNATURE, stamp: int = SW_STAMP) -> dict[str, str]:
    return {"webhook-id": SW_ID, "webhook-timestamp": str(stamp), "webhook-signature": signature}


def test_the_standard_webhooks_vector_signs_and_verifies() -> None:
    key = standard_key(SW_SECRET)
    assert key is not None and standard_key(SW_SECRET.removeprefix("whsec_")) == key
    assert standard_signature(key, SW_ID, SW_STAMP, SW_BODY) == SW_SIGNATURE
    assert verify(STANDARD, SW_SECRET, _sw_headers(), SW_BODY, SW_NOW) == Verified(SW_ID)


def test_one_valid_signature_among_several_is_enough() -> None:
    many = f"v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v2,abc {SW_SIGNATURE}"
    assert verify(STANDARD, SW_SECRET, _sw_headers(many), SW_BODY, SW_NOW) == Verified(SW_ID)


@pytest.mark.parametrize(
    "headers",
    [
        _sw_headers("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA="),  # the spec's invalid one: last char
        _sw_headers("v2," + SW_SIGNATURE.removeprefix("v1,")),
        {"webhook-id": SW_ID, "webhook-signature": SW_SIGNATURE},
        {"webhook-timestamp": str(SW_STAMP), "webhook-signature": SW_SIGNATURE},
        _sw_headers(stamp=SW_STAMP + 1),  # signed for another moment
        {**_sw_headers(), "webhook-timestamp": "hello"},
    ],
)
def test_a_forged_standard_webhook_is_refused_401(headers: dict[str, str]) -> None:
    verdict = verify(STANDARD, SW_SECRET, headers, SW_BODY, SW_NOW)
    assert isinstance(verdict, Refused) and verdict.why is Refusal.BAD_SIGNATURE and verdict.status == 401


def test_a_changed_body_is_refused() -> None:
    verdict = verify(STANDARD, SW_SECRET, _sw_headers(), SW_BODY.replace(b"2", b"3"), SW_NOW)
    assert isinstance(verdict, Refused) and verdict.why is Refusal.BAD_SIGNATURE


@pytest.mark.parametrize("offset", [timedelta(minutes=5, seconds=1), -timedelta(minutes=5, seconds=1)])
def test_a_timestamp_more_than_five_minutes_off_is_stale(offset: timedelta) -> None:
    verdict = verify(STANDARD, SW_SECRET, _sw_headers(), SW_BODY, SW_NOW + offset)
    assert isinstance(verdict, Refused) and verdict.why is Refusal.STALE and verdict.status == 401
    assert isinstance(verify(STANDARD, SW_SECRET, _sw_headers(), SW_BODY, SW_NOW + offset * 0.99), Verified)


def test_github_signs_the_body_with_the_secrets_bytes() -> None:
    # GitHub's documented example ("Validating webhook deliveries").
    secret, body = "It's a Secret to Everybody", b"Hello, World!"
    expected = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert hex_signature(secret, body) == expected
    headers = {"x-hub-signature-256": f"sha256={expected}", "x-github-delivery": "72d3162e-cc78"}
    assert verify(GITHUB, secret, headers, body, SW_NOW) == Verified("72d3162e-cc78")
    for wrong in (expected, f"sha256={expected[:-1]}0", "sha1=" + expected):
        verdict = verify(GITHUB, secret, {**headers, "x-hub-signature-256": wrong}, body, SW_NOW)
        assert isinstance(verdict, Refused) and verdict.status == 401


def test_gitlab_compares_its_token() -> None:
    headers = {"x-gitlab-token": "s3cret", "x-gitlab-event-uuid": "u-1"}
    assert verify(GITLAB, "s3cret", headers, b"{}", SW_NOW) == Verified("u-1")
    for wrong in ({"x-gitlab-token": "s3cre"}, {}):
        verdict = verify(GITLAB, "s3cret", wrong, b"{}", SW_NOW)
        assert isinstance(verdict, Refused) and verdict.why is Refusal.BAD_SIGNATURE


def test_a_generic_hmac_names_its_header_and_a_delivery_without_id_is_named_by_its_body() -> None:
    body = b'{"id": "j1"}'
    good = {"x-signature": hex_signature("k", body)}
    verdict = verify(GENERIC, "k", good, body, SW_NOW)
    assert isinstance(verdict, Verified) and verdict.delivery_id.startswith("sha256:")
    assert verify(GENERIC, "k", {"x-signature": "sha256=" + good["x-signature"]}, body, SW_NOW) == verdict
    assert isinstance(verify(GENERIC, "other", good, body, SW_NOW), Refused)


def test_an_oversized_body_and_a_missing_secret_are_refused_before_anything_else() -> None:
    verdict = verify(STANDARD, SW_SECRET, _sw_headers(), b"x" * (MAX_BODY_BYTES + 1), SW_NOW)
    assert isinstance(verdict, Refused) and verdict.why is Refusal.TOO_LARGE and verdict.status == 413
    verdict = verify(STANDARD, None, _sw_headers(), SW_BODY, SW_NOW)
    assert isinstance(verdict, Refused) and verdict.why is Refusal.NO_SECRET and "WH" in verdict.detail
    assert SW_SECRET not in verdict.detail


def test_a_delivery_id_that_is_not_a_short_printable_token_is_malformed() -> None:
    headers = {"x-gitlab-token": "s", "x-gitlab-event-uuid": "a b"}
    verdict = verify(GITLAB, "s", headers, b"{}", SW_NOW)
    assert isinstance(verdict, Refused) and verdict.why is Refusal.MALFORMED


def test_openais_own_signed_delivery_verifies() -> None:
    """openai/openai-python@e43b422 tests/lib/test_webhooks.py: the vector its `webhooks.verify_signature` and
    `unwrap` are tested on (a `response.completed` event; its batch.* events are signed the same way,
    `src/openai/lib/_webhooks.py`). Replicate's SDK tests on the Standard Webhooks vector above."""
    secret = "whsec_RdvaYFYUXuIFuEbvZHwMfYFhUf7aMYjYcmM24+Aj40c="
    body = (
        b'{"id": "evt_685c059ae3a481909bdc86819b066fb6", "object": "event", "created_at": 1750861210,'
        b' "type": "response.completed", "data": {"id": "resp_123"}}'
    )
    headers = {
        "webhook-id": "wh_685c059ae39c8190af8c71ed1022a24d",
        "webhook-timestamp": "1750861210",
        "webhook-signature": "v1,gUAg4R2hWouRZqRQG4uJypNS8YK885G838+EHb4nKBY=",
    }
    now = datetime.fromtimestamp(1750861210, UTC)
    assert verify(STANDARD, secret, headers, body, now) == Verified("wh_685c059ae39c8190af8c71ed1022a24d")
    assert isinstance(verify(STANDARD, secret, headers, body.replace(b"resp_123", b"resp_124"), now), Refused)
