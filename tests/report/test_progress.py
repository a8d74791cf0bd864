"""Progress: the one description of a waiting operation that the API, MCP and the terminal all show."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from pollwarden.core.decide import Action, Decision
from pollwarden.core.reasons import DelaySource, Phase, StopReason
from pollwarden.engine import Busy, Done, NotYet, Polled
from pollwarden.report.progress import progress_of, progress_of_record

from ..core.support import T0, make_contract, make_record

CONTRACT = make_contract(max_requests=20)


def test_a_waiting_step_says_when_and_why_the_next_check_comes_and_the_budget_left() -> None:
    record = replace(
        make_record(CONTRACT),
        last_state="running",
        status_requests_used=3,
        delay_source=DelaySource.PROVIDER_RETRY_AFTER,
    )
    shown = progress_of(NotYet(record, T0 + timedelta(seconds=12)))
    assert not shown.polled and not shown.final
    assert shown.seconds_to_next_check(T0) == 12.0
    line = shown.message(T0)
    assert line.startswith("running · checks 3/20 · next check in 12s (provider's Retry-After) · deadline in ")
    assert shown.to_json(T0)["checks_allowed"] == 20


def test_a_poll_is_marked_polled_and_a_busy_lease_names_the_other_owner() -> None:
    record = make_record(CONTRACT)
    decision = Decision(record, Action.WAIT, "running")
    assert progress_of(Polled(decision, None)).polled  # type: ignore[arg-type]
    busy = progress_of(Busy(record, T0 + timedelta(milliseconds=300)))
    assert busy.busy and "another owner is polling" in busy.message(T0)


def test_a_final_operation_has_no_next_check_and_no_countdown() -> None:
    stopped = replace(
        make_record(CONTRACT), phase=Phase.STOPPED, reason=StopReason.DEADLINE_EXCEEDED, last_state="running"
    )
    shown = progress_of(Done(stopped))
    assert shown.final and shown.next_check_at is None and shown.seconds_to_next_check(T0) is None
    assert shown.message(T0) == "running · checks 0/20 · stopped (deadline_exceeded)"
    assert progress_of_record(stopped) == shown


def test_elapsed_grows_toward_the_total_and_never_below_zero() -> None:
    record = make_record(CONTRACT)
    shown = progress_of_record(record)
    assert shown.elapsed(T0 - timedelta(seconds=5)) == 0.0
    assert shown.elapsed(T0 + timedelta(seconds=30)) == 30.0
    assert shown.total() == (record.deadline_at - record.created_at).total_seconds()


def test_a_sub_second_wait_reads_under_1s_not_0ms() -> None:
    record = make_record(CONTRACT)
    shown = progress_of(NotYet(record, T0 + timedelta(milliseconds=300)))
    assert "next check in under 1s" in shown.message(T0)
