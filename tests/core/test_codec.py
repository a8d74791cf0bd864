"""The record survives JSON and back exactly, in every phase: the store and the audit replay depend on it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from pollwarden.core import DelaySource, FailureKind, Jitter, OperationRecord, Phase, Response, StopReason, observe
from pollwarden.core.codec import observation_from_json, record_from_json, record_to_json
from pollwarden.core.contract.parse import Schedule
from pollwarden.core.record import Plan

from .support import T0, body, failure, make_contract, make_record, poll, response
from .test_observe import C, bodies, headers


def roundtrip(record: OperationRecord) -> OperationRecord:
    return record_from_json(json.loads(json.dumps(record_to_json(record))))


def test_fresh_record_roundtrips() -> None:
    record = make_record(request_fingerprint="sha256:abc")
    assert roundtrip(record) == record


def test_records_from_real_decisions_roundtrip() -> None:
    c = make_contract(grace="30s")
    fresh = make_record(c)
    waiting = poll(c, fresh, response(status=503, headers={"retry-after": "120", "x-request-id": "r-1"})).record
    succeeded = poll(c, fresh, response(body("succeeded", result_url="https://f.example/r"))).record
    failed = poll(c, fresh, response(body("failed", error={"code": "E1"}))).record
    ambiguous = poll(c, make_record(c, max_transport_failures=1), failure(FailureKind.TIMEOUT)).record
    assert waiting.delay_source is DelaySource.PROVIDER_RETRY_AFTER
    assert succeeded.phase is Phase.SUCCEEDED
    assert failed.provider_error == '{"code": "E1"}'
    assert ambiguous.reason is StopReason.AMBIGUOUS_DELIVERY
    for record in (fresh, waiting, succeeded, failed, ambiguous):
        assert roundtrip(record) == record


def test_json_shape_is_plain() -> None:
    data = record_to_json(make_record())
    assert data["plan"]["base_delay"] == 5.0
    assert data["plan"]["jitter"] == "bounded"
    assert data["plan"]["not_found_grace"] is None
    assert data["phase"] == "active"
    assert data["reason"] is None
    assert data["created_at"] == "2025-04-18T10:20:00+00:00"
    assert data["expected_terminal"] == ["succeeded", "failed", "cancelled", "expired"]


moments = st.datetimes(
    min_value=datetime(2000, 1, 1),
    max_value=datetime(2100, 1, 1),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]),
)
durations = st.integers(min_value=1, max_value=366 * 86400 * 1000).map(lambda ms: timedelta(milliseconds=ms))
micro_durations = st.integers(min_value=0, max_value=366 * 86400 * 10**6).map(lambda us: timedelta(microseconds=us))
counts = st.integers(min_value=0, max_value=1_000_000)
texts = st.text(max_size=40)

plans = st.builds(
    Plan,
    deadline_at=moments,
    max_status_requests=st.integers(min_value=1, max_value=1_000_000),
    max_transport_failures=counts,
    max_rate_limited=st.integers(min_value=1, max_value=1_000_000),
    schedule=st.builds(
        Schedule,
        base_delay=durations,
        max_delay=durations,
        jitter=st.sampled_from(list(Jitter)),
        first_check=micro_durations,
    ),
    not_found_grace=st.none() | micro_durations,
)


@st.composite
def records(draw: st.DrawFn) -> OperationRecord:
    phase = draw(st.sampled_from(list(Phase)))
    final = phase is not Phase.ACTIVE
    reason = None
    if phase is Phase.STOPPED:
        reason = draw(st.sampled_from(list(StopReason)))
    elif phase is Phase.ACTIVE:
        reason = draw(st.none() | st.sampled_from(list(StopReason)))
    return OperationRecord(
        operation_id=draw(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,40}\Z")),
        job_id=draw(texts),
        contract_name=draw(texts),
        contract_fingerprint=draw(st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)),
        account=draw(texts),
        request_fingerprint=draw(st.none() | texts),
        expected_terminal=tuple(draw(st.lists(texts, max_size=5))),
        created_at=draw(moments),
        plan=draw(plans),
        next_poll_at=draw(moments),
        delay_source=draw(st.sampled_from(list(DelaySource))),
        phase=phase,
        reason=reason,
        detail=draw(st.none() | texts),
        status_requests_used=draw(counts),
        transport_failures_used=draw(counts),
        rate_limited_consecutive=draw(counts),
        polls_completed=draw(counts),
        last_state=draw(st.none() | texts),
        last_http_status=draw(st.none() | st.integers(min_value=100, max_value=599)),
        last_observed_at=draw(st.none() | moments),
        last_request_id=draw(st.none() | texts),
        provider_error=draw(st.none() | texts),
        result=draw(st.none() | texts) if phase is Phase.SUCCEEDED else None,
        finished_at=draw(moments) if final else None,
    )


@settings(max_examples=300, deadline=None)
@given(records())
def test_any_record_roundtrips(record: OperationRecord) -> None:
    back = roundtrip(record)
    assert back == record
    assert back.plan == record.plan
    assert back.summary() == record.summary()
    assert record_to_json(back) == record_to_json(record)


def test_roundtrip_keeps_the_instant_for_non_utc_offsets() -> None:
    shifted = T0.astimezone(timezone(timedelta(hours=2)))
    record = make_record(now=shifted)
    back = roundtrip(record)
    assert back.created_at == T0
    assert back.deadline_at == T0 + timedelta(minutes=40)


@settings(max_examples=200, deadline=None)
@given(
    status=st.sampled_from([200, 200, 200, 302, 401, 404, 418, 429, 500, 503]),
    payload=bodies,
    hdrs=headers,
    latency_us=st.integers(min_value=0, max_value=60_000_000),
)
def test_observations_roundtrip_through_their_audit_form(
    status: int, payload: bytes, hdrs: dict[str, str], latency_us: int
) -> None:
    received = T0 + timedelta(microseconds=latency_us)
    obs = observe(C, Response(status, hdrs, payload, sent_at=T0, received_at=received))
    back = observation_from_json(json.loads(json.dumps(obs.to_json())))
    assert back == obs


def test_transport_observation_roundtrips() -> None:
    obs = observe(C, failure(FailureKind.RESET, at=T0 + timedelta(microseconds=1)))
    assert observation_from_json(obs.to_json()) == obs
