"""What an agent reads: the JSON views of operations and decisions and the replies to a controller step."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..core.durations import format_rfc3339
from ..core.escalation import DecisionRequest, stop_marker
from ..core.reasons import Phase
from ..core.record import OperationRecord, provider_error_value
from ..core.result_part import part_words, result_part
from ..engine import Busy, Done, NotYet, Polled, StepResult
from ..store.base import Store
from ..store.roles import Decisions


def seconds_until(moment: datetime, now: datetime) -> float:
    return round(max(0.0, (moment - now).total_seconds()), 3)


def view(record: OperationRecord, now: datetime) -> dict[str, Any]:
    """What an agent sees of an operation: its budget and clock, never the credential context."""
    final = record.is_final
    return {
        "operation_id": record.operation_id,
        "contract": record.contract_name,
        "job_id": record.job_id,
        "phase": record.phase.value,
        "reason": record.reason.value if record.reason else None,
        "detail": record.detail,
        "last_state": record.last_state,
        "last_http_status": record.last_http_status,
        "status_requests_used": record.status_requests_used,
        "max_status_requests": record.plan.max_status_requests,
        "deadline_at": format_rfc3339(record.deadline_at),
        "seconds_to_deadline": seconds_until(record.deadline_at, now),
        "next_check_at": None if final else format_rfc3339(record.due_at),
        "result": record.result,
        **result_part(record),
        "provider_error": provider_error_value(record.provider_error),  # a JSON value, not escaped JSON text
    }


def decision_view(request: DecisionRequest, status: str = "open") -> dict[str, Any]:
    return {
        "decision_id": request.decision_id,
        "status": status,
        "reason": request.reason.value if request.reason else None,
        "topic": request.topic.value,
        "requested_by": request.requested_by,
        "request_reason": request.request_reason,
        "options": [o.to_json() for o in request.options],
        "message": request.render(),
        "decided_by_a_person_with": f"pollwarden decide {request.decision_id} --option N --by NAME (or the console)",
    }


def reply(store: Store, result: StepResult, now: datetime) -> dict[str, Any]:
    """The reply to one controller step."""
    if isinstance(result, Polled):
        record = result.decision.record
        if record.is_final:
            return final(store, record, now, polled=True)
        return {
            "status": "polled",
            "state": record.last_state,
            "http_status": record.last_http_status,
            "retry_after_seconds": seconds_until(record.due_at, now),
            "delay_source": record.delay_source.value,
            "operation": view(record, now),
        }
    if isinstance(result, NotYet):
        return not_yet(result.record, result.until, now)
    if isinstance(result, Busy):
        return {
            "status": "busy",
            "message": "another worker is polling this operation right now; look again shortly",
            "retry_after_seconds": seconds_until(result.retry_at, now),
            "operation": view(result.record, now),
        }
    assert isinstance(result, Done)
    return final(store, result.record, now)


def not_yet(record: OperationRecord, until: datetime, now: datetime) -> dict[str, Any]:
    wait = seconds_until(until, now)
    return {
        "status": "not_yet",
        "message": f"not yet: the next status check is due in {wait:g} s; no request was sent",
        "retry_after_seconds": wait,
        "next_check_at": format_rfc3339(until),
        "operation": view(record, now),
    }


def final(store: Decisions, record: OperationRecord, now: datetime, *, polled: bool = False) -> dict[str, Any]:
    if record.phase is Phase.SUCCEEDED:
        return {
            "status": "succeeded",
            "polled": polled,
            "result": record.result,
            "message": "the job succeeded with a validated result; fetch_result(operation_id) retrieves it",
            "operation": view(record, now),
        }
    marker = stop_marker(record)
    current = [d for d in store.decisions(record.operation_id, open_only=True) if d.request.stop_marker == marker]
    decision = current[-1].request if current else None
    job_ended = bool(record.reason and record.reason.job_ended)
    return {
        "status": "stopped",
        "polled": polled,
        "reason": record.reason.value if record.reason else None,
        "detail": record.detail,
        "job_ended": job_ended,
        "decision": decision_view(decision) if decision is not None else None,
        "message": (
            f"the job ended at the provider without success; {part_words(record)}, which fetch_result(operation_id)"
            " retrieves"
            if record.partial
            else "the job ended at the provider without success"
            if job_ended
            else "waiting stopped and needs a person's decision; you may ask for more with request_extension,"
            " but only a person can grant it"
        ),
        "operation": view(record, now),
    }
