"""Decision requests: the options table per reason, their prices, and extensions that never reset counts."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pollwarden.core import Contract, FailureKind, OperationRecord, StopReason, next_step, parse_contract
from pollwarden.core.decide import Halt, Wait
from pollwarden.core.escalation import (
    ALLOWED,
    DecisionError,
    DecisionRequest,
    OptionKind,
    Topic,
    apply_extension,
    build_cancel_request,
    build_request,
    stop_marker,
)
from pollwarden.core.reasons import DelaySource, Phase

from .support import T0, body, contract_text, failure, make_contract, make_record, poll, response

S = timedelta(seconds=1)
EXTRAS = """
[escalation]
extend = "15m"
extend_checks = 4
pause = "30m"
console_url = "https://provider.example/console/{job_id}"

[cancel]
url = "https://provider.example/v1/jobs/{job_id}/cancel"
"""


def _contract(extras: str = EXTRAS) -> Contract:
    return parse_contract(contract_text(max_requests=2) + extras, source="test.toml")


def _exhausted() -> tuple[Contract, OperationRecord]:
    contract = _contract()
    record = make_record(contract)
    first = poll(contract, record, response(body("running"), at=T0))
    second = poll(contract, first.record, response(body("running"), at=T0 + 20 * S))
    assert second.reason is StopReason.REQUEST_BUDGET_EXHAUSTED
    return contract, second.record


def test_every_stop_reason_has_options_and_close_is_always_there() -> None:
    # R32: bounded options for every stop, never 'continue?'.
    assert set(ALLOWED) == set(StopReason)
    for reason, kinds in ALLOWED.items():
        assert OptionKind.CLOSE in kinds, reason
        assert "continue" not in " ".join(k.value for k in kinds)


def test_authorization_denied_never_offers_running_the_request_again() -> None:
    for kind in (OptionKind.EXTEND, OptionKind.PAUSE, OptionKind.RESUBMIT):
        assert kind not in ALLOWED[StopReason.AUTHORIZATION_DENIED]


def test_budget_exhausted_request_reads_like_r31() -> None:
    # R31: what a person needs to decide, in the request.
    contract, record = _exhausted()
    request = build_request(record, contract, T0 + 40 * 60 * S, decision_id="d1")
    text = request.render()
    for line in (
        "External job needs a decision",
        "Operation: report-export-2025-04-18-01",
        "Provider job: exp_71c",
        "Last state: running",
        "Elapsed time: 40 minutes",
        "Checks used: 2 of 2 checks",
        "Last HTTP result: 200 at 2025-04-18T10:20:20Z",
        "Stopped because: request_budget_exhausted",
    ):
        assert line in text, line
    kinds = [o.kind for o in request.options]
    assert kinds == [OptionKind.EXTEND, OptionKind.CANCEL, OptionKind.INSPECT, OptionKind.CLOSE]
    assert request.options[0].label == "extend by 15m with 4 additional checks"
    assert "at most 4 more checks (6 in all)" in request.options[0].effect
    assert request.options[2].url == "https://provider.example/console/exp_71c"
    assert DecisionRequest.from_json(request.to_json()) == request


def test_cancel_and_inspect_only_when_the_contract_documents_them() -> None:
    contract = make_contract(max_requests=1)
    record = make_record(contract)
    stopped = poll(contract, record, response(body("running"))).record
    request = build_request(stopped, contract, T0, decision_id="d2")
    assert [o.kind for o in request.options] == [OptionKind.EXTEND, OptionKind.CLOSE]
    assert [o.number for o in request.options] == [1, 2]


def test_an_active_operation_has_nothing_to_decide() -> None:
    with pytest.raises(DecisionError, match="not stopped"):
        build_request(make_record(), make_contract(), T0, decision_id="d3")


def test_extension_adds_to_what_was_used_and_never_resets() -> None:
    contract, record = _exhausted()
    request = build_request(record, contract, T0 + 60 * S, decision_id="d4")
    extended = apply_extension(record, request.option(1), T0 + 60 * S)
    assert extended.phase is Phase.ACTIVE and extended.reason is None
    assert extended.status_requests_used == 2
    assert extended.plan.max_status_requests == 6
    assert extended.deadline_at == record.deadline_at + 15 * 60 * S
    assert extended.delay_source is DelaySource.MANUAL_EXTENSION
    assert extended.next_poll_at == T0 + 60 * S
    assert stop_marker(extended) != request.stop_marker
    with pytest.raises(DecisionError, match="does not extend"):
        apply_extension(record, request.option(4), T0)


def test_extension_after_the_deadline_counts_from_now() -> None:
    contract = _contract()
    record = make_record(contract, deadline=10 * S)
    late = T0 + 60 * S
    step = next_step(record, late)
    assert isinstance(step, Halt) and step.reason is StopReason.DEADLINE_EXCEEDED
    from pollwarden.core.decide import halt

    stopped = halt(record, step.reason, late, step.detail, rule="deadline_exceeded").record
    request = build_request(stopped, contract, late, decision_id="d5")
    extended = apply_extension(stopped, request.option(1), late)
    assert extended.deadline_at == late + 15 * 60 * S


def test_transport_stops_extend_the_transport_budget_too() -> None:
    contract = parse_contract(contract_text(max_transport_failures=1) + EXTRAS, source="t")
    record = make_record(contract)
    stopped = poll(contract, record, failure(FailureKind.CONNECT)).record
    assert stopped.reason is StopReason.PROVIDER_FAILURE
    request = build_request(stopped, contract, T0, decision_id="d6")
    assert request.options[0].label.endswith("and 1 more transport failure")
    extended = apply_extension(stopped, request.options[0], T0)
    assert extended.transport_failures_used == 1 and extended.plan.max_transport_failures == 2


def test_rate_limited_extension_waits_the_longest_delay_first() -> None:
    contract = parse_contract(contract_text(max_rate_limited=1) + EXTRAS, source="t")
    stopped = poll(contract, make_record(contract), response(status=429)).record
    assert stopped.reason is StopReason.RATE_LIMITED
    request = build_request(stopped, contract, T0, decision_id="d7")
    extended = apply_extension(stopped, request.options[0], T0)
    assert extended.next_poll_at == T0 + 120 * S
    assert extended.rate_limited_consecutive == 0


def test_unknown_state_offers_a_bounded_pause_with_one_check() -> None:
    contract = _contract()
    stopped = poll(contract, make_record(contract), response(body("awaiting_review"))).record
    request = build_request(stopped, contract, T0, decision_id="d8")
    pause = request.options[0]
    assert pause.kind is OptionKind.PAUSE and pause.label == "pause 30m, then check once"
    paused = apply_extension(stopped, pause, T0)
    assert paused.next_poll_at == T0 + 30 * 60 * S
    assert paused.plan.max_status_requests == stopped.status_requests_used + 1
    assert isinstance(next_step(paused, T0 + 29 * 60 * S), Wait)


def test_agent_requested_extension_offers_only_its_own_size() -> None:
    # R43: the agent's extension request, with its size and reason, beside the operation's state.
    contract, record = _exhausted()
    request = build_request(
        record, contract, T0, decision_id="d9", requested=(5 * 60 * S, 2, "the export is nearly done", "agent-7")
    )
    assert [o.kind for o in request.options] == [OptionKind.EXTEND, OptionKind.CLOSE]
    assert request.options[0].label == "extend by 5m with 2 additional checks"
    assert "Requested by: agent-7: the export is nearly done" in request.render()


def test_usefulness_deadline_stops_polling_before_the_provider_deadline() -> None:
    # R33: a short useful window stops earlier.
    contract = make_contract()
    record = make_record(contract, useful_for=60 * S)
    waiting = poll(contract, record, response(body("running"), at=T0 + 55 * S), u=0.99)
    assert waiting.next_poll_at == T0 + 60 * S  # woken when the window closes, not later
    step = next_step(waiting.record, T0 + 60 * S)
    assert isinstance(step, Halt) and step.reason is StopReason.USEFULNESS_WINDOW_CLOSED
    assert ALLOWED[StopReason.USEFULNESS_WINDOW_CLOSED] == (OptionKind.CANCEL, OptionKind.CLOSE)


def test_a_cancel_request_on_a_running_job_offers_cancel_or_keep_watching() -> None:
    contract = _contract()
    record = poll(contract, make_record(contract), response(body("running"), at=T0)).record
    assert record.phase is Phase.ACTIVE
    request = build_cancel_request(
        record, contract, T0 + 5 * S, decision_id="d9", reason="input changed", requested_by="agent session a1"
    )
    assert request.topic is Topic.CANCEL and request.reason is None
    assert [o.kind for o in request.options] == [OptionKind.CANCEL, OptionKind.KEEP]
    assert request.options[0].label == "cancel at provider and stop watching"
    assert "POST https://provider.example/v1/jobs/exp_71c/cancel once" in request.options[0].effect
    text = request.render()
    assert "An agent asks to cancel" in text and "Still running" in text and "input changed" in text
    assert DecisionRequest.from_json(request.to_json()) == request
    assert request.why == "cancel_request"


def test_a_cancel_request_follows_the_stop_table_and_the_contract() -> None:
    contract, stopped = _exhausted()
    request = build_cancel_request(stopped, contract, T0, decision_id="d10", reason="r", requested_by="a")
    assert [o.kind for o in request.options] == [OptionKind.CANCEL, OptionKind.CLOSE]
    assert request.why == "request_budget_exhausted"
    with pytest.raises(DecisionError, match=r"\[cancel\]"):
        build_cancel_request(stopped, make_contract(max_requests=2), T0, decision_id="d", reason="r", requested_by="a")
    failed = stopped.stopped(StopReason.AUTHORIZATION_DENIED, "401", T0)
    with pytest.raises(DecisionError, match="allows no cancel"):
        build_cancel_request(failed, contract, T0, decision_id="d", reason="r", requested_by="a")
    done = make_record(contract).succeeded("/results/exp_71c", "succeeded", T0)
    with pytest.raises(DecisionError, match="nothing to cancel"):
        build_cancel_request(done, contract, T0, decision_id="d", reason="r", requested_by="a")


def test_the_providers_error_travels_on_the_request_as_a_json_value() -> None:
    from dataclasses import replace

    from pollwarden.core.record import provider_error_text, provider_error_value

    contract = make_contract(max_requests=5)
    record = make_record(contract)
    error = '{"code": "E_HEALTH", "message": "health check failed: 3/5 pods CrashLoopBackOff"}'
    stopped = replace(record, provider_error=error).stopped(StopReason.JOB_FAILED, "state failed", T0)
    request = build_request(stopped, contract, T0, decision_id="d9")
    assert request.provider_error == error
    assert request.to_json()["provider_error"] == {
        "code": "E_HEALTH",
        "message": "health check failed: 3/5 pods CrashLoopBackOff",
    }
    assert DecisionRequest.from_json(request.to_json()) == request  # back to the same text
    text = request.render()
    assert text.startswith("External job failed\n") and f"Provider error: {error}" in text
    assert provider_error_value("plain words") == "plain words"
    assert provider_error_value('{"cut": "at 2,000 charac') == '{"cut": "at 2,000 charac'
    assert provider_error_value("[1, 2]") == [1, 2] and provider_error_text([1, 2]) == "[1, 2]"
    assert provider_error_value(None) is None
