"""aws-step-functions-execution against an imitation of Step Functions' JSON 1.0 API, SigV4-checked, real CLI.

The request (POST /, X-Amz-Target AWSStepFunctions.DescribeExecution, application/x-amz-json-1.0, body
{"executionArn"}), the ExecutionStatus values, the answer's members and the errors (ExecutionDoesNotExist,
InvalidArn, KmsAccessDeniedException, KmsThrottlingException) are botocore's
data/stepfunctions/2016-11-23/service-2.json @ 0e6e2404 (1.43.67); throttling is the common ThrottlingException
(botocore retries/standard.py); error bodies `{"__type", "message"}` as botocore parsers.py reads them. The
imitation recomputes the SigV4 signature for the signing name `states`. Every documented value is in
tests/providers/fidelity/aws-step-functions-execution.toml.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .imitation import Answer, Imitation, JSONValue, ok
from .imitation_jobs import SFN_JSON, sfn_error, step_functions
from .support import assert_no_secret, tuned, watch
from .test_aws_textract_analysis import ACCESS as ACCESS  # one AWS identity for both services
from .test_aws_textract_analysis import ENV as ENV
from .test_aws_textract_analysis import REGION as REGION
from .test_aws_textract_analysis import SECRET as SECRET
from .test_aws_textract_analysis import SESSION as SESSION

pytest.importorskip("botocore", reason="the aws extra (pip install 'pollwarden[aws]') signs SigV4")


ARN = f"arn:aws:states:{REGION}:123456789012:execution:OrderPipeline:order-7f3a"
OUTPUT = '{"shipped": true, "tracking": "1Z999AA10123456784"}'


def execution(status: str, **members: JSONValue) -> Answer:
    body: dict[str, JSONValue] = {
        "executionArn": ARN, "stateMachineArn": f"arn:aws:states:{REGION}:123456789012:stateMachine:OrderPipeline",
        "name": "order-7f3a", "status": status, "startDate": 1718000000.123, "input": '{"order": 7}',
        "inputDetails": {"included": True}, "redriveCount": 0, **members,
    }  # fmt: skip
    answer = ok(body)
    return Answer(answer.status, answer.body, answer.headers, SFN_JSON)


FAILED = execution("FAILED", error="States.TaskFailed", cause='{"errorMessage": "card declined"}')


@pytest.fixture
def provider() -> Iterator[Imitation]:
    with Imitation(step_functions(ACCESS, SECRET, region=REGION, session_token=SESSION)) as imitation:
        yield imitation


@pytest.fixture
def contract(tmp_path: Path) -> Path:
    return tuned(tmp_path / "contracts", "aws-step-functions-execution")


def sfn_watch(contract: Path, provider: Imitation, home: Path, **kw: Any) -> Any:
    env = kw.pop("env", ENV)
    return watch(contract, base_url=provider.url, home=home, env=env, job=ARN, vars={"region": REGION}, **kw)


def test_a_signed_execution_to_success_with_its_output(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(ARN, execution("RUNNING"), execution("SUCCEEDED", stopDate=1718000042.5, output=OUTPUT))
    watched = sfn_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["result"] == OUTPUT
    seen = provider.seen(ARN)
    assert len(seen) == 2 and all(s.credential_ok for s in seen)  # every poll freshly and correctly signed
    for s in seen:
        assert (s.method, s.path, s.json()) == ("POST", "/", {"executionArn": ARN})
        assert s.headers["x-amz-target"] == "AWSStepFunctions.DescribeExecution"
        assert s.headers["content-type"] == "application/x-amz-json-1.0"
        assert f"/{REGION}/states/aws4_request" in s.headers["authorization"]
        assert s.headers["x-amz-security-token"] == SESSION
    assert_no_secret(SECRET, watched.ran.stdout, watched.ran.stderr)
    assert_no_secret(SESSION, watched.ran.stdout, watched.ran.stderr)


@pytest.mark.parametrize(
    ("answers", "code", "reason"),
    [
        pytest.param((FAILED,), 3, "job_failed", id="failed"),
        pytest.param((execution("TIMED_OUT", error="States.Timeout"),), 3, "job_failed", id="timed-out"),
        pytest.param(
            (execution("ABORTED", error="Aborted by operator", cause="StopExecution"),), 3, "job_cancelled",
            id="aborted",
        ),
        pytest.param(
            (execution("PENDING_REDRIVE", redriveCount=1), execution("RUNNING", redriveCount=1),
             execution("SUCCEEDED", output=OUTPUT, redriveCount=1)),
            0, None, id="redriven",
        ),
        pytest.param(
            (sfn_error(400, "ExecutionDoesNotExist", f"Execution Does Not Exist: '{ARN}'"),),
            4, "integration_failure", id="does-not-exist",
        ),
        pytest.param(
            (sfn_error(400, "KmsAccessDeniedException", "The KMS key policy denies kms:Decrypt"),),
            4, "authorization_denied", id="kms-access-denied",
        ),
    ],
)  # fmt: skip
def test_documented_endings(
    provider: Imitation, contract: Path, home: Path, answers: tuple[Answer, ...], code: int, reason: str | None
) -> None:
    provider.script(ARN, execution("RUNNING"), *answers)
    watched = sfn_watch(contract, provider, home)
    assert (watched.code, watched.outcome["reason"]) == (code, reason), watched.ran.stdout + watched.ran.stderr
    if answers == (FAILED,):  # error and cause are kept
        kept = watched.outcome["provider_error"]
        assert (kept["error"], kept["cause"]) == ("States.TaskFailed", '{"errorMessage": "card declined"}')


@pytest.mark.parametrize("kind", ["ThrottlingException", "com.amazonaws.swf.base.model#ThrottlingException"])
def test_throttling_is_a_rate_limit(provider: Imitation, contract: Path, home: Path, kind: str) -> None:
    throttled = sfn_error(400, kind, "Rate exceeded")
    kms = sfn_error(400, "KmsThrottlingException", "KMS throttled the request")
    provider.script(ARN, throttled, kms, execution("SUCCEEDED", output=OUTPUT))
    watched = sfn_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert [s.status for s in provider.seen(ARN)] == [400, 400, 200]


def test_an_output_larger_than_a_record_is_named_not_kept(provider: Imitation, contract: Path, home: Path) -> None:
    big = json.dumps({"rows": "x" * 100_000})  # Step Functions allows 256 KiB; a record keeps 64 KiB
    provider.script(ARN, execution("SUCCEEDED", output=big))
    watched = sfn_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["result"] == {
        "execution_arn": ARN, "output_characters": len(big), "output_too_large_to_keep": True,
    }  # fmt: skip


def test_a_wrong_secret_fails_the_signature(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(ARN, execution("SUCCEEDED", output=OUTPUT))
    watched = sfn_watch(contract, provider, home, env={**ENV, "AWS_SECRET_ACCESS_KEY": "not-the-secret"})
    assert (watched.code, watched.outcome["reason"]) == (4, "authorization_denied")
    (seen,) = provider.seen(ARN)
    assert not seen.credential_ok
