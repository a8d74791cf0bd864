"""aws-textract-analysis against an imitation of Textract's JSON 1.1 API, SigV4-checked, through the real CLI.

The request shape (POST /, X-Amz-Target Textract.GetDocumentAnalysis, application/x-amz-json-1.1) and the
states are from botocore `botocore/data/textract/2018-06-27/service-2.json` (GetDocumentAnalysis,
JobStatus IN_PROGRESS | SUCCEEDED | FAILED | PARTIAL_SUCCESS, the error shapes); error bodies from
botocore `parsers.py` (`__type`, possibly namespaced with `#`); throttling codes from botocore
`retries/standard.py`. Bodies are composed from the service model (botocore's examples-1.json for Textract is
empty; docs/plans/part8-providers.md section 7). The imitation recomputes the SigV4 signature itself
(tests/providers/imitation.py, checked against AWS's get-vanilla vector).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .imitation import Answer, Imitation, JSONValue, aws_error, aws_throttled, ok, textract
from .support import assert_no_secret, tuned, watch

pytest.importorskip("botocore", reason="the aws extra (pip install 'pollwarden[aws]') signs SigV4")

ACCESS = "AKIAIMITATION0000001"
SECRET = "imitation/secret+key/0123456789abcdefghij"
SESSION = "IQoJb3JpZ2luX2VjEImitationSessionToken"
REGION = "eu-west-1"
ENV = {"AWS_ACCESS_KEY_ID": ACCESS, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": SESSION}
JOB = "3a5b4f1e9c2d8e7f6a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f"

IN_PROGRESS: dict[str, JSONValue] = {"JobStatus": "IN_PROGRESS", "AnalyzeDocumentModelVersion": "1.0"}
SUCCEEDED: dict[str, JSONValue] = {
    "JobStatus": "SUCCEEDED", "DocumentMetadata": {"Pages": 3}, "AnalyzeDocumentModelVersion": "1.0",
    "NextToken": "eyJhbGciOiJ", "Blocks": [{"BlockType": "PAGE", "Id": "c2a4", "Page": 1}],
}  # fmt: skip
PARTIAL: dict[str, JSONValue] = {
    "JobStatus": "PARTIAL_SUCCESS", "DocumentMetadata": {"Pages": 3}, "AnalyzeDocumentModelVersion": "1.0",
    "Warnings": [{"ErrorCode": "INVALID_REQUEST_PARAMETERS", "Pages": [2]}], "Blocks": [],
}  # fmt: skip
FAILED: dict[str, JSONValue] = {"JobStatus": "FAILED", "StatusMessage": "Request has unsupported document format"}


@pytest.fixture
def provider() -> Any:
    with Imitation(textract(ACCESS, SECRET, region=REGION, session_token=SESSION)) as imitation:
        yield imitation


@pytest.fixture
def contract(tmp_path: Path) -> Path:
    return tuned(tmp_path / "contracts", "aws-textract-analysis")


def tx_watch(contract: Path, provider: Imitation, home: Path, **kw: Any) -> Any:
    return watch(
        contract,
        base_url=provider.url,
        home=home,
        env=kw.pop("env", ENV),
        job=kw.pop("job", JOB),
        vars={"region": REGION},
        **kw,
    )


def test_signed_post_to_success_with_page_metadata(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(JOB, ok(IN_PROGRESS), ok(IN_PROGRESS), ok(SUCCEEDED))
    watched = tx_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["result"] == {"pages": 3, "warnings": None, "model_version": "1.0", "more_blocks": True}
    seen = provider.seen(JOB)
    assert len(seen) == 3 and all(s.credential_ok for s in seen)  # every poll freshly and correctly signed
    for s in seen:
        assert (s.method, s.path) == ("POST", "/")
        assert s.headers["x-amz-target"] == "Textract.GetDocumentAnalysis"
        assert s.headers["content-type"] == "application/x-amz-json-1.1"
        assert s.headers["x-amz-security-token"] == SESSION
        assert s.json() == {"JobId": JOB, "MaxResults": 1}
        assert (
            f"Credential={ACCESS}/" in s.headers["authorization"]
            and f"/{REGION}/textract/aws4_request" in s.headers["authorization"]
        )
    assert_no_secret(SECRET, watched.ran.stdout, watched.ran.stderr)
    assert_no_secret(SESSION, watched.ran.stdout, watched.ran.stderr)


def test_partial_success_keeps_the_warnings(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(JOB, ok(PARTIAL))
    watched = tx_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["result"]["warnings"] == [{"ErrorCode": "INVALID_REQUEST_PARAMETERS", "Pages": [2]}]


@pytest.mark.parametrize(
    ("answer", "code", "reason"),
    [
        pytest.param(ok(FAILED), 3, "job_failed", id="failed"),
        pytest.param(ok({"JobStatus": "SUCCEEDED"}), 4, "result_invalid", id="succeeded-without-metadata"),
        pytest.param(ok({"JobStatus": "QUEUED"}), 4, "unknown_state", id="undocumented"),
        pytest.param(
            aws_error(400, "AccessDeniedException", "User is not authorized"),
            4,
            "authorization_denied",
            id="access-denied",
        ),
        pytest.param(
            aws_error(400, "ExpiredTokenException", "The security token included in the request is expired"),
            4,
            "authorization_denied",
            id="expired-token",
        ),
        pytest.param(
            aws_error(400, "InvalidJobIdException", "An invalid job identifier was passed."),
            4,
            "integration_failure",
            id="invalid-job-id",
        ),
    ],
)
def test_documented_endings(
    provider: Imitation, contract: Path, home: Path, answer: Answer, code: int, reason: str
) -> None:
    provider.script(JOB, ok(IN_PROGRESS), answer)
    watched = tx_watch(contract, provider, home)
    assert watched.code == code, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["reason"] == reason
    if reason == "job_failed":
        assert watched.outcome["provider_error"]["status_message"] == "Request has unsupported document format"


@pytest.mark.parametrize("namespaced", [False, True])
def test_throttling_is_a_rate_limit_not_a_failure(
    provider: Imitation, contract: Path, home: Path, namespaced: bool
) -> None:
    provider.script(JOB, aws_throttled(namespaced=namespaced), aws_throttled(namespaced=namespaced), ok(SUCCEEDED))
    watched = tx_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert [s.status for s in provider.seen(JOB)] == [400, 400, 200]


def test_a_namespaced_limit_exceeded_is_a_rate_limit(provider: Imitation, contract: Path, home: Path) -> None:
    limited = aws_error(400, "com.amazonaws.textract#LimitExceededException", "Open jobs limit exceeded")
    provider.script(JOB, limited, ok(SUCCEEDED))
    watched = tx_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr


def test_a_wrong_secret_fails_the_signature(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(JOB, ok(SUCCEEDED))
    watched = tx_watch(contract, provider, home, env={**ENV, "AWS_SECRET_ACCESS_KEY": "not-the-secret"})
    assert (watched.code, watched.outcome["reason"]) == (4, "authorization_denied")
    (seen,) = provider.seen(JOB)
    assert not seen.credential_ok


def test_region_is_required(provider: Imitation, contract: Path, home: Path) -> None:
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=JOB)
    assert watched.code == 2 and "region" in watched.ran.stderr
    assert provider.seen() == []


def test_long_term_iam_keys_without_a_session_token_are_signed_with_the_pair_alone(tmp_path: Path, home: Path) -> None:
    """Issue 24: the contract's comment said AWS_SESSION_TOKEN was optional, but long-term IAM keys (no session
    token) got exit 2 "needs the credential in environment variable AWS_SESSION_TOKEN"."""
    contract = tuned(tmp_path / "contracts", "aws-textract-analysis")
    long_term = {"AWS_ACCESS_KEY_ID": ACCESS, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": ""}
    with Imitation(textract(ACCESS, SECRET, region=REGION)) as provider:
        provider.script(JOB, ok(IN_PROGRESS), ok(SUCCEEDED))
        watched = tx_watch(contract, provider, home, env=long_term)
        assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
        seen = provider.seen(JOB)
        assert len(seen) == 2 and all(s.credential_ok for s in seen)
        assert all("x-amz-security-token" not in s.headers for s in seen)
        assert_no_secret(SECRET, watched.ran.stdout, watched.ran.stderr)


def test_the_key_pair_is_still_required(tmp_path: Path, home: Path) -> None:
    contract = tuned(tmp_path / "contracts", "aws-textract-analysis")
    with Imitation(textract(ACCESS, SECRET, region=REGION)) as provider:
        watched = tx_watch(contract, provider, home, env={**ENV, "AWS_SECRET_ACCESS_KEY": ""})
        assert watched.code == 2 and "AWS_SECRET_ACCESS_KEY" in watched.ran.stderr, watched.ran.stderr
        assert provider.seen() == []
