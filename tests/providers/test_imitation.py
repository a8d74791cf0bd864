"""The imitation's own checks, so a contract test that passes is not passing against a lenient fake."""

from __future__ import annotations

import math

import httpx

from .imitation import Imitation, Incoming, SigV4, anthropic, ok

# AWS's SigV4 test suite, case get-vanilla (botocore tests/unit/auth/aws4_testsuite/get-vanilla/; the same
# vector is quoted by every independent implementation): credentials, request and expected signature.
VANILLA = Incoming(
    method="GET",
    path="/",
    query="",
    headers={
        "host": "example.amazonaws.com",
        "x-amz-date": "20150830T123600Z",
        "authorization": "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request,"
        " SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
    },
    body=b"",
)
VECTOR_SIGNER = SigV4(
    "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1", "service", max_skew=math.inf
)


def test_sigv4_check_accepts_aws_published_vector() -> None:
    assert VECTOR_SIGNER.problem(VANILLA) is None


def test_sigv4_check_refuses_any_change_to_the_signed_request() -> None:
    for changed in (
        Incoming("POST", VANILLA.path, VANILLA.query, VANILLA.headers, VANILLA.body),
        Incoming(VANILLA.method, "/x", VANILLA.query, VANILLA.headers, VANILLA.body),
        Incoming(VANILLA.method, VANILLA.path, "a=1", VANILLA.headers, VANILLA.body),
        Incoming(VANILLA.method, VANILLA.path, VANILLA.query, VANILLA.headers, b"{}"),
        Incoming(VANILLA.method, VANILLA.path, VANILLA.query, {**VANILLA.headers, "host": "evil.example"}, b""),
    ):
        problem = VECTOR_SIGNER.problem(changed)
        assert problem is not None and problem[0] == "InvalidSignatureException", changed


def test_sigv4_check_refuses_wrong_key_scope_and_missing_token() -> None:
    assert SigV4("OTHER", "x", "us-east-1", "service", max_skew=math.inf).problem(VANILLA) is not None
    assert SigV4("AKIDEXAMPLE", "x", "eu-west-1", "service", max_skew=math.inf).problem(VANILLA) is not None
    with_token = SigV4(
        "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1", "service", "tok", max_skew=math.inf
    )
    assert with_token.problem(VANILLA) is not None
    # The vector is from 2015: with the real clock it is a stale signature, as AWS would say.
    assert (
        SigV4("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1", "service").problem(VANILLA)
        is not None
    )


def test_scripts_advance_repeat_the_last_answer_and_record_requests() -> None:
    with Imitation(anthropic("k")) as provider:
        provider.script("b1", ok({"processing_status": "in_progress"}), ok({"processing_status": "ended"}))
        headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
        url = f"{provider.url}/v1/messages/batches/b1"
        states = [httpx.get(url, headers=headers).json()["processing_status"] for _ in range(3)]
        assert states == ["in_progress", "ended", "ended"]
        refused = httpx.get(url, headers={"x-api-key": "wrong", "anthropic-version": "2023-06-01"})
        assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
        assert httpx.get(url, headers={"x-api-key": "k"}).status_code == 400  # no anthropic-version
        assert httpx.get(f"{provider.url}/v1/messages/batches/other", headers=headers).status_code == 404
        seen = provider.seen("b1")
        assert [s.credential_ok for s in seen] == [True, True, True, False, False]
        assert seen[0].headers["x-api-key"] == "k" and seen[0].method == "GET"
