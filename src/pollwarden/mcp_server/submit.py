"""`submit_job`: an agent submits a job as the contract's `[submit]` table documents, and the job is watched.

The submission path is the one `pollwarden submit` takes (`actions.submit`): the request's fingerprint and its
idempotency token are durable before anything is sent, a lost answer is resent only under that token, and the
job id (or status URL) comes from the provider's answer as the contract says. What this adds for an agent:

- one operation per request: its id is derived from the contract and the request's fingerprint, so the same body
  asked for again finds that operation (and its watch) instead of submitting a second job;
- the submission is a provider call like any other: the contract's approval mode gates it (`gates.gated_call`),
  and the agent's caps bound the watch it asks for, exactly as start_watch's;
- the body is an argument, so hostile until parsed: a JSON object, of bounded size, holding no credential.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from datetime import datetime
from typing import Any

from ..actions.provider import ActionError, ActionRefused, Submitted, fingerprint, submit
from ..core.admission import Limits, WatchRequest, granted_limits, operations_refused, submission_operation_id
from ..core.contract.parse import Contract
from ..core.durations import format_rfc3339
from ..engine.preamble import Credentials, Refused, ready
from ..store.base import Store, Submission
from .base import MAX_BODY_CHARS, CallContext, ToolFailure
from .gates import Subject, gated_call
from .session import Session
from .tools import agent_limits, announce, refused, watch_reply
from .views import final

_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


def _lock_for(operation_id: str) -> threading.Lock:
    """One submission of a request at a time in this server: a host that retries a call it gave up on while the
    first still runs gets the first one's operation, not a race for the same row."""
    with _locks_lock:
        return _locks.setdefault(operation_id, threading.Lock())


def tool_submit_job(
    broker: Session,
    call: CallContext,
    contract: str,
    body: object,
    deadline: str | float | None = None,
    max_requests: int | None = None,
) -> dict[str, Any]:
    served = broker.contract(contract)
    spec = served.submit
    if spec is None:
        raise ToolFailure(
            "no_submit",
            f"contract {served.name!r} documents no submission (it has no [submit] table); start_watch watches a"
            " job submitted elsewhere. Nothing was sent",
        )
    broker.ready(served)
    data = _body(broker, body)
    # The watch the submission creates is bounded as start_watch's is: the agent's caps, and they are its defaults.
    request = WatchRequest(
        served,
        None,
        limits=agent_limits(deadline, max_requests),
        by=broker.requester,
        agent=True,
    )
    try:  # the preamble's checks, as start_watch's: before the store is opened
        request = ready(request, Credentials.GIVEN).request
    except Refused as exc:
        raise refused(exc) from None
    granted_deadline, granted_requests = granted_limits(request)
    request_fingerprint = fingerprint(spec.method, spec.url, data)
    operation_id = submission_operation_id(served.name, request_fingerprint)
    with _lock_for(operation_id), broker.store() as store:
        existing = store.get_submission(operation_id)
        if existing is not None:
            _refuse_anothers(broker, store, existing)
            if existing.state == "accepted":
                return _reply(broker, store, served, existing, resent=False, created=False)
            if existing.state == "rejected":
                raise ToolFailure(
                    "submit_rejected",
                    f"the provider refused this very request before (submission {operation_id}, recorded"
                    f" {format_rfc3339(existing.created_at)}); sending it again would be refused again. Change the"
                    " body. Nothing was sent",
                    operation_id=operation_id,
                )
        now = broker.clock()
        subject = Subject(
            operation_id=operation_id,
            job_id=None,
            status_requests_used=0,
            max_status_requests=granted_requests or served.limits.max_requests,
            deadline_at=now + (granted_deadline or served.limits.deadline),
        )

        def send() -> tuple[Submitted, dict[str, Any]]:
            with broker.client(served) as client:
                try:
                    submitted = submit(
                        store,
                        served,
                        client,
                        operation_id=operation_id,
                        body=data,
                        now=broker.clock(),
                        limits=Limits(deadline=granted_deadline, max_requests=granted_requests),
                        by=broker.requester,
                    )
                except ActionRefused as exc:
                    if existing is None and store.get_submission(operation_id) is not None:
                        # Another server process recorded this very request in the meantime.
                        raise ToolFailure(
                            "busy",
                            "the same request was recorded by another call a moment ago; call submit_job again to"
                            " get its operation. This call sent nothing",
                            operation_id=operation_id,
                        ) from None
                    raise ToolFailure("submit_refused", f"{exc}", operation_id=operation_id) from None
                except ActionError as exc:
                    raise _failed(store, operation_id, exc) from None
            record = submitted.record
            return submitted, {"outcome": "sent", "job": record.job_id, "resent": submitted.resent}

        with broker.creating(served) as creation:  # a new submission is a new operation: the session's cap
            if (capped := operations_refused(replace(request, created_before=creation.before))) is not None:
                raise refused(capped)
            submitted = gated_call(broker, store, served, subject, "submit", call, send)
            creation.made = True
        accepted = store.get_submission(operation_id)
        assert accepted is not None  # accept_submission wrote it with the operation
        return _reply(broker, store, served, accepted, resent=submitted.resent, created=True)


def _body(broker: Session, body: object) -> bytes:
    """The request body as compact JSON with its keys sorted (one object, one fingerprint, however its keys were
    ordered): an object, at most MAX_BODY_CHARS, with no credential of this server."""
    if not isinstance(body, dict):
        kind = "a string" if isinstance(body, str) else "an array" if isinstance(body, list) else "not an object"
        raise ToolFailure(
            "invalid_argument",
            f"body must be a JSON object (the request's fields), and this one is {kind}. Nothing was sent",
        )
    try:
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False)
    except (ValueError, RecursionError):  # NaN or infinity, or nested past what can be encoded
        raise ToolFailure("invalid_argument", "body is not JSON that can be sent as it is. Nothing was sent") from None
    if len(text) > MAX_BODY_CHARS:
        raise ToolFailure(
            "invalid_argument",
            f"body is {len(text)} characters of JSON; at most {MAX_BODY_CHARS} are accepted (a job's parameters,"
            " not its data). Nothing was sent",
        )
    if broker.scrubber.found_in(text):
        raise ToolFailure("invalid_argument", "body holds a credential this server keeps; nothing was sent")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate that reached here escaped
        raise ToolFailure("invalid_argument", "body holds text that is not Unicode. Nothing was sent") from None


def _refuse_anothers(broker: Session, store: Store, existing: Submission) -> None:
    """A request an agent session did not submit (a person's, under this operation id) is not the agent's."""
    if not broker.agent_made(store, existing.operation_id):
        raise ToolFailure(
            "conflict",
            "this request was submitted by a person, not an agent session; an agent may not act on it. Nothing"
            " was sent",
        )


def _failed(store: Store, operation_id: str, exc: ActionError) -> ToolFailure:
    """A submission that was tried and did not end in a job: what is known, and whether calling again is safe."""
    recorded = store.get_submission(operation_id)
    state = recorded.state if recorded is not None else "not_sent"
    if state == "not_sent":
        then = "it was not delivered, so calling submit_job again with the same body is safe"
    elif state == "unknown" and recorded is not None and recorded.idempotency_token:
        then = (
            "its outcome is unknown; calling submit_job again with the same body resends it with the same"
            " idempotency token, which the provider deduplicates"
        )
    elif state == "unknown":
        then = (
            "its outcome is unknown and the provider offers no idempotency: a person must check the provider;"
            " calling again will not resend it"
        )
    else:
        then = "a person may look at it with `pollwarden story`"
    return ToolFailure("submit_failed", f"{exc}. For you: {then}", operation_id=operation_id, submission=state)


def _reply(
    broker: Session, store: Store, served: Contract, submission: Submission, *, resent: bool, created: bool
) -> dict[str, Any]:
    """start_watch's answer for the submitted job, and the submission's facts (never its idempotency token)."""
    _, record = broker.operation(store, submission.operation_id)
    announce(broker, store, served, record, created=created)
    now: datetime = broker.clock()
    spec = served.submit
    facts = {
        "submitted": created,
        "already_submitted": not created,
        "request_fingerprint": submission.fingerprint,
        "idempotent": submission.idempotency_token is not None,
        "idempotency_header": spec.idempotency_header if spec is not None else None,
        "resent_with_same_token": resent,
        "status_location": submission.status_location,
        "recorded_at": format_rfc3339(submission.created_at),
    }
    if record.is_final:
        return {**final(store, record, now), "operation_id": record.operation_id, "reused": True, "submission": facts}
    answer = watch_reply(served, record, now, created=created)
    if not created:
        answer["message"] = (
            f"this request was already submitted as job {record.job_id} (same body, same fingerprint); nothing"
            f" was sent again. {answer['message']}"
        )
    return {**answer, "submission": facts}
