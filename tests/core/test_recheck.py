"""A credential fixed after a refusal: `authorization_denied` offers one check with the credential configured now.

One check, counted (the budget grows by one only when it is spent), due at once, with time to send it; the answer
decides what follows, and a refusal is the same stop again with a new decision: a person chooses each check.
Pure core, so every driver (decide, a resumed watch, a worker, the MCP server) gets the same rule."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pollwarden.core import Action, Contract, DelaySource, OperationRecord, StopReason, next_step, parse_contract
from pollwarden.core.decide import Finished, Poll
from pollwarden.core.escalation import (
    ALLOWED,
    RECHECK_LABEL,
    DecisionError,
    DecisionRequest,
    OptionKind,
    apply_recheck,
    build_request,
    stop_marker,
)
from pollwarden.core.reasons import Phase

from .support import T0, body, contract_text, make_record, poll, response

S = timedelta(seconds=1)
CONSOLE = '\n[escalation]\nconsole_url = "https://provider.example/console/{job_id}"\n'


def _with_auth(auth: str, *, max_requests: int = 12, deadline: str = "40m") -> str:
    text = contract_text(max_requests=max_requests, deadline=deadline)
    return text.replace("[states]", f"[auth]\n{auth}\n[states]", 1) + CONSOLE


ENV = parse_contract(_with_auth('secret_env = "TOKEN"'), source="t.toml")
COMMAND = parse_contract(_with_auth('token_command = ["print-token"]\ntoken_ttl = "50m"'), source="t.toml")


def _denied(contract: Contract = ENV) -> OperationRecord:
    record = make_record(contract)
    decision = poll(contract, record, response(status=401))
    assert decision.reason is StopReason.AUTHORIZATION_DENIED
    return decision.record


def test_authorization_denied_offers_one_check_with_the_credential_configured_now() -> None:
    assert ALLOWED[StopReason.AUTHORIZATION_DENIED] == (OptionKind.RECHECK, OptionKind.INSPECT, OptionKind.CLOSE)
    request = build_request(_denied(), ENV, T0 + S, decision_id="d1")
    recheck = request.options[0]
    assert (recheck.number, recheck.kind, recheck.label) == (1, OptionKind.RECHECK, RECHECK_LABEL)
    assert RECHECK_LABEL == "check once with the credential configured now"
    assert "sends one check with the credential configured now" in recheck.effect
    assert "check 2 of 12" in recheck.effect
    assert "stops the operation again with a new decision" in recheck.effect
    assert [o.kind for o in request.options] == [OptionKind.RECHECK, OptionKind.INSPECT, OptionKind.CLOSE]
    assert DecisionRequest.from_json(request.to_json()) == request


def test_no_other_stop_offers_it() -> None:
    assert [reason for reason, kinds in ALLOWED.items() if OptionKind.RECHECK in kinds] == [
        StopReason.AUTHORIZATION_DENIED
    ]


def test_the_check_is_due_at_once_counted_and_keeps_the_budget_it_had() -> None:
    denied = _denied()
    request = build_request(denied, ENV, T0 + S, decision_id="d1")
    later = T0 + 5 * 60 * S
    rechecked = apply_recheck(denied, request.option(1), later)
    assert rechecked.phase is Phase.ACTIVE and rechecked.reason is None
    assert rechecked.delay_source is DelaySource.CREDENTIAL_RECHECK
    assert rechecked.next_poll_at == later
    assert rechecked.status_requests_used == 1 and rechecked.plan.max_status_requests == 12
    assert rechecked.deadline_at == denied.deadline_at  # 35 minutes left: nothing to move
    assert isinstance(next_step(rechecked, later), Poll)
    assert stop_marker(rechecked) != request.stop_marker


def test_a_spent_budget_grows_by_one_and_a_passed_deadline_leaves_time_to_send() -> None:
    contract = parse_contract(_with_auth('secret_env = "TOKEN"', max_requests=1, deadline="1m"), source="t.toml")
    denied = _denied(contract)
    request = build_request(denied, contract, T0 + S, decision_id="d1")
    assert "check 2 of 1: the budget grows by one for it" in request.option(1).effect
    late = T0 + 3600 * S
    rechecked = apply_recheck(denied, request.option(1), late)
    assert rechecked.plan.max_status_requests == 2 and rechecked.status_requests_used == 1
    assert rechecked.deadline_at == late + timedelta(minutes=2)  # max(1m, max_delay 120s)
    assert isinstance(next_step(rechecked, late), Poll)
    # Exactly one request: after it, the budget is spent again.
    answered = poll(contract, rechecked, response(body("running"), at=late))
    assert answered.reason is StopReason.REQUEST_BUDGET_EXHAUSTED
    assert isinstance(next_step(answered.record, late), Finished)


def test_still_refused_is_the_same_stop_again_with_a_new_decision_never_a_loop() -> None:
    denied = _denied()
    first = build_request(denied, ENV, T0 + S, decision_id="d1")
    rechecked = apply_recheck(denied, first.option(1), T0 + 60 * S)
    again = poll(ENV, rechecked, response(status=401, at=T0 + 61 * S))
    assert again.action is Action.STOP and again.reason is StopReason.AUTHORIZATION_DENIED
    assert again.record.status_requests_used == 2
    # Stopped: nothing more is due until a person chooses the check again, on a new decision.
    assert isinstance(next_step(again.record, T0 + 3600 * S), Finished)
    second = build_request(again.record, ENV, T0 + 62 * S, decision_id="d2")
    assert second.stop_marker != first.stop_marker
    assert second.option(1).kind is OptionKind.RECHECK
    with pytest.raises(DecisionError):
        apply_recheck(rechecked, first.option(1), T0 + 62 * S)  # the first decision's operation moved on


def test_a_refused_fresh_token_stops_at_once_instead_of_a_second_request() -> None:
    first = poll(COMMAND, make_record(COMMAND), response(status=401))
    assert first.rule == "credential_refreshed"
    denied = poll(COMMAND, first.record, response(status=401)).record
    assert denied.reason is StopReason.AUTHORIZATION_DENIED
    request = build_request(denied, COMMAND, T0 + S, decision_id="d1")
    rechecked = apply_recheck(denied, request.option(1), T0 + 60 * S)
    again = poll(COMMAND, rechecked, response(status=401, at=T0 + 60 * S))
    assert again.action is Action.STOP and again.reason is StopReason.AUTHORIZATION_DENIED
    assert again.record.status_requests_used == 3  # one check, not a refresh and a second one


def test_an_accepted_check_goes_on_as_the_answer_says() -> None:
    denied = _denied()
    request = build_request(denied, ENV, T0 + S, decision_id="d1")
    rechecked = apply_recheck(denied, request.option(1), T0 + 60 * S)
    running = poll(ENV, rechecked, response(body("running"), at=T0 + 60 * S))
    assert running.action is Action.WAIT and running.delay_source is DelaySource.LOCAL_BACKOFF
    done = poll(ENV, running.record, response(body("succeeded", result_url="/r/1"), at=running.record.next_poll_at))
    assert done.action is Action.SUCCEED


def test_only_a_refused_operation_and_only_this_option() -> None:
    denied = _denied()
    request = build_request(denied, ENV, T0 + S, decision_id="d1")
    with pytest.raises(DecisionError, match="not a check"):
        apply_recheck(denied, request.option(3), T0)
    budget = make_record(ENV, max_requests=1)
    spent = poll(ENV, budget, response(body("running"))).record
    assert spent.reason is StopReason.REQUEST_BUDGET_EXHAUSTED
    with pytest.raises(DecisionError, match="not refused"):
        apply_recheck(spent, request.option(1), T0)
