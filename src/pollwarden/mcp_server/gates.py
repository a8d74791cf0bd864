"""The fixed order of every provider call an agent causes, and the two approval gates in it.

    configuration ready -> per-call gate -> session gate -> durable "intent" record -> call -> result record

A per-call gate waits (bounded by `[agent].approval_timeout`) for `pollwarden approve-call`; a session gate needs
one `pollwarden approve-session` per agent session and contract, revocable. A missing answer is a distinct
`approval_timeout`, never a silent yes.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .. import events as ev
from ..core.contract.parse import Contract
from ..core.durations import format_duration, format_rfc3339
from ..core.reasons import Phase
from ..core.record import OperationRecord
from ..errors import PollwardenError
from ..report.progress import Progress, progress_of_record
from ..store.base import Grant, Store
from .base import ANSWER_MARGIN_SECONDS, APPROVAL_POLL_SECONDS, CallContext, T, ToolFailure, log, recorded_after
from .session import Session


@dataclass(frozen=True)
class Subject:
    """What a provider call is about, as the gates and their records name it: an operation, or a submission that
    is to create one (its operation id is known before the job's, its budget before it is granted)."""

    operation_id: str
    job_id: str | None
    status_requests_used: int
    max_status_requests: int
    deadline_at: datetime

    def progress(self, now: datetime) -> Progress:
        """What a waiter is shown before the operation exists: nothing seen, nothing used, its deadline."""
        return Progress(
            operation_id=self.operation_id,
            job_id=self.job_id or "",
            phase=Phase.ACTIVE,
            state=None,
            checks_used=self.status_requests_used,
            checks_allowed=self.max_status_requests,
            next_check_at=None,
            delay_source=None,
            deadline_at=self.deadline_at,
            created_at=now,
            reason=None,
            polled=False,
        )

    @classmethod
    def of(cls, record: OperationRecord) -> Subject:
        return cls(
            record.operation_id,
            record.job_id,
            record.status_requests_used,
            record.plan.max_status_requests,
            record.deadline_at,
        )


class RequestMade(PollwardenError):
    """The status request a call waits to have approved was made meanwhile, or its operation finished (the call
    that asked went on after its host cut it, before the server heard): nobody need answer; the caller looks
    again."""


def _moved_on(store: Store, record: Subject) -> str | None:
    stored = store.get(record.operation_id)  # None: a submission's operation, not created yet
    if stored is None:
        return None
    if stored.record.is_final:
        return "the operation finished"
    if stored.record.status_requests_used != record.status_requests_used:
        return "another call made this check"
    return None


def gated_call(
    broker: Session,
    store: Store,
    contract: Contract,
    about: OperationRecord | Subject,
    purpose: str,
    call: CallContext,
    send: Callable[[], tuple[T, dict[str, Any]]],
) -> T:
    """The fixed order for every provider call: ready, per-call gate, session gate, intent, call, result."""
    if isinstance(about, OperationRecord):
        broker.provider_ready(contract, about)  # and made with this very contract
        record = Subject.of(about)
        if call.progress is not None:  # heartbeats have something to describe while a person approves the call
            call.progress.prime(progress_of_record(about))
    else:
        broker.ready(contract)
        record = about
        if call.progress is not None:
            call.progress.prime(record.progress(broker.clock()))
    grant_id: str | None = None
    if contract.approval == "per_call":
        grant_id = _per_call_gate(broker, store, contract, record, purpose, call)
    if contract.approval == "session":
        grant_id = _session_gate(broker, store, contract, record, purpose)
    number = broker.next_call_number()
    intent = {
        "call": number,
        "purpose": purpose,
        "operation": record.operation_id,
        "contract": contract.name,
        "job": record.job_id,
        "approval": contract.approval,
        "grant_id": grant_id,
        "status_requests_used": record.status_requests_used,
        "max_status_requests": record.max_status_requests,
        "agent": broker.principal,
    }
    broker.audit(store, ev.CallIntent.prepared(intent))
    try:
        value, outcome = send()
    except ToolFailure as failure:
        _result(broker, store, {"call": number, "operation": record.operation_id, "outcome": failure.code})
        raise
    except Exception as exc:
        # The agent gets a named failure; the operator gets the (scrubbed) traceback of what no path expected.
        log.exception("provider call %s for %s failed", number, record.operation_id)
        _result(broker, store, {"call": number, "operation": record.operation_id, "outcome": "error"})
        raise ToolFailure("call_failed", f"the provider call failed: {exc.__class__.__name__}") from None
    _result(broker, store, {"call": number, "operation": record.operation_id, **outcome})
    return value


def _result(broker: Session, store: Store, data: Mapping[str, Any]) -> None:
    # The call has happened and its facts are in the operation's own log; a failed result record is
    # reported to the operator, not turned into a second call.
    recorded_after(store, broker.log_id, ev.CallResult.prepared(dict(data)), broker.clock(), f"call {data.get('call')}")


def _request(broker: Session, store: Store, grant: Grant) -> None:
    """Records a request for a person's approval; a call whose request cannot be audited is refused, not made."""
    try:
        store.request_grant(grant, broker.log_id)
    except Exception as exc:
        raise ToolFailure(
            "audit_unavailable", f"the approval request could not be recorded ({exc.__class__.__name__})"
        ) from None


def _deny(broker: Session, store: Store, record: Subject, reason: str, grant_id: str | None) -> None:
    with contextlib.suppress(ToolFailure):
        broker.audit(store, ev.CallDenied(operation=record.operation_id, why=reason, grant_id=grant_id))


def _per_call_gate(
    broker: Session, store: Store, contract: Contract, record: Subject, purpose: str, call: CallContext
) -> str:
    """One grant per call; wait for a person, bounded; silence is `approval_timeout`, never a yes.

    A call that must answer first (`call.answer_by`: a wait without progress) leaves its grant pending and says
    so; the next call for the same request waits on that grant (or uses it, once a person approved it) instead of
    asking the person again."""
    now = broker.clock()
    timeout = contract.agent.approval_timeout
    number = record.status_requests_used + 1 if purpose == "status_request" else None
    grant = _open_grant(broker, store, record, purpose, number, timeout)
    if grant is not None and grant.status == "approved":
        return grant.grant_id
    asking = grant is None
    if grant is None:
        grant = Grant(
            grant_id="c" + secrets.token_hex(5),
            kind="call",
            subject=broker.session_id,
            scope=record.operation_id,
            status="pending",
            requested_at=now,
            detail={
                "contract": contract.name,
                "operation": record.operation_id,
                "job": record.job_id,
                "purpose": purpose,
                "status_request": number,
                "max_status_requests": record.max_status_requests,
                "deadline_at": format_rfc3339(record.deadline_at),
                "expires_at": format_rfc3339(now + timeout),
            },
        )
    how = f"pollwarden approve-call {grant.grant_id} {broker.person_flags} (or --refuse)"
    # Said before the grant is recorded: once a person can see the grant, every note of this call names it (said
    # after, a heartbeat between the two would still describe the operation, on a loaded machine).
    if call.progress is not None:
        call.progress.awaiting(f"waiting for approval {grant.grant_id} by {broker.approvers}: {how}")
    try:
        if asking:
            _request(broker, store, grant)
        if call.notify is not None:
            with contextlib.suppress(Exception):
                call.notify(f"waiting up to {format_duration(timeout)} for a person: {how}")
        # A grant asked for by an earlier call keeps the time it was given then.
        ends = time.monotonic() + (grant.requested_at + timeout - now).total_seconds()
        return _await_grant(broker, store, record, call, _Waiting(grant, purpose, timeout, ends, how))
    finally:
        if call.progress is not None:
            call.progress.awaiting(None)


@dataclass(frozen=True)
class _Waiting:
    """One call's wait on a person's answer to `grant`."""

    grant: Grant
    purpose: str
    timeout: timedelta
    """The contract's `[agent].approval_timeout`."""
    ends: float
    """The `time.monotonic()` at which the grant's time runs out (kept from when it was first asked for)."""
    how: str
    """The command that answers it, as a person reads it."""


def _await_grant(broker: Session, store: Store, record: Subject, call: CallContext, waiting: _Waiting) -> str:
    """Until a person answers, the grant's time runs out, or the call must answer first (the grant stays open)."""
    grant, purpose, timeout, ends, how = waiting.grant, waiting.purpose, waiting.timeout, waiting.ends, waiting.how
    while True:
        current = store.get_grant(grant.grant_id)
        status = current.status if current is not None else "missing"
        if status == "approved":
            return grant.grant_id
        if status != "pending":
            by = current.decided_by if current is not None else None
            _deny(broker, store, record, f"approval_{status}", grant.grant_id)
            raise ToolFailure(
                "approval_refused",
                f"a person refused this {purpose.replace('_', ' ')} (grant {grant.grant_id}); nothing was sent",
                grant_id=grant.grant_id,
                refused_by=by,
                operation_id=record.operation_id,
            )
        moved = _moved_on(store, record) if purpose == "status_request" else None
        if moved is not None:
            if _expire(broker, store, grant.grant_id, f"not needed any more: {moved}"):
                raise RequestMade(moved)
            continue  # a person answered in the same instant: that answer is read again
        gone = broker.stopping.is_set()
        # The margin is the approved poll's, still to be made within the bound: the person is waited for less.
        due = call.answer_by is not None and call.answer_by - ANSWER_MARGIN_SECONDS <= time.monotonic()
        cut = call.cancelled.is_set() or due
        if not gone and cut and time.monotonic() < ends:
            # The host cut the call, or it must answer now: the grant stays open for the next call, which a
            # person's approval (at 65 s, say) then lets through.
            raise ToolFailure(
                "approval_pending",
                f"a person has not answered approval {grant.grant_id} for this {purpose.replace('_', ' ')}"
                f" yet; it stays open until {format_rfc3339(grant.requested_at + timeout)} and nothing was"
                f" sent. Calling again is free and waits for that same approval (nobody is asked twice): {how}",
                grant_id=grant.grant_id,
                approve_with=how,
                approvers=broker.approvers,
                operation_id=record.operation_id,
            )
        if gone or time.monotonic() >= ends:
            note = "the session ended" if gone else f"no answer within {format_duration(timeout)}"
            if not _expire(broker, store, grant.grant_id, note):
                continue  # a person answered in the last instant: that answer counts
            _deny(broker, store, record, "approval_timeout", grant.grant_id)
            raise ToolFailure(
                "approval_timeout",
                f"no person approved this {purpose.replace('_', ' ')} within {format_duration(timeout)}"
                f" ([agent].approval_timeout); grant {grant.grant_id} expired and nothing was sent. Calling"
                " again asks again",
                grant_id=grant.grant_id,
                operation_id=record.operation_id,
            )
        broker.stopping.wait(min(APPROVAL_POLL_SECONDS, max(0.0, ends - time.monotonic())))


def _expire(broker: Session, store: Store, grant_id: str, note: str, at: datetime | None = None) -> bool:
    """Close a pending grant nobody answered, as pollwarden; False when a person answered it first."""
    return store.decide_grant(
        grant_id,
        expect="pending",
        status="expired",
        by="pollwarden",
        at=broker.clock() if at is None else at,
        log_id=broker.log_id,
        note=note,
    )


def _open_grant(
    broker: Session, store: Store, record: Subject, purpose: str, number: int | None, timeout: timedelta
) -> Grant | None:
    """This session's grant for this very request that is still open: pending within its time, or approved within
    it and unused (a status request's approval names the request's number, which the sent request uses up). A
    pending one past its time is expired here, as the call that asked for it would have."""
    now = broker.clock()
    for grant in reversed(store.grants(kind="call", subject=broker.session_id)):
        detail = grant.detail
        if grant.scope != record.operation_id or detail.get("purpose") != purpose:
            continue
        if detail.get("status_request") != number:
            continue
        closes = grant.requested_at + timeout
        if grant.status == "pending" and now < closes:
            return grant
        if grant.status == "pending":
            _expire(broker, store, grant.grant_id, f"no answer within {format_duration(timeout)}", at=now)
        elif grant.status == "approved" and number is not None and grant.decided_at and grant.decided_at <= closes:
            return grant
    return None


def _session_gate(broker: Session, store: Store, contract: Contract, record: Subject, purpose: str) -> str:
    """One approval per agent session and contract; revoked means ask again, refused means no for good."""
    mine = [g for g in store.grants(kind="session", subject=broker.session_id) if g.scope == contract.name]
    latest = mine[-1] if mine else None
    if latest is not None and latest.status == "approved":
        return latest.grant_id
    if latest is not None and latest.status == "refused":
        _deny(broker, store, record, "session_refused", latest.grant_id)
        raise ToolFailure(
            "approval_refused",
            f"a person refused this agent session the use of contract {contract.name!r}"
            f" (grant {latest.grant_id}); nothing was sent",
            grant_id=latest.grant_id,
            refused_by=latest.decided_by,
            operation_id=record.operation_id,
        )
    if latest is None or latest.status != "pending":
        latest = Grant(
            grant_id="s" + secrets.token_hex(5),
            kind="session",
            subject=broker.session_id,
            scope=contract.name,
            status="pending",
            requested_at=broker.clock(),
            detail={
                "contract": contract.name,
                "first_operation": record.operation_id,
                "first_purpose": purpose,
                "after": latest.grant_id if latest is not None else None,
            },
        )
        _request(broker, store, latest)
    _deny(broker, store, record, "approval_required", latest.grant_id)
    raise ToolFailure(
        "approval_required",
        f"contract {contract.name!r} needs a person to approve this agent session before any provider call;"
        f" nothing was sent. Ask them to run: pollwarden approve-session {latest.grant_id} {broker.person_flags},"
        " then call again",
        grant_id=latest.grant_id,
        approve_with=f"pollwarden approve-session {latest.grant_id} {broker.person_flags}",
        session=broker.session_id,
        operation_id=record.operation_id,
    )
