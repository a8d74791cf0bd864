"""kubernetes-job against an imitation of the Kubernetes API server's batch/v1 Jobs, through the real CLI.

Bodies: the Job docs' example (kubernetes.io/docs/concepts/workloads/controllers/job/, `kubectl get job pi -o
yaml`, trimmed) with the conditions of kubernetes/api batch/v1/types.go (JobConditionType Suspended, Complete,
Failed, FailureTarget, SuccessCriteriaMet; reasons BackoffLimitExceeded, DeadlineExceeded, PodFailurePolicy,
MaxFailedIndexesExceeded, SuccessPolicy, CompletionsReached) @ kubernetes-1.36.3 (157e3b39). Errors are
metav1.Status bodies; the 429 of API Priority and Fairness is plain text with Retry-After (kubernetes/apiserver
pkg/server/filters/priority-and-fairness.go @ kubernetes-1.36.3, fb3d3236). The token is a file, as a service
account's is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.tls import Certificates
from tests.tls import certificates as certificates  # the fixture: a CA and leaves made once per session

from .imitation import Answer, Imitation, JSONValue, ok
from .imitation_jobs import k8s_forbidden, k8s_throttled, kubernetes
from .support import assert_no_secret, choose_cancel, record_of, tuned, watch

TOKEN = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImltaXRhdGlvbiJ9.c2VydmljZWFjY291bnQ.c2lnbmF0dXJl"
NAMESPACE = "batch"
JOB = "pi"
ENV: dict[str, str] = {}  # a service account's token is a file, not a variable


def condition(type_: str, status: str = "True", reason: str | None = None, message: str | None = None) -> JSONValue:
    found: dict[str, JSONValue] = {
        "type": type_, "status": status,
        "lastProbeTime": "2022-06-06T14:59:16Z", "lastTransitionTime": "2022-06-06T14:59:16Z",
    }  # fmt: skip
    if reason is not None:
        found["reason"] = reason
    if message is not None:
        found["message"] = message
    return found


def job(*conditions: JSONValue, deleting: bool = False, **status: JSONValue) -> Answer:
    metadata: dict[str, JSONValue] = {
        "name": JOB, "namespace": NAMESPACE, "uid": "94bd4a8b-6c17-4ae5-b2e3-3d2c6f1f0c6e",
        "resourceVersion": "1094", "generation": 1, "creationTimestamp": "2022-06-06T14:58:43Z",
        "labels": {"batch.kubernetes.io/job-name": JOB},
    }  # fmt: skip
    if deleting:
        metadata["deletionTimestamp"] = "2022-06-06T15:00:02Z"
        metadata["finalizers"] = ["foregroundDeletion"]
    body: dict[str, JSONValue] = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
        "spec": {"backoffLimit": 4, "completions": 1, "parallelism": 1, "completionMode": "NonIndexed",
                 "suspend": False},
        "status": {**({"conditions": list(conditions)} if conditions else {}), **status},
    }  # fmt: skip
    return ok(body)


CREATED = job()
RUNNING = job(active=1, ready=1, startTime="2022-06-06T14:58:43Z", uncountedTerminatedPods={})
REACHED = "Reached expected number of succeeded pods"
BACKOFF = "Job has reached the specified backoff limit"
CRITERIA_MET = job(
    condition("SuccessCriteriaMet", reason="CompletionsReached", message=REACHED),
    succeeded=1, startTime="2022-06-06T14:58:43Z",
)  # fmt: skip
COMPLETE = job(
    condition("SuccessCriteriaMet", reason="CompletionsReached", message=REACHED),
    condition("Complete", reason="CompletionsReached", message=REACHED),
    succeeded=1, completionTime="2022-06-06T14:59:16Z", startTime="2022-06-06T14:58:43Z", ready=0,
)  # fmt: skip
FAILURE_TARGET = job(condition("FailureTarget", reason="BackoffLimitExceeded", message=BACKOFF), failed=5, active=1)
FAILED = job(
    condition("FailureTarget", reason="BackoffLimitExceeded", message=BACKOFF),
    condition("Failed", reason="BackoffLimitExceeded", message=BACKOFF),
    failed=5,
)  # fmt: skip
DEADLINE = job(
    condition("Failed", reason="DeadlineExceeded", message="Job was active longer than specified deadline"), failed=1
)
SUSPENDED = job(condition("Suspended", reason="JobSuspended", message="Job suspended"))
RESUMED = job(condition("Suspended", status="False", reason="JobResumed", message="Job resumed"), active=1)
DELETING = job(deleting=True, active=1)


@pytest.fixture
def provider() -> Iterator[Imitation]:
    with Imitation(kubernetes(TOKEN, namespace=NAMESPACE)) as imitation:
        yield imitation


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "serviceaccount" / "token"
    path.parent.mkdir()
    path.write_text(TOKEN, encoding="utf-8")  # kubelet writes it without a newline
    return path


@pytest.fixture
def contract(tmp_path: Path) -> Path:
    return tuned(tmp_path / "contracts", "kubernetes-job")


def k8s_watch(contract: Path, provider: Imitation, home: Path, token_file: Path, **kw: Any) -> Any:
    return watch(
        contract,
        base_url=provider.url,
        home=home,
        env=ENV,
        job=kw.pop("job", JOB),
        vars={"namespace": NAMESPACE, "token_file": str(token_file), **kw.pop("vars", {})},
        **kw,
    )


def test_a_job_to_completion_with_the_service_account_token(
    provider: Imitation, contract: Path, home: Path, token_file: Path
) -> None:
    provider.script(JOB, CREATED, RUNNING, RESUMED, COMPLETE)
    watched = k8s_watch(contract, provider, home, token_file)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["result"] == {
        "name": JOB, "namespace": NAMESPACE, "uid": "94bd4a8b-6c17-4ae5-b2e3-3d2c6f1f0c6e", "succeeded": 1,
        "completed_indexes": None, "completion_time": "2022-06-06T14:59:16Z",
    }  # fmt: skip
    seen = provider.seen(JOB)
    assert len(seen) == 4 and all(s.credential_ok for s in seen)
    assert all(s.path == f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{JOB}" for s in seen)
    assert all(s.headers["authorization"] == f"Bearer {TOKEN}" for s in seen)
    assert_no_secret(TOKEN, watched.ran.stdout, watched.ran.stderr, run_cli("story", "op", home=home).stdout)


@pytest.mark.parametrize(
    ("answers", "code", "reason"),
    [
        pytest.param((CRITERIA_MET,), 0, "succeeded", id="success-criteria-met-before-complete"),
        pytest.param((FAILURE_TARGET,), 3, "job_failed", id="failure-target-before-failed"),
        pytest.param((FAILED,), 3, "job_failed", id="backoff-limit"),
        pytest.param((DEADLINE,), 3, "job_failed", id="active-deadline"),
        pytest.param((SUSPENDED, RESUMED, COMPLETE), 0, "succeeded", id="suspended-then-admitted"),
        pytest.param((RUNNING, DELETING), 3, "job_cancelled", id="deleted-before-it-ended"),
        pytest.param((job(condition("Complete"), condition("Failed")),), 4, "unknown_state", id="complete-and-failed"),
        pytest.param((job(conditions="not a list"),), 4, "invalid_response", id="conditions-not-a-list"),
        pytest.param((k8s_forbidden(JOB, NAMESPACE),), 4, "authorization_denied", id="rbac-forbidden"),
    ],
)
def test_documented_endings(
    provider: Imitation,
    contract: Path,
    home: Path,
    token_file: Path,
    answers: tuple[Answer, ...],
    code: int,
    reason: str,
) -> None:
    provider.script(JOB, *answers)
    watched = k8s_watch(contract, provider, home, token_file)
    assert watched.code == code, watched.ran.stdout + watched.ran.stderr
    assert (watched.outcome["reason"] or "succeeded") == reason, watched.outcome
    assert len(provider.seen(JOB)) == len(answers)
    if reason == "job_failed":
        kept = watched.outcome["provider_error"]
        assert kept["conditions"][-1]["reason"] in {"BackoffLimitExceeded", "DeadlineExceeded"}, kept


def test_the_api_servers_429_waits_its_retry_after(
    provider: Imitation, contract: Path, home: Path, token_file: Path
) -> None:
    provider.script(JOB, k8s_throttled(1), COMPLETE)
    watched = k8s_watch(contract, provider, home, token_file)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    first, second = provider.seen(JOB)
    assert (first.status, second.status) == (429, 200)
    assert second.at - first.at >= 0.9  # Retry-After: 1 is a floor under the next poll (0.1 s for clock rounding)


def test_a_refused_token_is_read_again_once_then_stops(
    provider: Imitation, contract: Path, home: Path, token_file: Path
) -> None:
    token_file.write_text("not-the-token", encoding="utf-8")
    provider.script(JOB, COMPLETE)
    watched = k8s_watch(contract, provider, home, token_file)
    assert (watched.code, watched.outcome["reason"]) == (4, "authorization_denied"), watched.outcome
    assert [s.status for s in provider.seen(JOB)] == [401, 401]  # the file read again after the first 401, once


def test_a_missing_job_stops_after_its_grace(provider: Imitation, tmp_path: Path, home: Path, token_file: Path) -> None:
    contract = tuned(tmp_path / "c", "kubernetes-job", not_found={"grace": "0s"})
    watched = k8s_watch(contract, provider, home, token_file, job="no-such-job")
    assert watched.code == 4, watched.ran.stdout + watched.ran.stderr
    assert [s.status for s in provider.seen("no-such-job")] == [404]


def test_cancel_is_a_foreground_delete(provider: Imitation, tmp_path: Path, home: Path, token_file: Path) -> None:
    """The budget spent while the job runs; a person chooses "cancel at provider": a DELETE with foreground
    propagation, so the job stays visible, with its deletionTimestamp, until its pods are gone (a watch that sees
    it so ends cancelled: the deleted-before-it-ended case above)."""
    path = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{JOB}"
    provider.action("DELETE", path, DELETING)
    provider.script(JOB, RUNNING)
    contract = tuned(tmp_path / "c", "kubernetes-job", limits={"max_requests": 1})
    watched = k8s_watch(contract, provider, home, token_file)
    assert (watched.code, watched.outcome["reason"]) == (4, "request_budget_exhausted"), watched.outcome
    decided = choose_cancel(watched, home=home, env=ENV)
    assert decided.code == 0, decided.stdout + decided.stderr
    (delete,) = provider.actions("DELETE")
    assert (delete.path, delete.query) == (path, "propagationPolicy=Foreground")
    assert delete.headers["authorization"] == f"Bearer {TOKEN}"
    assert record_of(home, "op")["reason"] == "request_budget_exhausted"  # the cancel is an action, not a poll
    assert len(provider.seen(JOB)) == 1


def test_https_with_the_clusters_ca_bundle(
    certificates: Certificates, tmp_path: Path, home: Path, token_file: Path
) -> None:
    """An API server signed by the cluster's own CA: the contract's ca_file verifies it, not the system's store."""
    leaf = certificates.good
    with Imitation(kubernetes(TOKEN, namespace=NAMESPACE), tls=(leaf.cert, leaf.key)) as provider:
        assert provider.url.startswith("https://127.0.0.1:")
        provider.script(JOB, RUNNING, COMPLETE)
        contract = tuned(tmp_path / "c", "kubernetes-job", limits={"max_transport_failures": 1})
        trusted = k8s_watch(contract, provider, home, token_file, vars={"ca_file": str(certificates.ca)})
        assert trusted.code == 0, trusted.ran.stdout + trusted.ran.stderr
        assert len(provider.seen(JOB)) == 2

        # Another cluster's CA: the handshake fails, nothing is sent (a connect failure, counted).
        other = k8s_watch(
            contract, provider, home, token_file, job="pi-2", operation="other",
            vars={"ca_file": str(certificates.other_ca)},
        )  # fmt: skip
        assert (other.code, other.outcome["reason"]) == (4, "provider_failure"), other.ran.stdout + other.ran.stderr
        assert "certificate verify failed" in json.dumps(other.outcome), other.outcome

        # The default bundle (a pod's /var/run/secrets/...) is not on this machine: refused before anything is sent.
        missing = k8s_watch(contract, provider, home, token_file, job="pi-3", operation="missing")
        assert (missing.code, missing.outcome["reason"]) == (4, "integration_failure"), missing.ran.stdout
        shown = json.dumps(missing.outcome) + missing.ran.stderr
        assert "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt does not exist" in shown, shown
        assert len(provider.seen()) == 2  # neither the other CA's nor the missing bundle's watch sent a poll


def test_the_catalogue_names_the_token_file_and_the_namespace_it_needs(home: Path) -> None:
    listed = run_cli("contracts", "--json", home=home)
    assert listed.code == 0, listed.stderr
    (entry,) = [c for c in json.loads(listed.stdout) if c["name"] == "kubernetes-job"]
    assert entry["credentials"] == ["file:/var/run/secrets/kubernetes.io/serviceaccount/token"]
    assert entry["required_vars"] == ["namespace"]
    table = run_cli("contracts", home=home, env={"COLUMNS": "80"}).stdout
    assert "--var namespace=..." in table  # the table fits the terminal: the token file's whole path is in --json
