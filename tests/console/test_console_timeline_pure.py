"""The timeline and the follow-ups as pure functions of events: malformed or older events still draw (never a
traceback), and without the audit key a follow-up says what it cannot know instead of guessing."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from pollwarden.console.pages.timeline import picture_of, timeline_svg
from pollwarden.core.escalation import DecisionRequest, Option, OptionKind
from pollwarden.core.reasons import Phase, StopReason
from pollwarden.report.followup import follow_ups
from pollwarden.store.base import Event, StoredDecision
from tests.core.support import T0, make_contract, make_record

RETRY_AFTER = "provider_retry_after"


def _events(*kinds: tuple[str, dict[str, Any]]) -> list[Event]:
    return [Event("op", i, T0 + timedelta(seconds=i), kind, data) for i, (kind, data) in enumerate(kinds, 1)]


def test_malformed_and_unknown_events_still_draw() -> None:
    record = make_record(make_contract())
    events = _events(
        ("created", {"deadline_at": "not a time", "max_status_requests": "many"}),
        ("reserved", {}),
        ("observed", {"sent_at": 7, "http_status": "200", "state": ["x"]}),
        ("decision", {"action": "wait", "next_poll_at": "garbage", "delay_source": None}),
        ("observed", {"http_status": 429}),
        ("decision", {"action": "wait", "next_poll_at": "2000-01-01T00:00:00Z", "delay_source": RETRY_AFTER}),
        ("from_the_future", {"anything": True}),
        ("escalated", {"reason": {"nested": "<b>"}}),
    )
    pic = picture_of(events, record)
    assert [r.label for r in pic.requests] == ["transport failure", "HTTP 429"]
    assert [w.source for w in pic.waits] == ["local_backoff", "provider_retry_after"]
    assert pic.stop is not None
    svg = timeline_svg(events, record, T0)
    assert 'data-requests="2"' in svg and 'id="tl-stop"' in svg and "<b>" not in svg


def test_no_events_draw_an_empty_timeline() -> None:
    svg = timeline_svg([], make_record(make_contract()), T0)
    assert 'data-requests="0"' in svg and "no check yet" in svg


STOPPED = replace(
    make_record(make_contract()), phase=Phase.STOPPED, reason=StopReason.REQUEST_BUDGET_EXHAUSTED, last_state="running"
)


def _decided(kind: OptionKind, **option: Any) -> StoredDecision:
    chosen = Option(1, kind, "the option", "its effect", **option)
    request = DecisionRequest(
        decision_id="d1",
        operation_id=STOPPED.operation_id,
        job_id=STOPPED.job_id,
        reason=StopReason.REQUEST_BUDGET_EXHAUSTED,
        detail="",
        last_state="running",
        started_at=T0,
        created_at=T0,
        requests_used=2,
        requests_max=2,
        transport_used=0,
        transport_max=3,
        last_http_status=200,
        last_observed_at=T0,
        deadline_at=T0 + timedelta(minutes=5),
        useful_until=None,
        stop_marker="m",
        options=(chosen,),
    )
    return StoredDecision(request, "decided", decided_by="alice", decided_at=T0, option=1)


def test_a_cancel_without_the_audit_key_says_what_it_cannot_know() -> None:
    (follow,) = follow_ups(STOPPED, [_decided(OptionKind.CANCEL)], None, lambda _: None)
    assert follow.line() == (
        "cancel requested by alice at 10:20:00 UTC — the provider's answer needs the audit key"
        " — operation stays stopped (request budget exhausted), job last seen running"
    )


def test_a_failed_cancel_and_an_extension_in_words() -> None:
    failed = _events(("action", {"action": "cancel", "ok": False, "detail": "HTTP 500", "decision_id": "d1"}))
    (follow,) = follow_ups(STOPPED, [_decided(OptionKind.CANCEL)], failed, lambda _: None)
    assert "it FAILED: HTTP 500" in follow.line()
    refused = _events(("action", {"action": "cancel", "ok": False, "http_status": 409, "decision_id": "d1"}))
    (follow,) = follow_ups(STOPPED, [_decided(OptionKind.CANCEL)], refused, lambda _: None)
    assert "provider answered 409 (refused)" in follow.line()
    active = replace(STOPPED, phase=Phase.ACTIVE, reason=None)
    extend = _decided(OptionKind.EXTEND, extra_time=timedelta(minutes=10), extra_checks=5)
    (follow,) = follow_ups(active, [extend], [], lambda _: None)
    assert follow.line().startswith("extension granted: +10m, +5 checks by alice at 10:20:00 UTC — active again")


def test_a_resubmission_names_the_new_operation_and_its_phase() -> None:
    events = _events(("action", {"action": "resubmit", "ok": True, "new_operation": "op.r1", "job": "j2"}))
    new = replace(STOPPED, operation_id="op.r1", phase=Phase.ACTIVE, reason=None)
    (follow,) = follow_ups(STOPPED, [_decided(OptionKind.RESUBMIT)], events, lambda op: new if op == "op.r1" else None)
    assert follow.line() == "resubmission by alice at 10:20:00 UTC — provider answered ok — new operation op.r1: active"
