"""The provider profiles of the six job APIs of issue 24, for the loopback imitation (`imitation.Imitation`).

As in imitation.py, a profile holds only what a provider does on the wire: its status route, its credential
check and its error bodies, each with the definition it follows. The bodies a job goes through are in each
provider's test module, beside their citations; the fidelity tables (tests/providers/fidelity/) list every value.
"""

from __future__ import annotations

import re
import urllib.parse

from .imitation import (
    Answer,
    AwsJson,
    Incoming,
    JSONValue,
    Profile,
    aws_error,
    bearer,
    google_error,
    header_equals,
)

# --- Kubernetes ----------------------------------------------------------------------------------------------


def k8s_status(code: int, reason: str, message: str, details: dict[str, JSONValue] | None = None) -> Answer:
    """The API server's error body, a `metav1.Status` (kubernetes/apimachinery pkg/apis/meta/v1/types.go):
    `{"kind": "Status", "apiVersion": "v1", "status": "Failure", message, reason, details, code}`."""
    body: dict[str, JSONValue] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return Answer(code, body)


def k8s_throttled(retry_after: int = 1) -> Answer:
    """API Priority and Fairness refusing a request (kubernetes/apiserver pkg/server/filters/priority-and-fairness.go
    `tooManyRequests`): 429, `Retry-After`, and a plain-text body, not a Status."""
    return Answer(
        429,
        b"Too many requests, please try again later.\n",
        {"Retry-After": str(retry_after)},
        "text/plain; charset=utf-8",
    )


def k8s_forbidden(job: str, namespace: str) -> Answer:
    """RBAC refusing the service account (a 403 Status with reason Forbidden)."""
    message = (
        f'jobs.batch "{job}" is forbidden: User "system:serviceaccount:{namespace}:default" cannot get resource'
        f' "jobs" in API group "batch" in the namespace "{namespace}"'
    )
    return k8s_status(403, "Forbidden", message, {"name": job, "group": "batch", "kind": "jobs"})


def kubernetes(token: str, *, namespace: str) -> Profile:
    """GET /apis/batch/v1/namespaces/NS/jobs/NAME with a bearer token (the service account's)."""
    pattern = re.compile(rf"/apis/batch/v1/namespaces/{re.escape(namespace)}/jobs/(?P<job>[^/]+)")

    def route(request: Incoming) -> str | None:
        match = pattern.fullmatch(request.path)
        return None if request.method != "GET" or match is None else urllib.parse.unquote(match.group("job"))

    return Profile(
        name="kubernetes",
        route=route,
        check=bearer(token, k8s_status(401, "Unauthorized", "Unauthorized")),
        not_found=lambda job: k8s_status(
            404, "NotFound", f'jobs.batch "{job}" not found', {"name": job, "group": "batch", "kind": "jobs"}
        ),
    )


# --- Google: BigQuery and Vertex AI ---------------------------------------------------------------------------


def google_legacy_error(code: int, status: str, reason: str, message: str) -> Answer:
    """The error body of Google's older JSON APIs (BigQuery v2): an `errors` list of {message, domain, reason}
    beside code, message and status (cloud.google.com/bigquery/docs/error-messages)."""
    domain = "usageLimits" if reason in {"rateLimitExceeded", "quotaExceeded"} else "global"
    return Answer(
        code,
        {
            "error": {
                "code": code,
                "message": message,
                "errors": [{"message": message, "domain": domain, "reason": reason}],
                "status": status,
            }
        },
    )


def bigquery_rate_limited() -> Answer:
    """BigQuery's "Exceeded rate limits": HTTP 403 with reason rateLimitExceeded (the error-messages table)."""
    return google_legacy_error(
        403,
        "PERMISSION_DENIED",
        "rateLimitExceeded",
        "Exceeded rate limits: too many api requests per user per method for this user_method. For more"
        " information, see https://cloud.google.com/bigquery/docs/troubleshoot-quotas",
    )


def bigquery(token: str, *, project: str, location: str) -> Profile:
    """jobs.get: GET /bigquery/v2/projects/P/jobs/ID?location=L. A job outside the US and EU multi-regions is
    found only with its location (the jobs.get reference): without it, or with another, it is not found."""
    pattern = re.compile(rf"/bigquery/v2/projects/{re.escape(project)}/jobs/(?P<job>[^/]+)")

    def route(request: Incoming) -> str | None:
        match = pattern.fullmatch(request.path)
        if request.method != "GET" or match is None:
            return None
        job = urllib.parse.unquote(match.group("job"))
        given = urllib.parse.parse_qs(request.query).get("location", [])
        return job if given == [location] else f"<{job} in another location>"

    refused = google_legacy_error(
        401,
        "UNAUTHENTICATED",
        "authError",
        "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid"
        " authentication credential.",
    )
    return Profile(
        name="bigquery",
        route=route,
        check=bearer(token, refused),
        not_found=lambda job: google_legacy_error(404, "NOT_FOUND", "notFound", f"Not found: Job {project}:{job}"),
    )


def vertex(token: str, *, project: str, location: str) -> Profile:
    """batchPredictionJobs.get: GET /v1/projects/P/locations/L/batchPredictionJobs/ID (the v1 REST reference);
    errors in the google.rpc.Status model."""
    pattern = re.compile(
        rf"/v1/projects/{re.escape(project)}/locations/{re.escape(location)}/batchPredictionJobs/(?P<job>[^/:]+)"
    )

    def route(request: Incoming) -> str | None:
        match = pattern.fullmatch(request.path)
        return None if request.method != "GET" or match is None else match.group("job")

    return Profile(
        name="vertex",
        route=route,
        check=bearer(
            token,
            google_error(
                401, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 access token."
            ),
        ),
        not_found=lambda job: google_error(
            404,
            "NOT_FOUND",
            f'The BatchPredictionJob does not exist: "projects/{project}/locations/{location}'
            f'/batchPredictionJobs/{job}"',
        ),
    )


# --- Databricks ---------------------------------------------------------------------------------------------


def databricks_error(status: int, code: str, message: str, **headers: str) -> Answer:
    """Databricks REST errors: `{"error_code", "message"}` (databricks-sdk-py errors/platform.py maps the codes;
    429 REQUEST_LIMIT_EXCEEDED and 503 carry Retry-After, errors/customizer.py)."""
    return Answer(
        status, {"error_code": code, "message": message}, {k.replace("_", "-"): v for k, v in headers.items()}
    )


def databricks(token: str) -> Profile:
    """runs/get: GET /api/2.1/jobs/runs/get?run_id=N with a bearer token (a personal access token)."""

    def route(request: Incoming) -> str | None:
        if request.method != "GET" or request.path != "/api/2.1/jobs/runs/get":
            return None
        ids = urllib.parse.parse_qs(request.query).get("run_id", [])
        return ids[0] if len(ids) == 1 else "<no run_id>"

    return Profile(
        name="databricks",
        route=route,
        check=bearer(token, databricks_error(401, "UNAUTHENTICATED", "Invalid access token.")),
        # An unknown run is a 400, not a 404 (databricks-sdk-py errors/overrides.py: "Run .* does not exist").
        not_found=lambda job: databricks_error(400, "INVALID_PARAMETER_VALUE", f"Run {job} does not exist."),
    )


# --- AWS Step Functions -----------------------------------------------------------------------------------------


SFN_JSON = "application/x-amz-json-1.0"


def step_functions(access_key: str, secret_key: str, *, region: str, session_token: str | None = None) -> Profile:
    """DescribeExecution, JSON 1.0 (botocore data/stepfunctions/2016-11-23/service-2.json: POST /, X-Amz-Target
    AWSStepFunctions.DescribeExecution, body {"executionArn"}), SigV4 for the signing name `states`."""
    operation = AwsJson("states", "AWSStepFunctions.DescribeExecution", "executionArn", SFN_JSON)
    return operation.profile(
        access_key,
        secret_key,
        region,
        session_token,
        lambda arn: sfn_error(400, "ExecutionDoesNotExist", f"Execution Does Not Exist: '{arn}'"),
    )


def sfn_error(status: int, type_: str, message: str) -> Answer:
    """JSON 1.0 errors: `{"__type", "message"}` in application/x-amz-json-1.0 (botocore parsers.py)."""
    return aws_error(status, type_, message, SFN_JSON)


# --- AssemblyAI --------------------------------------------------------------------------------------------------


def assemblyai(key: str) -> Profile:
    """GET /v2/transcript/ID with the key as the bare `authorization` header (the API reference's "Authorization";
    assemblyai-python-sdk client.py sets `headers["authorization"] = api_key`); errors are `{"error": message}`."""

    def route(request: Incoming) -> str | None:
        match = re.fullmatch(r"/v2/transcript/(?P<job>[^/]+)", request.path)
        return None if request.method != "GET" or match is None else urllib.parse.unquote(match.group("job"))

    return Profile(
        name="assemblyai",
        route=route,
        check=header_equals(
            "authorization", key, Answer(401, {"error": "Authentication error, API token missing/invalid"})
        ),
        not_found=lambda job: Answer(404, {"error": "Transcript not found"}),
    )
