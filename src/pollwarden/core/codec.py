"""The record as JSON and back, losslessly: the store persists it and the audit replays from it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from ..errors import PollwardenError
from .contract.parse import Schedule
from .contract.result import Counts
from .learnt_inputs import MAX_KEY
from .observe import Kind, Observation
from .reasons import Category, DelaySource, Jitter, Phase, StopReason
from .record import OperationRecord, Plan
from .schedule import Rejection


def _dt(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _pdt(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _req_dt(text: str) -> datetime:
    return datetime.fromisoformat(text)


def record_to_json(record: OperationRecord) -> dict[str, Any]:
    plan = record.plan
    plan_json: dict[str, Any] = {
        "deadline_at": _dt(plan.deadline_at),
        "max_status_requests": plan.max_status_requests,
        "max_transport_failures": plan.max_transport_failures,
        "max_rate_limited": plan.max_rate_limited,
        "base_delay": plan.schedule.base_delay.total_seconds(),
        "max_delay": plan.schedule.max_delay.total_seconds(),
        "jitter": plan.schedule.jitter.value,
        "first_check": plan.schedule.first_check.total_seconds(),
        "not_found_grace": None if plan.not_found_grace is None else plan.not_found_grace.total_seconds(),
        "useful_until": _dt(plan.useful_until),
    }
    if not plan.schedule.learn:  # the learning keys only when not the defaults: older records stay byte for byte
        plan_json["learn"] = False
    if plan.schedule.lag_target != Schedule().lag_target:
        plan_json["lag_target"] = plan.schedule.lag_target.total_seconds()
    if plan.schedule.learn_key is not None:
        plan_json["learn_key"] = plan.schedule.learn_key
    data: dict[str, Any] = {
        "operation_id": record.operation_id,
        "job_id": record.job_id,
        "contract_name": record.contract_name,
        "contract_fingerprint": record.contract_fingerprint,
        "account": record.account,
        "request_fingerprint": record.request_fingerprint,
        "expected_terminal": list(record.expected_terminal),
        "created_at": _dt(record.created_at),
        "plan": plan_json,
        "next_poll_at": _dt(record.next_poll_at),
        "delay_source": record.delay_source.value,
        "phase": record.phase.value,
        "reason": record.reason.value if record.reason else None,
        "detail": record.detail,
        "status_requests_used": record.status_requests_used,
        "transport_failures_used": record.transport_failures_used,
        "rate_limited_consecutive": record.rate_limited_consecutive,
        "polls_completed": record.polls_completed,
        "last_state": record.last_state,
        "last_http_status": record.last_http_status,
        "last_observed_at": _dt(record.last_observed_at),
        "last_request_id": record.last_request_id,
        "provider_error": record.provider_error,
        "result": record.result,
        "finished_at": _dt(record.finished_at),
        "status_location": record.status_location,
    }
    if record.pending_seen_at is not None:
        data["pending_seen_at"] = _dt(record.pending_seen_at)
    if record.sample_key is not None:  # written only when set, as the counts
        data["sample_key"] = record.sample_key
    if record.woken_at is not None:  # written only when set: a record never woken stays what it was
        data["woken_at"] = _dt(record.woken_at)
    if record.counts is not None:  # written only when set, as token_refused_consecutive below
        data["counts"] = dict(record.counts)
    if record.token_refused_consecutive:
        # Written only when set: every record stored before the counter existed, and every pinned golden record,
        # stays byte for byte what it was; an absent key reads back as 0.
        data["token_refused_consecutive"] = record.token_refused_consecutive
    return data


def record_from_json(data: dict[str, Any]) -> OperationRecord:
    p = data["plan"]
    grace = p.get("not_found_grace")
    plan = Plan(
        deadline_at=_req_dt(p["deadline_at"]),
        max_status_requests=int(p["max_status_requests"]),
        max_transport_failures=int(p["max_transport_failures"]),
        max_rate_limited=int(p["max_rate_limited"]),
        schedule=Schedule(
            base_delay=timedelta(seconds=p["base_delay"]),
            max_delay=timedelta(seconds=p["max_delay"]),
            jitter=Jitter(p["jitter"]),
            first_check=timedelta(seconds=p["first_check"]),
            learn=bool(p.get("learn", True)),
            lag_target=timedelta(seconds=p["lag_target"]) if "lag_target" in p else Schedule().lag_target,
            learn_key=p.get("learn_key") if isinstance(p.get("learn_key"), str) else None,
        ),
        not_found_grace=None if grace is None else timedelta(seconds=grace),
        useful_until=_pdt(p.get("useful_until")),
    )
    return OperationRecord(
        operation_id=data["operation_id"],
        job_id=data["job_id"],
        contract_name=data["contract_name"],
        contract_fingerprint=data["contract_fingerprint"],
        account=data["account"],
        request_fingerprint=data.get("request_fingerprint"),
        expected_terminal=tuple(data.get("expected_terminal", ())),
        created_at=_req_dt(data["created_at"]),
        plan=plan,
        next_poll_at=_req_dt(data["next_poll_at"]),
        delay_source=DelaySource(data["delay_source"]),
        phase=Phase(data["phase"]),
        reason=StopReason(data["reason"]) if data.get("reason") else None,
        detail=data.get("detail"),
        status_requests_used=int(data["status_requests_used"]),
        transport_failures_used=int(data["transport_failures_used"]),
        rate_limited_consecutive=int(data["rate_limited_consecutive"]),
        token_refused_consecutive=int(data.get("token_refused_consecutive", 0)),
        polls_completed=int(data["polls_completed"]),
        last_state=data.get("last_state"),
        last_http_status=data.get("last_http_status"),
        last_observed_at=_pdt(data.get("last_observed_at")),
        last_request_id=data.get("last_request_id"),
        provider_error=data.get("provider_error"),
        result=data.get("result"),
        counts=_counts(data.get("counts")),
        finished_at=_pdt(data.get("finished_at")),
        status_location=data.get("status_location"),
        pending_seen_at=_pdt(data.get("pending_seen_at")),
        sample_key=_key(data.get("sample_key")),
        woken_at=_pdt(data.get("woken_at")),
    )


def _key(value: Any) -> str | None:
    """A stored sample key as `core.learnt_inputs.key_value` kept it; anything else (edited by hand) is none."""
    return value if isinstance(value, str) and 0 < len(value) <= MAX_KEY else None


def _counts(value: Any) -> Counts | None:
    """Counts as `read_counts` kept them; anything else in a stored record (edited by hand) is no counts."""
    if not isinstance(value, dict):
        return None
    kept = tuple((k, v) for k, v in value.items() if isinstance(v, int | float) and not isinstance(v, bool))
    return kept or None


def observation_from_json(data: dict[str, Any]) -> Observation:
    """Rebuild an observation from its audit form, so a recorded decision can be re-run (`why`)."""
    return Observation(
        kind=Kind(data["kind"]),
        observed_at=_req_dt(data["observed_at"]),
        http_status=data.get("http_status"),
        request_id=data.get("request_id"),
        state=data.get("state"),
        category=Category(data["category"]) if data.get("category") else None,
        result=data.get("result"),
        result_problem=data.get("result_problem"),
        provider_error=data.get("provider_error"),
        expires_at=_pdt(data.get("expires_at")),
        retry_after=_pdt(data.get("retry_after")),
        retry_after_header=data.get("retry_after_header"),
        hint_at=_pdt(data.get("hint_at")),
        hint_field=data.get("hint_field"),
        rejections=tuple(Rejection(r["source"], r["value"], r["why"]) for r in data.get("rejections", ())),
        delivery_unknown=bool(data.get("delivery_unknown", False)),
        detail=data.get("detail", ""),
        counts=_counts(data.get("counts")),
        learn_key=data.get("learn_key"),
        estimate_at=_pdt(data.get("estimate_at")),
    )


class RecordError(PollwardenError, ValueError):
    """A stored record that cannot be decoded: not JSON, a field missing or of the wrong type, an unknown phase, or
    the record of another operation. The message says which, in words that quote at most a short value."""


_TEXT = ("operation_id", "job_id", "contract_name", "contract_fingerprint", "account")
_TEXT_OR_NONE = ("request_fingerprint", "detail", "last_state", "last_request_id", "provider_error", "status_location")
_COUNTS = ("status_requests_used", "transport_failures_used", "rate_limited_consecutive", "token_refused_consecutive",
           "polls_completed")  # fmt: skip
_TIMES = ("created_at", "next_poll_at")
_TIMES_OR_NONE = ("last_observed_at", "finished_at", "pending_seen_at", "woken_at")


def decode_record(text: object, operation_id: str | None = None) -> OperationRecord:
    """The record a store row holds, or RecordError saying why it cannot be one. `record_from_json` trusts its
    input (a record pollwarden wrote); a row is read back from a file anyone with access could have edited, and a
    wrong type there would surface later, as a traceback in whatever reads the field. `operation_id`: the row's."""
    if not isinstance(text, str):
        raise RecordError("the record is not text")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise RecordError("the record is not JSON") from None
    if not isinstance(data, dict):
        raise RecordError("the record is not a JSON object")
    try:
        record = record_from_json(data)
    except KeyError as exc:
        raise RecordError(f"the record lacks the field {_quoted(exc.args[0] if exc.args else '?')}") from None
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise RecordError(f"a field of the record has the wrong type or value ({_quoted(exc)})") from None
    problem = _record_problem(record)
    if problem is not None:
        raise RecordError(problem)
    if operation_id is not None and record.operation_id != operation_id:
        raise RecordError(f"the record is that of operation {_quoted(record.operation_id)}, not of this row")
    return record


def _quoted(value: object) -> str:
    text = str(value)
    return repr(text if len(text) <= 80 else text[:80] + "…")


def _record_problem(record: OperationRecord) -> str | None:
    """The first field whose type is not the one the record promises, in words; None when all are."""
    for name in _TEXT:
        if not isinstance(getattr(record, name), str):
            return f"the record's {name} is not text"
    for name in _TEXT_OR_NONE:
        if not isinstance(getattr(record, name), str | None):
            return f"the record's {name} is neither text nor null"
    if not all(isinstance(state, str) for state in record.expected_terminal):
        return "the record's expected_terminal is not a list of text"
    if record.last_http_status is not None and (
        isinstance(record.last_http_status, bool) or not isinstance(record.last_http_status, int)
    ):
        return "the record's last_http_status is neither an integer nor null"
    for name in _COUNTS:
        if getattr(record, name) < 0:
            return f"the record's {name} is negative"
    plan = record.plan
    if plan.max_status_requests < 0 or plan.max_transport_failures < 0 or plan.max_rate_limited < 0:
        return "a budget of the record's plan is negative"
    times = [(name, getattr(record, name)) for name in _TIMES] + [("deadline_at", plan.deadline_at)]
    optional = [(name, getattr(record, name)) for name in _TIMES_OR_NONE] + [("useful_until", plan.useful_until)]
    for name, moment in times + [(n, m) for n, m in optional if m is not None]:
        if moment.tzinfo is None or moment.utcoffset() is None:
            return f"the record's {name} has no time zone"
    return None
