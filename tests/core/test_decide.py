"""The decision core: every rule in `RULES`, the R37 guards, the budgets, the provider's signals, and a property
that drives random provider behaviour through `next_step`/`reserve`/`decide` on a simulated clock."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from pollwarden.core import (
    Action,
    Contract,
    Decision,
    DelaySource,
    FailureKind,
    Finished,
    Halt,
    OperationRecord,
    Phase,
    Poll,
    Response,
    StopReason,
    TransportFailure,
    Wait,
    decide,
    halt,
    next_step,
    observe,
    reserve,
)
from pollwarden.core.decide import RULES
from pollwarden.core.observe import Exchange

from .support import T0, body, failure, make_contract, make_record, poll, response

S = timedelta(seconds=1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def first_poll(exchange: Exchange, *, contract: Contract | None = None, u: float = 0.5, **limits: Any) -> Decision:
    c = contract if contract is not None else make_contract(**limits)
    return poll(c, make_record(c), exchange, u=u)


def drive(contract: Contract, record: OperationRecord, exchanges: list[Exchange], u: float = 0.5) -> list[Decision]:
    """Poll each exchange in turn at its own send time (which must be due)."""
    decisions = []
    for exchange in exchanges:
        decision = poll(contract, record, exchange, u=u)
        decisions.append(decision)
        record = decision.record
    return decisions


# --- every rule -----------------------------------------------------------------------------------------------------

RULE_CASES: list[tuple[str, Exchange, Action, StopReason | None]] = [
    ("success_validated", response(body("succeeded", result_url="https://f.example/x")), Action.SUCCEED, None),
    ("pending_wait", response(body("running")), Action.WAIT, None),
    ("job_failed", response(body("failed", error={"code": "E1"})), Action.STOP, StopReason.JOB_FAILED),
    ("job_cancelled", response(body("cancelled")), Action.STOP, StopReason.JOB_CANCELLED),
    ("job_expired", response(body("expired")), Action.STOP, StopReason.JOB_EXPIRED),
    ("job_needs_action", response(body("action_required")), Action.STOP, StopReason.JOB_NEEDS_ACTION),
    ("unknown_state", response(body("awaiting_review")), Action.STOP, StopReason.UNKNOWN_STATE),
    ("invalid_response", response(b"<html>ok</html>"), Action.STOP, StopReason.INVALID_RESPONSE),
    ("server_error", response(status=503), Action.WAIT, None),
    ("transport_failure", failure(FailureKind.CONNECT), Action.WAIT, None),
    ("rate_limited", response(status=429), Action.WAIT, None),
    ("authorization_denied", response(status=401), Action.STOP, StopReason.AUTHORIZATION_DENIED),
    ("not_found", response(status=404), Action.STOP, StopReason.INTEGRATION_FAILURE),
    ("redirect", response(status=302, headers={"location": "/x"}), Action.STOP, StopReason.INTEGRATION_FAILURE),
    ("unexpected_status", response(status=418), Action.STOP, StopReason.INTEGRATION_FAILURE),
    ("local_error", failure(FailureKind.LOCAL), Action.STOP, StopReason.INTEGRATION_FAILURE),
]


CONTRACT_RULES = {"credential_refreshed"}
"""Rules that fire only for a contract that declares something (a refreshable token): tested below, one by one."""


def test_rule_cases_cover_every_rule() -> None:
    assert {name for name, *_ in RULE_CASES} | CONTRACT_RULES == {name for name, _ in RULES.values()}
    assert len(RULES) == len(RULE_CASES) + len(CONTRACT_RULES)


@pytest.mark.parametrize(("rule", "exchange", "action", "reason"), RULE_CASES, ids=[c[0] for c in RULE_CASES])
def test_each_rule(rule: str, exchange: Exchange, action: Action, reason: StopReason | None) -> None:
    # R2, R18: each category's one meaning; a failure, an answer that does not parse or a state outside the table stops.
    decision = first_poll(exchange, contract=make_contract(needs_person=True))
    assert decision.rule == rule
    assert decision.action is action
    assert decision.reason is reason
    record = decision.record
    assert record.status_requests_used == 1
    assert record.polls_completed == 1
    assert record.reason is reason
    if action is Action.WAIT:
        assert record.phase is Phase.ACTIVE
        assert decision.next_poll_at is not None and decision.next_poll_at > T0
        assert record.next_poll_at == decision.next_poll_at
        assert decision.delay_source is DelaySource.LOCAL_BACKOFF
        assert record.finished_at is None
    elif action is Action.SUCCEED:
        assert record.phase is Phase.SUCCEEDED
        assert record.result == "https://f.example/x"
        assert record.finished_at == T0
    else:
        assert record.phase is Phase.STOPPED
        assert decision.next_poll_at is None
        assert record.finished_at == T0
        assert isinstance(next_step(record, at(1)), Finished)


def test_decide_records_what_was_seen() -> None:
    c = make_contract()
    first = first_poll(response(body("queued"), headers={"x-request-id": "r1"}), contract=c)
    assert (first.record.last_state, first.record.last_http_status) == ("queued", 200)
    assert (first.record.last_observed_at, first.record.last_request_id) == (T0, "r1")
    when = first.record.next_poll_at
    second = poll(c, first.record, response(status=503, at=when, headers={"x-request-id": "r2"}))
    # a 503 says nothing about the job: the last known state stays, the HTTP facts move on (R1, R28)
    assert second.record.last_state == "queued"
    assert (second.record.last_http_status, second.record.last_request_id) == (503, "r2")
    assert second.record.last_observed_at == when
    third = poll(c, second.record, failure(FailureKind.TIMEOUT, at=second.record.next_poll_at))
    assert third.record.last_state == "queued"
    assert third.record.last_http_status is None
    assert third.record.polls_completed == 3 and third.record.status_requests_used == 3


def test_decide_is_deterministic() -> None:
    c = make_contract()
    record = reserve(make_record(c), T0)
    obs = observe(c, response(body("running", poll_after_seconds=-3)))
    assert decide(record, obs, T0, 0.37) == decide(record, obs, T0, 0.37)
    assert decide(record, obs, T0, 0.37) != decide(record, obs, T0, 0.38)


def test_failure_keeps_provider_error() -> None:
    decision = first_poll(response(body("failed", error={"code": "E42", "message": "disk full"})))
    assert decision.record.provider_error == '{"code": "E42", "message": "disk full"}'
    assert decision.record.last_state == "failed"


# --- success and contradictions (R4, R17) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [{}, {"result_url": ""}, {"result_url": 7}, {"result_url": "a\nb"}],
)
def test_success_without_a_valid_result_is_result_invalid(fields: dict[str, Any]) -> None:
    # R4, R17: success needs its validated result reference.
    decision = first_poll(response(body("succeeded", **fields)))
    assert decision.rule == "success_validated"
    assert decision.action is Action.STOP
    assert decision.reason is StopReason.RESULT_INVALID
    assert decision.record.phase is Phase.STOPPED
    assert decision.record.result is None
    assert decision.record.last_state == "succeeded"
    assert "result field 'result_url'" in decision.detail


def test_success_without_result_field_in_contract() -> None:
    decision = first_poll(response(body("succeeded")), contract=make_contract(result=None))
    assert decision.action is Action.SUCCEED
    assert decision.record.phase is Phase.SUCCEEDED


def test_pending_after_the_jobs_own_expiry_is_contradictory() -> None:
    # R4: pending after the job's own expiry is a contradiction, escalated.
    decision = first_poll(response(body("running", expires_at="2025-04-18T10:19:59Z")))
    assert decision.rule == "pending_wait"
    assert decision.reason is StopReason.CONTRADICTORY_STATUS
    assert "2025-04-18T10:19:59Z" in decision.detail
    same_instant = first_poll(response(body("running", expires_at="2025-04-18T10:20:00Z")))
    assert same_instant.action is Action.WAIT
    before = first_poll(response(body("queued", expires_at="2025-04-18T12:00:00Z")))
    assert before.action is Action.WAIT


def test_unknown_state_stops_even_with_budget_and_time_left() -> None:
    # R2, R18: a value outside the table is unknown, a stop as serious as a denial.
    for state in ["paused", "needs_payment", "manual_review", "blocked", "Running"]:
        decision = first_poll(response(body(state)))
        assert decision.reason is StopReason.UNKNOWN_STATE, state
        assert decision.record.last_state == state


def test_meaning_comes_from_the_contract_never_from_a_field_name() -> None:
    """R3: the contract reads the state from `phase`; a `status: succeeded` beside it means nothing, and a body
    whose only state-like field is `status` has no state the contract documents: it stops, never succeeds."""
    c = make_contract(state_field="phase")
    beside = first_poll(response(json.dumps({"status": "succeeded", "phase": "running"}).encode()), contract=c)
    assert beside.action is Action.WAIT and beside.record.last_state == "running"
    alone = first_poll(
        response(json.dumps({"status": "succeeded", "result_url": "https://f.example/x"}).encode()), contract=c
    )
    assert alone.reason is StopReason.INVALID_RESPONSE and "'phase' is missing" in alone.detail, alone
    assert alone.record.result is None


# --- the R37 guard: deadline, then budget, then due -----------------------------------------------------------------


def test_next_step_order() -> None:
    c = make_contract(first_check="5s", deadline="10m", max_requests=2)
    record = make_record(c)
    assert next_step(record, T0) == Wait(at(5))
    assert next_step(record, at(5)) == Poll()
    assert next_step(record, at(599)) == Poll()
    deadline = next_step(record, at(600))
    assert isinstance(deadline, Halt) and deadline.reason is StopReason.DEADLINE_EXCEEDED
    assert "2025-04-18T10:30:00Z" in deadline.detail
    assert isinstance(next_step(record, at(10_000)), Halt)
    spent = replace(record, status_requests_used=2)
    budget = next_step(spent, at(5))
    assert budget == Halt(StopReason.REQUEST_BUDGET_EXHAUSTED, "all 2 status requests are used")
    # the deadline is checked first
    both = next_step(spent, at(600))
    assert isinstance(both, Halt) and both.reason is StopReason.DEADLINE_EXCEEDED
    assert isinstance(next_step(replace(record, phase=Phase.SUCCEEDED), at(600)), Finished)


def test_reserve_increments_exactly_once_and_only_when_due() -> None:
    c = make_contract(first_check="5s", deadline="10m", max_requests=1)
    record = make_record(c)
    with pytest.raises(ValueError, match=r"no poll is due.*Wait"):
        reserve(record, at(4.999))
    reserved = reserve(record, at(5))
    assert reserved == replace(record, status_requests_used=1)
    with pytest.raises(ValueError, match="Halt"):
        reserve(reserved, at(5))
    with pytest.raises(ValueError, match="Halt"):
        reserve(record, at(600))
    with pytest.raises(ValueError, match="Finished"):
        reserve(replace(record, phase=Phase.STOPPED), at(5))


def test_halt_keeps_the_last_state() -> None:
    c = make_contract()
    record = first_poll(response(body("running")), contract=c).record
    decision = halt(record, StopReason.DEADLINE_EXCEEDED, at(2400), "deadline passed", "deadline_guard")
    assert decision.action is Action.STOP
    assert decision.rule == "deadline_guard"
    assert decision.record.phase is Phase.STOPPED
    assert decision.record.reason is StopReason.DEADLINE_EXCEEDED
    assert decision.record.last_state == "running"
    assert decision.record.finished_at == at(2400)
    assert decision.record.status_requests_used == 1


# --- budgets (R11, R13, R20) ----------------------------------------------------------------------------------------


def test_last_allowed_poll_with_a_pending_answer_stops_in_the_same_decision() -> None:
    c = make_contract(max_requests=3)
    record = make_record(c)
    decisions: list[Decision] = []
    for _ in range(3):
        decision = poll(c, record, response(body("running"), at=record.next_poll_at))
        decisions.append(decision)
        record = decision.record
    assert [d.action for d in decisions] == [Action.WAIT, Action.WAIT, Action.STOP]
    last = decisions[-1]
    assert last.rule == "pending_wait"
    assert last.reason is StopReason.REQUEST_BUDGET_EXHAUSTED
    assert "all 3 status requests are used" in last.detail
    assert record.status_requests_used == 3
    assert record.phase is Phase.STOPPED
    assert record.last_state == "running"
    assert isinstance(next_step(record, at(3600)), Finished)
    # a record persisted with the budget spent but still active (a crash between reserve and decide) halts
    active = replace(record, phase=Phase.ACTIVE, reason=None)
    step = next_step(active, record.next_poll_at)
    assert isinstance(step, Halt) and step.reason is StopReason.REQUEST_BUDGET_EXHAUSTED


@pytest.mark.parametrize(
    "exchange",
    [response(status=503), response(status=429), failure(FailureKind.CONNECT), response(status=404)],
    ids=["503", "429", "connect", "404-in-grace"],
)
def test_last_allowed_poll_with_any_waiting_answer_stops_on_budget(exchange: Exchange) -> None:
    decision = first_poll(exchange, max_requests=1, grace="30s")
    assert decision.action is Action.STOP
    assert decision.reason is StopReason.REQUEST_BUDGET_EXHAUSTED


def test_last_allowed_poll_can_still_succeed() -> None:
    decision = first_poll(response(body("succeeded", result_url="r")), max_requests=1)
    assert decision.action is Action.SUCCEED


def test_transport_failures_count_in_both_budgets_and_stop_with_provider_failure() -> None:
    # R11, R14: refused connections and 5xx spend the transport-failure budget.
    c = make_contract(max_transport_failures=3)
    record = make_record(c)
    d1 = poll(c, record, response(status=503))
    d2 = poll(c, d1.record, failure(FailureKind.CONNECT, at=d1.record.next_poll_at))
    d3 = poll(c, d2.record, response(status=500, at=d2.record.next_poll_at))
    assert [d.action for d in (d1, d2, d3)] == [Action.WAIT, Action.WAIT, Action.STOP]
    assert [d.record.transport_failures_used for d in (d1, d2, d3)] == [1, 2, 3]
    assert [d.record.status_requests_used for d in (d1, d2, d3)] == [1, 2, 3]
    assert d3.reason is StopReason.PROVIDER_FAILURE
    assert "transport-failure budget spent (3 of 3)" in d3.detail
    assert d3.record.last_http_status == 500


@pytest.mark.parametrize(
    ("last", "reason"),
    [
        (FailureKind.TIMEOUT, StopReason.AMBIGUOUS_DELIVERY),
        (FailureKind.RESET, StopReason.AMBIGUOUS_DELIVERY),
        (FailureKind.PROTOCOL, StopReason.AMBIGUOUS_DELIVERY),
        (FailureKind.CONNECT, StopReason.PROVIDER_FAILURE),
    ],
)
def test_the_last_failure_decides_between_ambiguous_and_provider_failure(last: FailureKind, reason: StopReason) -> None:
    # R21: a timeout that spends the transport budget is ambiguous delivery.
    c = make_contract(max_transport_failures=2)
    d1 = poll(c, make_record(c), failure(FailureKind.TIMEOUT))
    assert d1.action is Action.WAIT
    assert d1.rule == "transport_failure"
    d2 = poll(c, d1.record, failure(last, at=d1.record.next_poll_at))
    assert d2.reason is reason
    assert d2.record.transport_failures_used == 2


def test_a_success_in_between_does_not_reset_the_transport_budget() -> None:
    c = make_contract(max_transport_failures=2)
    d1 = poll(c, make_record(c), response(status=502))
    d2 = poll(c, d1.record, response(body("running"), at=d1.record.next_poll_at))
    d3 = poll(c, d2.record, response(status=502, at=d2.record.next_poll_at))
    assert d2.record.transport_failures_used == 1
    assert d3.reason is StopReason.PROVIDER_FAILURE


def test_a_budget_of_one_transport_failure_stops_at_the_first() -> None:
    decision = first_poll(failure(FailureKind.TIMEOUT), max_transport_failures=1)
    assert decision.reason is StopReason.AMBIGUOUS_DELIVERY
    assert decision.record.transport_failures_used == 1


# --- Retry-After as a floor (R23) -----------------------------------------------------------------------------------


def test_503_retry_after_120_is_the_next_poll() -> None:
    decision = first_poll(response(status=503, headers={"retry-after": "120"}))
    assert decision.action is Action.WAIT
    assert decision.next_poll_at == at(120)
    assert decision.delay_source is DelaySource.PROVIDER_RETRY_AFTER
    assert decision.record.delay_source is DelaySource.PROVIDER_RETRY_AFTER
    assert next_step(decision.record, at(119.999)) == Wait(at(120))
    assert next_step(decision.record, at(120)) == Poll()


def test_retry_after_as_http_date() -> None:
    decision = first_poll(response(status=503, headers={"retry-after": "Fri, 18 Apr 2025 10:23:00 GMT"}))
    assert decision.next_poll_at == at(180)
    assert decision.delay_source is DelaySource.PROVIDER_RETRY_AFTER


def test_retry_after_is_measured_from_the_receive_time() -> None:
    c = make_contract()
    exchange = Response(503, {"retry-after": "60"}, b"", sent_at=T0, received_at=at(4))
    decision = poll(c, make_record(c), exchange)
    assert decision.next_poll_at == at(64)


def test_retry_after_shorter_than_backoff_leaves_local_backoff() -> None:
    # 429 at attempt 1 with Retry-After: no 429 growth (the provider said how long), raw = 10 s;
    # with u=0.5 bounded jitter = 7.5 s, longer than Retry-After 2
    decision = first_poll(response(status=429, headers={"retry-after": "2"}), u=0.5)
    assert decision.delay_source is DelaySource.LOCAL_BACKOFF
    assert decision.raw_delay == 10 * S
    assert decision.next_poll_at == T0 + timedelta(seconds=7.5)
    server = first_poll(response(status=503, headers={"retry-after": "1"}), u=0.0)
    assert server.delay_source is DelaySource.LOCAL_BACKOFF
    assert server.next_poll_at == at(5)


def test_rejected_retry_after_falls_back_to_backoff_and_is_recorded() -> None:
    decision = first_poll(response(status=503, headers={"retry-after": "whenever"}), u=0.0)
    assert decision.delay_source is DelaySource.LOCAL_BACKOFF
    assert decision.next_poll_at == at(5)
    assert [(r.source, r.value) for r in decision.rejections] == [("Retry-After", "whenever")]


def test_retry_after_beyond_the_deadline_clamps_to_the_deadline() -> None:
    decision = first_poll(response(status=503, headers={"retry-after": "3600"}), deadline="10m")
    assert decision.action is Action.WAIT
    assert decision.next_poll_at == at(600)
    assert decision.delay_source is DelaySource.PROVIDER_RETRY_AFTER
    assert "waking at the deadline" in decision.detail
    step = next_step(decision.record, at(600))
    assert isinstance(step, Halt) and step.reason is StopReason.DEADLINE_EXCEEDED


def test_backoff_beyond_the_deadline_clamps_to_the_deadline() -> None:
    c = make_contract(deadline="8s")
    decision = poll(c, make_record(c), response(body("running"), at=at(5)), u=0.5)
    # attempt 1: raw 10 s, jitter 7.5 s -> 10:20:12.5, after the 10:20:08 deadline
    assert decision.next_poll_at == at(8)
    assert decision.delay_source is DelaySource.LOCAL_BACKOFF


# --- provider hints (R9) --------------------------------------------------------------------------------------------


def test_valid_hint_sets_the_next_poll() -> None:
    # R9: a valid provider hint is followed.
    decision = first_poll(response(body("running", poll_after_seconds=90)))
    assert decision.delay_source is DelaySource.PROVIDER_POLL_HINT
    assert decision.next_poll_at == at(90)
    assert decision.rejections == ()
    earlier = first_poll(response(body("running", next_check_at="2025-04-18T10:20:03Z")))
    assert earlier.delay_source is DelaySource.PROVIDER_POLL_HINT
    assert earlier.next_poll_at == at(3)  # 3 s is above half the 5 s base delay


@pytest.mark.parametrize(
    ("fields", "field", "why"),
    [
        ({"poll_after_seconds": 3600}, "poll_after_seconds", "after the deadline"),
        ({"next_check_at": "2025-04-18T12:00:00Z"}, "next_check_at", "after the deadline"),
        ({"next_check_at": "2025-04-18T10:19:00Z"}, "next_check_at", "in the past"),
        ({"poll_after_seconds": 1}, "poll_after_seconds", "sooner than the contract's minimum delay of 2.5s"),
        ({"poll_after_seconds": 0}, "poll_after_seconds", "sooner"),
    ],
)
def test_rejected_hint_is_recorded_and_backoff_applies(fields: dict[str, Any], field: str, why: str) -> None:
    # R9, R44: a rejected hint is recorded with its reason, and backoff applies.
    decision = first_poll(response(body("running", **fields)), deadline="10m", u=0.0)
    assert decision.action is Action.WAIT
    assert decision.delay_source is DelaySource.LOCAL_BACKOFF
    assert decision.next_poll_at == at(5)  # attempt 1: raw 10 s, bounded jitter at u=0 -> 5 s
    assert len(decision.rejections) == 1
    assert decision.rejections[0].source == field
    assert why in decision.rejections[0].why


def test_hint_rejected_by_the_parser_is_carried_into_the_decision() -> None:
    decision = first_poll(response(body("running", poll_after_seconds=-30)), u=0.0)
    assert decision.delay_source is DelaySource.LOCAL_BACKOFF
    assert [(r.source, r.why) for r in decision.rejections] == [("poll_after_seconds", "negative")]
    assert decision.to_json()["rejections"] == [{"source": "poll_after_seconds", "value": "-30", "why": "negative"}]


def test_hint_is_ignored_on_answers_that_do_not_wait_for_the_job() -> None:
    # a hint only shapes a pending wait; a 503 body is not read at all
    decision = first_poll(response(body("running", poll_after_seconds=90), status=503), u=0.0)
    assert decision.delay_source is DelaySource.LOCAL_BACKOFF
    assert decision.next_poll_at == at(5)


# --- rate limiting (R24) --------------------------------------------------------------------------------------------


def test_429_without_retry_after_grows_the_delay_sharply() -> None:
    pending = first_poll(response(body("running")), u=0.5)
    limited = first_poll(response(status=429), u=0.5)
    assert pending.raw_delay == 10 * S
    assert limited.raw_delay == 40 * S
    assert pending.next_poll_at == at(7.5)
    assert limited.next_poll_at == at(30)
    assert limited.record.rate_limited_consecutive == 1
    assert limited.record.transport_failures_used == 0


def test_consecutive_429s_reach_rate_limited() -> None:
    c = make_contract(max_rate_limited=3, max_delay="1h")
    record = make_record(c)
    decisions = []
    for _ in range(3):
        decision = poll(c, record, response(status=429, at=record.next_poll_at))
        decisions.append(decision)
        record = decision.record
    assert [d.action for d in decisions] == [Action.WAIT, Action.WAIT, Action.STOP]
    assert [d.record.rate_limited_consecutive for d in decisions] == [1, 2, 3]
    # each consecutive 429 multiplies the raw delay further: attempt 1 * 4, attempt 2 * 16
    assert [d.raw_delay for d in decisions[:2]] == [40 * S, 320 * S]
    assert decisions[-1].reason is StopReason.RATE_LIMITED
    assert decisions[-1].rule == "rate_limited"
    assert "3 consecutive 429" in decisions[-1].detail


@pytest.mark.parametrize("breaker", [response(body("running")), response(status=503)], ids=["200", "503"])
def test_a_non_429_answer_resets_the_streak(breaker: Response) -> None:
    c = make_contract(max_rate_limited=2, max_requests=20)
    record = make_record(c)
    kinds = ["429", "other", "429", "other", "429"]
    for kind in kinds:
        when = record.next_poll_at
        exchange = response(status=429, at=when) if kind == "429" else _at(breaker, when)
        decision = poll(c, record, exchange)
        assert decision.action is Action.WAIT, kind
        assert decision.record.rate_limited_consecutive == (1 if kind == "429" else 0)
        record = decision.record
    final = poll(c, record, response(status=429, at=record.next_poll_at))
    assert final.reason is StopReason.RATE_LIMITED


def _at(exchange: Response, when: datetime) -> Response:
    return Response(exchange.status, exchange.headers, exchange.body, sent_at=when, received_at=when)


# --- authorization, not found, redirects (R26, R27) -----------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
def test_auth_denied_stops_at_once(status: int) -> None:
    decision = first_poll(response(status=status), max_requests=50, max_transport_failures=10)
    assert decision.reason is StopReason.AUTHORIZATION_DENIED
    assert decision.record.status_requests_used == 1
    assert decision.record.transport_failures_used == 0
    assert isinstance(next_step(decision.record, at(60)), Finished)


def test_404_within_grace_waits_and_outside_is_an_integration_failure() -> None:
    # R26: a 404 is 'not visible yet' only within the contract's grace.
    c = make_contract(grace="30s")
    inside = poll(c, make_record(c), response(status=404, at=at(10)))
    assert inside.action is Action.WAIT
    assert inside.rule == "not_found"
    edge = poll(c, make_record(c), response(status=404, at=at(30)))
    assert edge.action is Action.WAIT
    outside = poll(c, make_record(c), response(status=404, at=at(31)))
    assert outside.action is Action.STOP
    assert outside.reason is StopReason.INTEGRATION_FAILURE
    assert outside.rule == "not_found"
    assert "exp_71c" in outside.detail
    assert "2025-04-18T10:20:31Z" in outside.detail
    assert "2025-04-18T10:20:00Z" in outside.detail
    assert "outside the contract's not-found grace" in outside.detail


def test_404_without_grace_is_an_integration_failure_at_once() -> None:
    decision = first_poll(response(status=404))
    assert decision.reason is StopReason.INTEGRATION_FAILURE
    assert "exp_71c" in decision.detail and "names no grace" in decision.detail


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirect_is_an_integration_failure(status: int) -> None:
    decision = first_poll(response(status=status, headers={"location": "https://elsewhere.example/"}))
    assert decision.rule == "redirect"
    assert decision.reason is StopReason.INTEGRATION_FAILURE


# --- R10: waking late sends one request, not a burst ----------------------------------------------------------------


@pytest.mark.parametrize("u", [0.0, 0.5, 0.999])
def test_waking_hours_late_sends_exactly_one_request(u: float) -> None:
    c = make_contract(deadline="6h", max_requests=50)
    record = poll(c, make_record(c), response(body("running"))).record
    assert record.next_poll_at <= at(10)
    late = at(3 * 3600)  # the laptop slept for three hours
    sent = 0
    for _ in range(10):
        step = next_step(record, late)
        if not isinstance(step, Poll):
            break
        record = reserve(record, late)
        sent += 1
        record = decide(record, observe(c, response(body("running"), at=late)), late, u).record
    assert sent == 1
    assert isinstance(step, Wait)
    assert step.until > late
    assert late + 10 * S <= step.until <= late + 20 * S  # attempt 2: raw 20 s, bounded jitter keeps at least half


def test_waking_after_the_deadline_sends_nothing() -> None:
    c = make_contract(deadline="40m")
    record = poll(c, make_record(c), response(body("running"))).record
    step = next_step(record, at(5 * 3600))
    assert isinstance(step, Halt) and step.reason is StopReason.DEADLINE_EXCEEDED
    with pytest.raises(ValueError):
        reserve(record, at(5 * 3600))


def test_pending_answer_arriving_after_the_deadline_stops() -> None:
    # R19: at the deadline the run stops, whatever the state, and keeps the last one seen.
    c = make_contract(deadline="1m")
    exchange = Response(200, {}, body("running"), sent_at=at(59), received_at=at(61))
    decision = poll(c, make_record(c), exchange)
    assert decision.action is Action.STOP
    assert decision.reason is StopReason.DEADLINE_EXCEEDED
    assert decision.record.last_state == "running"
    assert "deadline 2025-04-18T10:21:00Z has passed" in decision.detail


def test_pending_answer_arriving_exactly_at_the_deadline_stops() -> None:
    c = make_contract(deadline="1m")
    exchange = Response(200, {}, body("running"), sent_at=at(59), received_at=at(60))
    decision = poll(c, make_record(c), exchange)
    assert decision.reason is StopReason.DEADLINE_EXCEEDED
    assert decision.next_poll_at is None


# --- R45: the seed's story, to the second ---------------------------------------------------------------------------


def hms(h: int, m: int, s: int) -> datetime:
    return datetime(2025, 4, 18, h, m, s, tzinfo=UTC)


def test_r45_story() -> None:
    # R45: the seed's story, to the second.
    c = make_contract(first_check="5s", deadline="40m", max_requests=12)
    record = make_record(c, now=hms(10, 20, 0))
    assert record.deadline_at == hms(11, 0, 0)
    assert next_step(record, hms(10, 20, 0)) == Wait(hms(10, 20, 5))

    def step(exchange: Exchange, u: float) -> Decision:
        nonlocal record
        decision = poll(c, record, exchange, u=u)
        record = decision.record
        return decision

    d = step(response(body("queued"), at=hms(10, 20, 5)), 0.8)
    assert (d.next_poll_at, d.delay_source) == (hms(10, 20, 14), DelaySource.LOCAL_BACKOFF)
    d = step(response(body("running"), at=hms(10, 20, 14)), 0.7)
    assert (d.next_poll_at, d.delay_source) == (hms(10, 20, 31), DelaySource.LOCAL_BACKOFF)
    d = step(response(status=503, at=hms(10, 20, 31), headers={"retry-after": "120"}), 0.7)
    assert (d.next_poll_at, d.delay_source) == (hms(10, 22, 31), DelaySource.PROVIDER_RETRY_AFTER)
    d = step(response(body("running"), at=hms(10, 22, 31)), 0.925)
    assert (d.next_poll_at, d.delay_source) == (hms(10, 23, 48), DelaySource.LOCAL_BACKOFF)
    for _ in range(7):  # polls 5..11 at their scheduled times, raw capped at 120 s
        d = step(response(body("running"), at=record.next_poll_at), 0.5)
        assert d.raw_delay == 120 * S
        assert d.action is Action.WAIT
    assert record.status_requests_used == 11
    assert record.next_poll_at < hms(10, 58, 0)
    d = step(response(body("running"), at=hms(10, 58, 0)), 0.5)
    assert d.action is Action.STOP
    assert d.reason is StopReason.REQUEST_BUDGET_EXHAUSTED
    summary = record.summary()
    assert summary["status_requests_used"] == 12 and summary["max_status_requests"] == 12
    assert summary["last_state"] == "running"
    assert summary["http_status"] == 200
    assert summary["finished_at"] == "2025-04-18T10:58:00Z"
    assert summary["transport_failures_used"] == 1


def test_decision_to_json() -> None:
    # R44: a decision carries its inputs: rule, delay source, raw delay, the jitter drawn.
    decision = first_poll(response(status=503, headers={"retry-after": "120"}))
    data = decision.to_json()
    assert data == {
        "action": "wait",
        "rule": "server_error",
        "reason": None,
        "next_poll_at": "2025-04-18T10:22:00Z",
        "delay_source": "provider_retry_after",
        "raw_delay": "10s",
        "jitter_u": 0.5,
        "rejections": [],
        "detail": "HTTP 503 from the provider",
    }
    json.dumps(data)


def test_new_record_overrides_and_first_check() -> None:
    # R8, R11: a first check and base delay per contract; a deadline and both budgets per operation.
    c = make_contract(first_check="30s")
    record = make_record(
        c,
        deadline=timedelta(hours=2),
        max_requests=5,
        max_transport_failures=1,
        base_delay=timedelta(seconds=2),
        max_delay=timedelta(seconds=30),
    )
    assert record.deadline_at == T0 + timedelta(hours=2)
    assert (record.plan.max_status_requests, record.plan.max_transport_failures) == (5, 1)
    assert record.plan.schedule.base_delay == 2 * S
    assert record.plan.schedule.max_delay == 30 * S
    assert record.next_poll_at == at(30)
    assert record.contract_fingerprint == c.fingerprint()
    assert record.expected_terminal == ("succeeded", "failed", "cancelled", "expired")
    assert (record.status_requests_used, record.transport_failures_used, record.polls_completed) == (0, 0, 0)
    assert record.summary()["next_poll_at"] == "2025-04-18T10:20:30Z"


# --- the property: random providers, simulated clock ----------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One scripted provider behaviour; `build` turns it into an exchange at a send time."""

    kind: str
    state: str = "running"
    status: int = 200
    fields: tuple[tuple[str, Any], ...] = ()
    retry_after: str | None = None
    failure: FailureKind = FailureKind.CONNECT
    latency_ms: int = 0

    def build(self, sent: datetime) -> Exchange:
        received = sent + timedelta(milliseconds=self.latency_ms)
        if self.kind == "transport":
            return TransportFailure(self.failure, "scripted", sent_at=sent, failed_at=received)
        headers = {} if self.retry_after is None else {"retry-after": self.retry_after}
        payload = body(self.state, **dict(self.fields)) if self.kind == "json" else b"not json"
        return Response(self.status, headers, payload, sent_at=sent, received_at=received)


latencies = st.integers(min_value=0, max_value=20_000)
hint_fields = st.tuples(
    st.sampled_from(["poll_after_seconds", "next_check_at", "expires_at"]),
    st.one_of(
        st.integers(min_value=-100, max_value=100_000),
        st.floats(min_value=-10, max_value=5000, allow_nan=False),
        st.sampled_from(["2025-04-18T10:30:00Z", "2025-04-18T09:00:00Z", "2026-01-01T00:00:00Z", "nope", True]),
    ),
)
retry_afters = st.one_of(
    st.none(),
    st.integers(min_value=0, max_value=10_000).map(str),
    st.sampled_from(["Fri, 18 Apr 2025 10:25:00 GMT", "Fri, 18 Apr 2025 13:00:00 GMT", "garbage", "-5", "²"]),
)
pending_answers = st.builds(
    Answer,
    kind=st.just("json"),
    state=st.sampled_from(["queued", "running"]),
    fields=st.lists(hint_fields, max_size=2).map(tuple),
    latency_ms=latencies,
)
protocol_answers = st.builds(
    Answer,
    kind=st.just("json"),
    status=st.sampled_from([429, 429, 500, 503, 503]),
    retry_after=retry_afters,
    latency_ms=latencies,
)
transport_answers = st.builds(
    Answer, kind=st.just("transport"), failure=st.sampled_from(list(FailureKind)), latency_ms=latencies
)
rare_answers = st.one_of(
    st.builds(
        Answer,
        kind=st.just("json"),
        state=st.sampled_from(["succeeded", "failed", "cancelled", "expired", "paused"]),
        fields=st.sampled_from([(), (("result_url", "https://f.example/r"),)]),
    ),
    st.builds(Answer, kind=st.just("json"), status=st.sampled_from([401, 403, 404, 302, 418])),
    st.just(Answer(kind="garbage")),
)
answers = st.one_of(pending_answers, pending_answers, protocol_answers, transport_answers, rare_answers)


@dataclass(frozen=True)
class Setup:
    base_ms: int
    max_factor: int
    jitter: str
    first_check_s: int
    deadline_s: int
    max_requests: int
    max_transport_failures: int
    max_rate_limited: int
    grace_s: int | None


setups = st.builds(
    Setup,
    base_ms=st.integers(min_value=100, max_value=30_000),
    max_factor=st.integers(min_value=1, max_value=64),
    jitter=st.sampled_from(["bounded", "full"]),
    first_check_s=st.integers(min_value=0, max_value=10),
    deadline_s=st.integers(min_value=1, max_value=4 * 3600),
    max_requests=st.integers(min_value=1, max_value=15),
    max_transport_failures=st.integers(min_value=1, max_value=5),
    max_rate_limited=st.integers(min_value=1, max_value=4),
    grace_s=st.none() | st.integers(min_value=0, max_value=60),
).filter(lambda setup: setup.first_check_s < setup.deadline_s)  # a later first check is refused as it is read


@settings(max_examples=300, deadline=None)
@given(
    setup=setups,
    script=st.lists(answers, max_size=20),
    draws=st.lists(st.floats(min_value=0.0, max_value=1.0, exclude_max=True), min_size=1, max_size=8),
    oversleep_ms=st.lists(st.integers(min_value=0, max_value=600_000), min_size=1, max_size=5),
)
def test_any_provider_behaviour_ends_within_the_limits(
    setup: Setup, script: list[Answer], draws: list[float], oversleep_ms: list[int]
) -> None:
    # R46: whatever the provider does, the job ends in a result or a bounded stop, its signals honoured.
    contract = make_contract(
        base_delay=f"{setup.base_ms}ms",
        max_delay=f"{setup.base_ms * setup.max_factor}ms",
        jitter=setup.jitter,
        first_check=f"{setup.first_check_s}s",
        deadline=f"{setup.deadline_s}s",
        max_requests=setup.max_requests,
        max_transport_failures=setup.max_transport_failures,
        max_rate_limited=setup.max_rate_limited,
        grace=None if setup.grace_s is None else f"{setup.grace_s}s",
    )
    record = make_record(contract)
    deadline = record.deadline_at
    now = T0
    floor: datetime | None = None
    sent: list[datetime] = []
    for i in range(4 * setup.max_requests + 10):
        step = next_step(record, now)
        if isinstance(step, Finished):
            break
        if isinstance(step, Halt):
            record = halt(record, step.reason, now, step.detail, "guard").record
            break
        if isinstance(step, Wait):
            assert step.until > now
            # sometimes the process oversleeps: it must still send only one request when it wakes (R10)
            now = step.until + timedelta(milliseconds=oversleep_ms[i % len(oversleep_ms)] if i % 3 == 0 else 0)
            continue
        assert isinstance(step, Poll)
        assert now < deadline, "a request at or after the deadline"
        assert floor is None or now >= floor, "a request before the provider's Retry-After"
        record = reserve(record, now)
        sent.append(now)
        answer = script[len(sent) - 1] if len(sent) <= len(script) else Answer(kind="json")
        exchange = answer.build(now)
        obs = observe(contract, exchange)
        now = obs.observed_at
        decision = decide(record, obs, now, draws[len(sent) % len(draws)])
        record = decision.record
        assert record.status_requests_used <= setup.max_requests
        assert record.transport_failures_used <= setup.max_transport_failures
        assert record.rate_limited_consecutive <= setup.max_rate_limited
        assert record.polls_completed == record.status_requests_used == len(sent)
        if decision.action is Action.WAIT:
            assert decision.next_poll_at is not None
            assert now <= decision.next_poll_at <= deadline
            assert decision.next_poll_at == record.next_poll_at
            if obs.retry_after is not None:
                assert decision.next_poll_at >= min(obs.retry_after, deadline)
                floor = obs.retry_after
            else:
                floor = None
        else:
            assert record.is_final
            assert decision.reason is record.reason
    assert record.is_final, "the operation did not end"
    event(f"ended {record.phase.value} {record.reason.value if record.reason else ''}")
    assert len(sent) == record.status_requests_used <= setup.max_requests
    assert all(t < deadline for t in sent)
    assert all(a <= b for a, b in pairwise(sent))
    if record.reason is StopReason.REQUEST_BUDGET_EXHAUSTED:
        assert record.status_requests_used == setup.max_requests
    if record.reason in (StopReason.PROVIDER_FAILURE, StopReason.AMBIGUOUS_DELIVERY):
        assert record.transport_failures_used == setup.max_transport_failures
    if record.phase is Phase.SUCCEEDED:
        assert record.result == "https://f.example/r"


def test_429_retry_after_is_followed_not_multiplied() -> None:
    """R24: growth is for a 429 without Retry-After; with one, the provider's wait is the floor (found by the
    peer benchmark: Retry-After 12 used to become ~32 s)."""
    decision = first_poll(response(status=429, headers={"retry-after": "12"}), u=0.99)
    assert decision.action is Action.WAIT
    assert decision.next_poll_at == at(12)
    assert decision.delay_source is DelaySource.PROVIDER_RETRY_AFTER


def test_429_without_retry_after_that_leaves_no_poll_before_the_deadline_stops_as_rate_limited() -> None:
    contract = make_contract(deadline="25s")  # raw 40 s, jittered 30 s: past the deadline
    decision = poll(contract, make_record(contract), response(status=429), u=0.5)
    assert decision.action is Action.STOP
    assert decision.reason is StopReason.RATE_LIMITED
    assert "leaves no request before" in decision.detail
