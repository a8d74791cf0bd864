"""The deadline bounds every wait (issue 24): no poll is ever due after the plan's last moment (the deadline, or the
end of the usefulness window), whatever the schedule, the provider, a person's decisions or a narrowing resume do,
and a first check that would fall at or after it is refused before anything is created.

Property tests on the pure core: every driver sleeps until `next_step`'s Wait (or `paced_wait`), and every interface
is told `due_at`, so a bound proved here is the bound of `watch`, the worker, the Python API and the MCP server."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pollwarden.core import (
    Action,
    Contract,
    OperationRecord,
    StopReason,
    decide,
    new_record,
    next_step,
    observe,
    parse_contract,
    reserve,
)
from pollwarden.core.admission import Create, Limits, Refuse, WatchRequest, admit, narrow
from pollwarden.core.contract.parse import ContractError
from pollwarden.core.decide import Finished, Halt, Poll, Wait, defer, halt, paced_wait
from pollwarden.core.escalation import OptionKind, apply_extension, apply_recheck, build_request
from pollwarden.core.reasons import DelaySource, Phase

from .support import T0, contract_text, make_record
from .test_decide import Answer, answers

S = timedelta(seconds=1)
ESCALATION = '\n[escalation]\nextend = "{extend}s"\nextend_checks = 2\npause = "{pause}s"\n'


def _contract(
    *, first_s: int, deadline_s: int, base_ms: int = 1000, factor: int = 4, extend_s: int = 60, pause_s: int = 30
) -> Contract:
    text = contract_text(
        base_delay=f"{base_ms}ms",
        max_delay=f"{base_ms * factor}ms",
        first_check=f"{first_s}s",
        deadline=f"{deadline_s}s",
        max_requests=8,
        max_transport_failures=2,
        max_rate_limited=2,
    )
    return parse_contract(text + ESCALATION.format(extend=extend_s, pause=pause_s), source="bound.toml")


def _bounded(record: OperationRecord) -> None:
    """The invariant every transition keeps: an active operation is never due after its plan's last moment."""
    if not record.is_final:
        assert record.next_poll_at <= record.plan.latest_poll, (record.next_poll_at, record.plan)
        assert record.due_at == record.next_poll_at


@settings(max_examples=300, deadline=None)
@given(
    first_s=st.integers(min_value=0, max_value=120),
    deadline_s=st.integers(min_value=1, max_value=3600),
    useful_s=st.none() | st.integers(min_value=1, max_value=3600),
    base_ms=st.integers(min_value=100, max_value=60_000),
    factor=st.integers(min_value=1, max_value=64),
    extend_s=st.integers(min_value=1, max_value=600),
    pause_s=st.integers(min_value=1, max_value=600),
    script=st.lists(answers, max_size=16),
    choices=st.lists(st.sampled_from(["extend", "pause", "recheck", "close"]), max_size=4),
    narrowing=st.lists(st.none() | st.integers(min_value=1, max_value=3600), max_size=6),
    oversleep_ms=st.lists(st.integers(min_value=0, max_value=120_000), min_size=1, max_size=4),
    later_s=st.integers(min_value=0, max_value=7200),
    u=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_no_wait_outlasts_a_limit_whatever_happens(
    first_s: int,
    deadline_s: int,
    useful_s: int | None,
    base_ms: int,
    factor: int,
    extend_s: int,
    pause_s: int,
    script: list[Answer],
    choices: list[str],
    narrowing: list[int | None],
    oversleep_ms: list[int],
    later_s: int,
    u: float,
) -> None:
    deadline_s = max(deadline_s, first_s + 1)  # a later first check is refused before it is created (below)
    contract = _contract(
        first_s=first_s, deadline_s=deadline_s, base_ms=base_ms, factor=factor, extend_s=extend_s, pause_s=pause_s
    )
    useful = None if useful_s is None else timedelta(seconds=max(useful_s, first_s + 1))
    record = new_record(contract, operation_id="op", job_id="j", now=T0, useful_for=useful)
    assert record.next_poll_at == T0 + first_s * S
    _bounded(record)
    now, sent, step_no = T0, 0, 0
    while step_no < 80:
        step_no += 1
        if narrowing and step_no % 3 == 0 and not record.is_final:  # a resume that narrows the limits
            asked = narrowing.pop()
            limit = None if asked is None else asked * S
            record = narrow(record, Limits(deadline=limit, useful_for=limit))
            _bounded(record)
        step = next_step(record, now)
        if isinstance(step, Finished):
            if not choices or record.phase is not Phase.STOPPED:
                break
            choice = choices.pop()
            request = build_request(record, contract, now, decision_id=f"d{step_no}")
            option = next((o for o in request.options if o.kind.value == choice), None)
            if option is None or choice == "close":
                break
            now += later_s * S  # a person answers whenever they do
            if option.kind is OptionKind.RECHECK:
                record = apply_recheck(record, option, now)
            else:
                record = apply_extension(record, option, now)
            _bounded(record)
            continue
        if isinstance(step, Halt):
            assert now >= record.plan.latest_poll or step.reason is StopReason.REQUEST_BUDGET_EXHAUSTED
            record = halt(record, step.reason, now, step.detail, "guard").record
            continue
        if isinstance(step, Wait):
            assert now < step.until <= record.plan.latest_poll, (step.until, record.plan)
            # A driver may wake late; it never sleeps past the bound on purpose.
            now = step.until + timedelta(milliseconds=oversleep_ms[step_no % len(oversleep_ms)])
            continue
        assert isinstance(step, Poll)
        assert now < record.plan.latest_poll, "a request at or after a limit"
        record = reserve(record, now)
        answer = script[sent] if sent < len(script) else Answer(kind="json")
        sent += 1
        observation = observe(contract, answer.build(now))
        now = observation.observed_at
        decision = decide(record, observation, now, u)
        record = decision.record
        _bounded(record)
        if decision.action is Action.WAIT:
            assert decision.next_poll_at is not None and decision.next_poll_at <= record.plan.latest_poll


@settings(max_examples=200, deadline=None)
@given(
    first_s=st.integers(min_value=0, max_value=7200),
    deadline_s=st.integers(min_value=1, max_value=7200),
    useful_s=st.none() | st.integers(min_value=1, max_value=7200),
)
def test_a_first_check_at_or_after_a_limit_is_refused_naming_both(
    first_s: int, deadline_s: int, useful_s: int | None
) -> None:
    contract = _contract(first_s=first_s, deadline_s=first_s + 1)
    limits = Limits(deadline=deadline_s * S, useful_for=None if useful_s is None else useful_s * S)
    if useful_s is not None and useful_s > deadline_s:
        return  # refused as longer than the deadline: that rule's own test
    answer = admit(WatchRequest(contract, "j", "op", limits), None, [], T0, token="abc")
    late = deadline_s <= first_s or (useful_s is not None and useful_s <= first_s)
    if late:
        assert isinstance(answer, Refuse), answer
        message = answer.message_for({"deadline": "--deadline", "useful_for": "--useful-for"})
        assert f"first_check {_words(first_s)}" in message and "nothing could be sent" in message
        assert (f"--deadline {_words(deadline_s)} is not longer" in message) is (deadline_s <= first_s)
    else:
        assert isinstance(answer, Create), answer
        assert answer.record.next_poll_at == T0 + first_s * S < answer.record.plan.latest_poll


def _words(seconds: int) -> str:
    from pollwarden.core.durations import format_duration

    return format_duration(seconds * S)


@pytest.mark.parametrize(
    ("extra", "bound"),
    [
        ("", "[limits].deadline 2s"),
        ('\n[agent]\nmax_deadline = "20s"\n', "[agent].max_deadline 20s"),
        ('\n[escalation]\nuseful_for = "25s"\n', "[escalation].useful_for 25s"),
    ],
)
def test_a_contract_whose_own_first_check_is_past_its_bounds_is_refused_as_it_is_read(extra: str, bound: str) -> None:
    deadline = "2s" if not extra else "1h"
    text = contract_text(first_check="30s", deadline=deadline) + extra
    with pytest.raises(ContractError, match=r"\[schedule\]\.first_check 30s is not shorter than ") as raised:
        parse_contract(text, source="late.toml")
    assert bound in str(raised.value) and "no watch could send one" in str(raised.value)


@settings(max_examples=300, deadline=None)
@given(
    ahead_s=st.integers(min_value=-3600, max_value=10**6),
    now_s=st.integers(min_value=0, max_value=7200),
    deadline_s=st.integers(min_value=1, max_value=7200),
    useful_s=st.none() | st.integers(min_value=1, max_value=7200),
)
def test_a_record_due_after_its_limit_is_woken_at_the_limit_and_stopped_there(
    ahead_s: int, now_s: int, deadline_s: int, useful_s: int | None
) -> None:
    """A record stored before the transitions kept the bound (a first check of 30 s under a deadline of 2 s)."""
    record = make_record(deadline=deadline_s * S, useful_for=None if useful_s is None else useful_s * S)
    stored = record._with(next_poll_at=T0 + ahead_s * S)
    latest = record.plan.latest_poll
    assert stored.due_at == min(stored.next_poll_at, latest)
    now = T0 + now_s * S
    step = next_step(stored, now)
    if now >= latest:
        assert isinstance(step, Halt)
        assert step.reason in (StopReason.DEADLINE_EXCEEDED, StopReason.USEFULNESS_WINDOW_CLOSED)
    elif isinstance(step, Wait):
        assert step.until <= latest
        assert isinstance(next_step(stored, step.until), Halt | Poll)
    else:
        assert isinstance(step, Poll) and now >= stored.due_at


@settings(max_examples=300, deadline=None)
@given(
    slot_s=st.integers(min_value=-60, max_value=10**5),
    now_s=st.integers(min_value=0, max_value=7200),
    deadline_s=st.integers(min_value=1, max_value=7200),
    useful_s=st.none() | st.integers(min_value=1, max_value=7200),
    next_s=st.integers(min_value=0, max_value=7200),
)
def test_fleet_pacing_never_waits_or_defers_past_a_limit(
    slot_s: int, now_s: int, deadline_s: int, useful_s: int | None, next_s: int
) -> None:
    record = make_record(deadline=deadline_s * S, useful_for=None if useful_s is None else useful_s * S)
    record = record.waiting(T0 + next_s * S, DelaySource.LOCAL_BACKOFF)
    latest = record.plan.latest_poll
    now, slot = T0 + now_s * S, T0 + slot_s * S
    waited = paced_wait(record, slot, now)
    assert timedelta(0) <= waited and (waited == timedelta(0) or now + waited <= latest)
    assert now + waited == max(now, min(slot, latest))
    deferred = defer(record, slot)
    assert deferred.next_poll_at <= latest and deferred.next_poll_at >= min(record.next_poll_at, latest)


@settings(max_examples=300, deadline=None)
@given(
    when_s=st.integers(min_value=-3600, max_value=10**6),
    deadline_s=st.integers(min_value=1, max_value=7200),
    useful_s=st.none() | st.integers(min_value=1, max_value=7200),
)
def test_every_transition_that_sets_a_poll_keeps_it_within_the_plan(
    when_s: int, deadline_s: int, useful_s: int | None
) -> None:
    record = make_record()
    plan = make_record(deadline=deadline_s * S, useful_for=None if useful_s is None else useful_s * S).plan
    when = T0 + when_s * S
    stopped = record.stopped(StopReason.AUTHORIZATION_DENIED, "401", T0)
    for moved in (
        record.with_plan(plan).waiting(when, DelaySource.PROVIDER_RETRY_AFTER),
        record.with_plan(plan).deferred(when),
        record._with(next_poll_at=when).with_plan(plan),
        stopped.extended(plan, when),
        stopped.rechecking(plan, when),
    ):
        assert moved.next_poll_at == min(when, plan.latest_poll)
        assert moved.phase is Phase.ACTIVE


def test_a_limit_moved_earlier_by_a_resume_moves_the_poll_with_it() -> None:
    contract = _contract(first_s=30, deadline_s=3600)
    record = new_record(contract, operation_id="op", job_id="j", now=T0)
    narrowed = narrow(record, Limits(deadline=2 * S))
    assert narrowed.next_poll_at == T0 + 2 * S == narrowed.deadline_at
    step = next_step(narrowed, T0)
    assert isinstance(step, Wait) and step.until == T0 + 2 * S
    halted = next_step(narrowed, step.until)
    assert isinstance(halted, Halt) and halted.reason is StopReason.DEADLINE_EXCEEDED
