"""Actions beside polling, each with its own record (R39): submit, cancel at provider, fetch the result.

The status endpoint stays read-only from the agent's side; anything that changes something at the provider
or moves output elsewhere is one of these, recorded before and after it happens.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlencode, urljoin, urlsplit, urlunsplit

from .. import events as ev
from ..core.admission import Limits, WatchRequest, job_id_problem
from ..core.contract.parse import Contract, Submit
from ..core.contract.result import fetch_url, result_url_problem
from ..core.expr import json_type, lookup
from ..core.identity import canonical_job
from ..core.learnt_first import FirstCheck, place_first
from ..core.learnt_inputs import key_value
from ..core.observe import BodyError, Response, TransportFailure, parse_document
from ..core.record import OperationRecord, new_record
from ..core.result_part import no_result_problem, result_part
from ..core.schedule import Rejection
from ..core.watchability import Refused, checked
from ..engine import learning
from ..engine.installed import not_installed
from ..errors import EXIT_ESCALATED, PollwardenError
from ..store.base import JobWatched, OperationExists, Store, Submission
from ..transport.http import StatusClient, origin_of


class ActionError(PollwardenError):
    """An action that was tried and did not succeed; the message says what is known and what to do."""

    exit_code = EXIT_ESCALATED  # like a stop: a person decides what happens next


class ActionRefused(ActionError):
    """An action that must not happen at all: nothing was sent and nothing changed."""

    exit_code = PollwardenError.exit_code


class NoResult(ActionRefused):
    """A fetch asked before a validated success (or a finished part): there is nothing to fetch yet."""


@dataclass(frozen=True)
class Submitted:
    record: OperationRecord
    resent: bool


def fingerprint(method: str, url: str, body: bytes) -> str:
    """What identifies the original request (R5): an earlier request's job is never taken for this one."""
    digest = hashlib.sha256()
    for part in (method.encode(), url.encode(), body):
        digest.update(len(part).to_bytes(8, "big") + part)
    return "sha256:" + digest.hexdigest()


def _safe_url(url: str) -> str:
    """URLs go into records without query or fragment: pre-signed links carry credentials there."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


_FLAGS = {"deadline": "--deadline", "useful_for": "--useful-for", "max_requests": "--max-requests"}


def admissible(contract: Contract, body: bytes, limits: Limits = Limits(), by: str = "cli") -> Submit:  # noqa: B008
    """What a submission needs no store for, checked before one is opened (`pollwarden submit`) and again by
    `submit`: the contract has a [submit] table, the body is one it can send, and the operation it creates is
    admitted as every watch is (a contract that may be watched, limits it allows). ActionRefused when not; nothing
    was recorded or sent."""
    spec = contract.submit
    if spec is None:
        raise ActionRefused(f"contract {contract.name!r} has no [submit] table: it documents no submission")
    _wire_body(spec, body, "token")  # a body the contract cannot send is refused before anything is recorded
    asked = Limits(
        deadline=limits.deadline, max_requests=limits.max_requests, useful_for=limits.useful_for,
        lag_target=limits.lag_target,
    )  # fmt: skip
    try:
        checked(WatchRequest(contract, None, limits=asked, by=by))
    except Refused as exc:
        raise ActionRefused(exc.message_for(_FLAGS) + "; nothing was sent") from None
    return spec


def submit(
    store: Store,
    contract: Contract,
    client: StatusClient,
    *,
    operation_id: str,
    body: bytes,
    now: datetime,
    limits: Limits = Limits(),  # noqa: B008  (frozen: one shared default is safe)
    by: str = "cli",
) -> Submitted:
    """Record the submission, send it once (again only under idempotency), and create the operation with the
    `limits` its caller asked for (the deadline, the budget and the usefulness window are the ones read here)."""
    deadline, max_requests, useful_for = limits.deadline, limits.max_requests, limits.useful_for
    spec = admissible(contract, body, limits, by)
    if (uninstalled := not_installed(store, contract)) is not None:  # its operation is run by whoever runs it
        raise ActionRefused(f"{uninstalled}; nothing was sent")
    print_fp = fingerprint(spec.method, spec.url, body)
    existing = store.get_submission(operation_id)
    resent = False
    if existing is None:
        token = secrets.token_urlsafe(18) if spec.idempotency_header or spec.idempotency_field else None
        submission = Submission(operation_id, print_fp, token, body, "sending", None, None, now)
        try:
            intent = ev.SubmissionIntent(
                fingerprint=print_fp,
                method=spec.method,
                url=_safe_url(spec.url),
                idempotent=bool(token),
                created_by=by,
            )
            store.record_submission(submission, intent)
        except OperationExists:
            raise ActionRefused(f"operation {operation_id} already exists; choose another --operation") from None
    else:
        submission = existing
        if existing.state == "duplicate":
            marks = [e.data.get("watched_by") for e in store.events(operation_id) if e.kind == "submission_duplicate"]
            raise ActionRefused(
                f"the provider already answered {operation_id}'s submission: {_duplicate(str(marks[-1]))}"
            )
        if existing.state == "accepted":
            raise ActionRefused(
                f"operation {operation_id} was already submitted as job {existing.job_id}; watch it with"
                f" `pollwarden watch --operation {operation_id}`"
            )
        if existing.fingerprint != print_fp:
            raise ActionRefused(f"operation {operation_id} was recorded with another request body; nothing was sent")
        if existing.idempotency_token is None and existing.state != "not_sent":
            raise ActionRefused(
                f"a submission for {operation_id} was sent and its outcome is unknown ({existing.state}). The provider"
                " offers no idempotency, so sending it again could create a duplicate job: check the provider"
                " first; a resubmission is a person's decision (R34). Nothing was sent"
            )
        resent = True
    content_type = "application/x-www-form-urlencoded" if spec.encoding == "form" else "application/json"
    headers = {"Content-Type": content_type, "Accept": "application/json"}
    if spec.idempotency_header and submission.idempotency_token:
        headers[spec.idempotency_header] = submission.idempotency_token
    # The token was made durable with the submission, so a resend carries the same one in the body as well.
    wire = _wire_body(spec, submission.body, submission.idempotency_token)
    # With a persisted idempotency token a lost answer is retried automatically; without one, never (R34).
    attempts = 3 if submission.idempotency_token else 1
    for _ in range(attempts):
        exchange = client.send(spec.method, spec.url, body=wire, extra_headers=headers)
        if not isinstance(exchange, TransportFailure):
            break
    if isinstance(exchange, TransportFailure):
        # A refused connection proves the provider never saw it; anything later leaves the outcome unknown.
        marked = ev.SubmissionUnknown if exchange.delivery_unknown else ev.SubmissionNotSent
        lost = marked(failure=exchange.kind.value, detail=exchange.message)
        store.mark_submission(operation_id, lost, now)
        if not exchange.delivery_unknown:
            raise ActionError(f"the submission was not delivered ({exchange.message}); it is safe to run submit again")
        again = (
            "run the same submit again: the idempotency token makes a second send safe"
            if submission.idempotency_token
            else "check the provider before anything else; without idempotency a second send may duplicate the job"
        )
        raise ActionError(f"the submission's outcome is unknown ({exchange.message}); {again}")
    if exchange.status not in (200, 201, 202, 204):
        rejected = ev.SubmissionRejected(http_status=exchange.status)
        store.mark_submission(operation_id, rejected, now)
        raise ActionError(f"the provider refused the submission with HTTP {exchange.status}; nothing will be watched")
    job_id, location = _accepted(contract, exchange)
    record = new_record(
        contract,
        operation_id=operation_id,
        job_id=job_id,
        now=now,
        deadline=deadline,
        max_requests=max_requests,
        request_fingerprint=print_fp,
        useful_for=useful_for if useful_for is not None else contract.escalation.useful_for,
        lag_target=limits.lag_target,
        status_location=location,
    )
    first, refused = _learnt_first(store, WatchRequest(contract, None, limits=limits, by=by), record, body, client)
    record = first.record
    accepted = Submission(
        operation_id, print_fp, submission.idempotency_token, body, "accepted", job_id, location, submission.created_at
    )
    event = ev.Submitted.of(record, http_status=exchange.status, resent=resent, first=first)
    try:
        also = () if refused is None else (ev.GuidanceRejected.of(refused),)  # a key of the body, not used
        store.accept_submission(accepted, record, contract.source_text, event, also)
    except JobWatched as exc:
        said = _duplicate(exc.operation_id)
        duplicate = ev.SubmissionDuplicate(http_status=exchange.status, watched_by=exc.operation_id, detail=said)
        store.mark_submission(operation_id, duplicate, now)
        raise ActionError(f"the provider accepted the submission: {said}") from None
    return Submitted(record, resent)


def _learnt_first(
    store: Store, request: WatchRequest, record: OperationRecord, body: bytes, client: StatusClient
) -> tuple[FirstCheck, Rejection | None]:
    """The submitted job's kind (`[schedule] learn_key` in the submitted JSON body) and its first check, placed by
    its contract's learnt history as a watch's is (`core.learnt.first_check`): one read of the samples, not the
    engine's shared cache, whose clock is an engine's. A key the body does not hold, or one refused (an object, a
    secret, too long), is no key: the first answer may still name it. A refused one comes back with its
    rejection, which the submission's trail records (as an answer's is)."""
    contract = request.contract
    spec = contract.submit
    expression = contract.schedule.learn_key
    key, refused = None, None
    if expression is not None and spec is not None and spec.encoding != "form":
        try:
            key, refused = key_value(expression, parse_document(body), client)
        except BodyError:
            key = None
    keyed = record.keyed(key)
    learnt = learning.Models(store, lambda: record.created_at).for_new(request, key)
    return place_first(keyed, learnt, secrets.SystemRandom().random()), refused


def _duplicate(watching: str) -> str:
    return (
        f"its answer names a job that operation {watching} already watches; no second operation (and no second"
        f" budget) was made: follow {watching} with `pollwarden status {watching}`"
    )


def _accepted(contract: Contract, response: Response) -> tuple[str, str | None]:
    """R25: the job id and status resource come from the response as documented, never from a guess."""
    spec = contract.submit
    assert spec is not None
    needs_body = spec.job_id_header is None or (spec.status_location or "").startswith("body:")
    try:  # the same strict reading as a status answer: one hostile body must not make a job id up
        document: Any = parse_document(response.body) if response.body else {}
    except BodyError as exc:
        if needs_body:
            raise ActionError(
                f"the provider accepted the submission but its body cannot be read ({exc}); see `story`"
            ) from None
        document = {}  # everything is taken from headers: the body is not read at all
    job_id = _job_id(spec, response, document)
    if problem := job_id_problem(job_id):
        raise ActionError(f"the job id the provider returned at {spec.job_id!r} {problem}; nothing will be watched")
    location: str | None = None
    if spec.status_location is not None:
        source, _, name = spec.status_location.partition(":")
        raw: Any = response.headers.get(name.lower()) if source == "header" else lookup(name, document).value
        if not isinstance(raw, str) or not raw:
            raise ActionError(f"the provider's answer has no status location in {spec.status_location}")
        location = urljoin(spec.url, raw)
    # Stored (and sent) in the one spelling admission gives the same job, so a watch of it finds this operation.
    canonical = canonical_job(contract, job_id, location)
    for field, problem in canonical.problems:
        if field == "status_location":
            raise ActionError(f"the status location the provider returned {problem}; refusing to poll it")
        raise ActionError(f"the job id the provider returned at {spec.job_id!r} {problem}; nothing will be watched")
    assert isinstance(canonical.job_id, str)
    return canonical.job_id, location if canonical.status_location is None else str(canonical.status_location)


def _job_id(spec: Submit, response: Response, document: Any) -> str:
    """The job id where the contract says: a body field (a string, or an integer as its decimal digits) or the last
    path segment of a header's URL (`header:Location`, as a 201, 202 or 204 names the new resource)."""
    header = spec.job_id_header
    if header is not None:
        raw = response.headers.get(header.lower())
        if raw is None or not raw.strip():
            raise ActionError(f"the provider's answer has no {header} header to take the job id from")
        try:
            path = urlsplit(raw.strip()).path
        except ValueError:
            raise ActionError(f"the provider's {header} header is not a URL; nothing will be watched") from None
        segment = unquote(path.rstrip("/").rpartition("/")[2])
        if not segment or segment in {".", ".."}:
            raise ActionError(f"the provider's {header} header names no job (its last path segment is empty)")
        return segment
    seen = lookup(spec.job_id, document)
    found, value = not seen.missing and seen.problem is None, seen.value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # GitHub, GitLab: numeric ids; the status URL quotes their digits like any id
    if not found or not isinstance(value, str) or not value.strip():
        shown = "missing" if not found else f"a JSON {json_type(value)}" if value is not None else "null"
        raise ActionError(
            f"the provider's answer has no job id at {spec.job_id!r} ({shown}); the contract must say where it is"
        )
    return value


def _wire_body(spec: Submit, body: bytes, token: str | None) -> bytes:
    """The bytes sent: the body file as it is, or with the idempotency token in `idempotency_field`, or as a form.

    Refused (ActionRefused: nothing recorded, nothing sent) when the file cannot be sent that way."""
    if spec.encoding == "json" and (spec.idempotency_field is None or token is None):
        return body
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):  # json recurses once per nesting level
        raise ActionRefused("the submission body is not JSON; nothing was sent") from None
    if not isinstance(document, dict):
        raise ActionRefused(
            f"the submission body is a JSON {json_type(document)}; the contract's [submit] needs an object"
            f" ({'form fields' if spec.encoding == 'form' else 'to hold ' + str(spec.idempotency_field)})"
        )
    if spec.idempotency_field is not None and token is not None:
        if spec.idempotency_field in document:
            raise ActionRefused(
                f"the submission body already has {spec.idempotency_field!r}, where the contract puts the"
                " idempotency token; remove it from the body. Nothing was sent"
            )
        document = {**document, spec.idempotency_field: token}
    if spec.encoding == "json":
        return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    pairs: list[tuple[str, str]] = []
    for key, value in document.items():
        if value is None or isinstance(value, dict | list):
            raise ActionRefused(
                f"the form field {key!r} is a JSON {json_type(value)}; a form body holds strings, numbers and"
                " booleans only. Nothing was sent"
            )
        pairs.append((key, value if isinstance(value, str) else json.dumps(value)))
    return urlencode(pairs).encode("ascii")


def cancel(contract: Contract, client: StatusClient, record: OperationRecord) -> dict[str, Any]:
    """Send the documented cancel once; only a decided decision option calls this."""
    if contract.cancel is None:
        raise ActionRefused(f"contract {contract.name!r} documents no cancel action; there is nothing to send")
    url = contract.cancel.url_for(record.job_id)
    exchange = client.send(contract.cancel.method, url, extra_headers={"Accept": "application/json"})
    if isinstance(exchange, TransportFailure):
        return {"action": "cancel", "ok": False, "detail": exchange.message, "url": _safe_url(url)}
    ok = 200 <= exchange.status < 300
    return {"action": "cancel", "ok": ok, "http_status": exchange.status, "url": _safe_url(url)}


def result_source(contract: Contract, record: OperationRecord) -> str | None:
    """The URL `fetch_result` would download, or None when the result is the output itself (written as JSON);
    ActionRefused for every reason not to fetch at all, before anything is sent or anyone is asked. The URL is
    `[result].url` with the result in it, or the result itself when it is an absolute URL (never resolved against
    the status URL), on the contract's origin or a host `[result].hosts` names; the credential goes along only
    where `[result]` says so, and never off the contract's origin."""
    if (problem := no_result_problem(record)) is not None:
        raise NoResult(problem)
    spec = contract.result
    where, why = fetch_url(spec, record.result, record.job_id)
    if why is not None:
        raise ActionRefused(why)
    if where is None:
        return None
    url = contract.origin + where if where.startswith("/") else where
    if (problem := result_url_problem(spec, contract.origin, url)) is not None:
        raise ActionRefused(problem)
    if spec.credential is True and origin_of(url) != contract.origin:
        raise ActionRefused(
            f"the result is at {_safe_url(origin_of(url))}, not on {contract.origin}: [result].credential = true"
            " sends the credential only to the contract's own origin, so nothing was sent. If that host needs no"
            " credential, set credential = false"
        )
    return url


def fetch_result(contract: Contract, client: StatusClient, record: OperationRecord, out: Path) -> dict[str, Any]:
    """Only after validated success, from where `result_source` says, at an address `core.addresses` allows. An
    object or array result with no URL is the output itself."""
    url = result_source(contract, record)
    if url is None:  # the result is the output: written as the JSON it was received as
        data = (json.dumps(record.result, ensure_ascii=False) + "\n").encode("utf-8")
        out.write_bytes(data)
        return _fetched(record, None, len(data), hashlib.sha256(data).hexdigest(), "application/json", False, out)
    spec = contract.result
    same_origin = origin_of(url) == contract.origin
    # No [result] table: today's rule, the credential along to the contract's own origin only.
    credential = same_origin if spec.credential is None else spec.credential
    try:
        with out.open("wb") as sink:
            got = client.download(url, sink, cap=spec.max_bytes, credential=credential, extra_headers={"Accept": "*/*"})
    except OSError as exc:
        out.unlink(missing_ok=True)
        raise ActionError(f"cannot write the result to {out}: {exc.strerror}") from None
    failed: str | None = None
    if isinstance(got, TransportFailure):
        failed = f"fetching the result failed: {got.message}"
    elif not 200 <= got.status < 300:
        failed = f"fetching the result from {_safe_url(url)} answered HTTP {got.status}"
    elif got.over_cap:
        failed = f"the result is larger than [result].max_bytes ({spec.max_bytes} bytes); the partial one was removed"
    if failed is not None:
        out.unlink(missing_ok=True)  # a reader must never take a fragment for the result
        raise ActionError(f"{failed}; no result file was written")
    assert not isinstance(got, TransportFailure)
    return _fetched(record, url, got.size, got.sha256, got.headers.get("content-type"), credential, out)


def _fetched(
    record: OperationRecord,
    url: str | None,
    size: int,
    sha256: str,
    content_type: str | None,
    credential: bool,
    out: Path,
) -> dict[str, Any]:
    return {
        "action": "fetch_result",
        "ok": True,
        **result_part(record),
        "url": None if url is None else _safe_url(url),
        "bytes": size,
        "sha256": sha256,
        "content_type": content_type,
        "credential_sent": credential,
        "out": str(out),
    }
