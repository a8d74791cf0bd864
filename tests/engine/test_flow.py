"""The step flow driven by hand: the order of its effects is the step protocol, whoever drives it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from pollwarden.core.lease import lease_ttl
from pollwarden.core.reasons import Phase, StopReason
from pollwarden.core.record import OperationRecord
from pollwarden.engine import flow
from pollwarden.store.base import Lease
from pollwarden.transport.http import CredentialError

from ..core.support import T0, body, make_contract, make_record, response

CONTRACT = make_contract(max_requests=3)
LEASE = Lease("report-export-2025-04-18-01", "me", 7, T0 + timedelta(seconds=15))


class Script:
    """Answers each effect the way a store and a provider would, and keeps what was asked, in order."""

    def __init__(self, exchange: object = None, *, write_ok: bool = True, raise_on: type | None = None) -> None:
        self.exchange = exchange if exchange is not None else response(body("running"))
        self.write_ok = write_ok
        self.raise_on = raise_on
        self.asked: list[flow.Effect[Any]] = []

    def answer(self, effect: flow.Effect[Any]) -> Any:
        self.asked.append(effect)
        if self.raise_on is not None and isinstance(effect, self.raise_on):
            raise KeyboardInterrupt
        if isinstance(effect, flow.Write):
            return self.write_ok
        if isinstance(effect, flow.Send):
            return self.exchange
        if isinstance(effect, flow.Now):
            return T0
        if isinstance(effect, flow.Draw):
            return 0.5
        if isinstance(effect, flow.NewDecisionId):
            return "d0000000001"
        if isinstance(effect, flow.CanResubmit):
            return False
        return None

    def run(self, steps: flow.Flow[flow.StepResult]) -> flow.StepResult:
        answer: Any = None
        failure: BaseException | None = None
        while True:
            try:
                effect = steps.throw(failure) if failure is not None else steps.send(answer)
            except StopIteration as stop:
                result: flow.StepResult = stop.value
                return result
            failure = None
            try:
                answer = self.answer(effect)
            except BaseException as exc:
                answer, failure = None, exc

    def kinds(self) -> list[str]:
        return [type(e).__name__ for e in self.asked]


def record(**changes: Any) -> OperationRecord:
    from dataclasses import replace

    return replace(make_record(CONTRACT), **changes)


CONTRACT_RECORD = make_record(CONTRACT)


def test_a_poll_reserves_and_extends_the_lease_before_it_sends_then_records_and_releases_once() -> None:
    script = Script()
    result = script.run(flow.step_claimed(CONTRACT, LEASE, record(), T0))
    # A pending answer asks for the contract's learnt model (None here: the plain backoff).
    assert script.kinds() == ["Now", "Write", "Now", "Send", "Now", "Draw", "LearntModel", "Write"]
    reserve, final = script.asked[1], script.asked[-1]
    assert isinstance(reserve, flow.Write) and not reserve.release
    assert reserve.record.status_requests_used == 1 and reserve.events[0].KIND == "reserved"
    # Item 1: the lease covers the bounded request, whatever claimed it (the worker claims with a fixed TTL).
    assert reserve.hold_until == T0 + lease_ttl(CONTRACT)
    assert isinstance(final, flow.Write) and final.release
    assert [event.KIND for event in final.events] == ["observed", "decision"]
    assert isinstance(result, flow.Polled) and result.decision.record.phase is Phase.ACTIVE


def test_the_learnt_model_is_asked_for_with_the_schedules_lag_target_and_max_delay() -> None:
    """The plan is placed within `max_delay` (no two checks further apart), not only cut to it when waited."""
    script = Script()
    script.run(flow.step_claimed(CONTRACT, LEASE, record(), T0))
    (asked,) = [effect for effect in script.asked if isinstance(effect, flow.LearntModel)]
    schedule = record().plan.schedule
    assert (asked.lag_target, asked.max_gap) == (schedule.lag_target, schedule.max_delay)


def test_a_stop_is_written_with_its_decision_request_and_nothing_waits_for_its_webhook() -> None:
    """The request's webhook is queued in the store's write (the outbox): the flow ends with the commit, and no
    driver sends anything after it (a receiver that hangs held the worker's lane, and `watch`'s exit)."""
    # R29, R36: the stop and its one decision request are written together.
    script = Script(response(body("no-such-state")))
    script.run(flow.step_claimed(CONTRACT, LEASE, record(), T0))
    assert script.kinds()[-2:] == ["NewDecisionId", "Write"]
    final = script.asked[-1]
    assert isinstance(final, flow.Write) and final.decision is not None
    assert final.decision.reason is StopReason.UNKNOWN_STATE


def test_a_refused_commit_logs_the_lost_lease() -> None:
    script = Script(response(body("no-such-state")), write_ok=False)
    result = script.run(flow.step_claimed(CONTRACT, LEASE, record(), T0))
    assert "Send" not in script.kinds()
    assert script.kinds()[-1] == "Append" and isinstance(result, flow.Busy)


def test_a_reservation_committed_after_the_deadline_sends_nothing() -> None:
    """CI saw it: a commit that stalled for seconds let the request go out after the deadline. The reservation
    stays counted; the clock is read again once it is durable, and nothing is sent past the deadline."""

    class SlowCommit(Script):
        def answer(self, effect: flow.Effect[Any]) -> Any:
            if isinstance(effect, flow.Now):
                self.asked.append(effect)
                return CONTRACT_RECORD.deadline_at + timedelta(milliseconds=1)
            return super().answer(effect)

    script = SlowCommit()
    result = script.run(flow.step_claimed(CONTRACT, LEASE, CONTRACT_RECORD, T0))
    assert "Send" not in script.kinds()
    assert isinstance(result, flow.Done) and result.record.reason is StopReason.DEADLINE_EXCEEDED
    assert result.record.status_requests_used == 1  # the reservation was durable: it is never given back
    final = script.asked[-1]
    assert isinstance(final, flow.Write) and final.release and final.decision is not None


class Clocked(Script):
    """Each Now answers the next reading of `readings` (then the last one again)."""

    def __init__(self, *readings: datetime) -> None:
        super().__init__()
        self.readings = list(readings)

    def answer(self, effect: flow.Effect[Any]) -> Any:
        if isinstance(effect, flow.Now):
            self.asked.append(effect)
            return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]
        return super().answer(effect)


def test_the_reservation_extends_the_lease_from_when_it_is_written_not_from_the_claim() -> None:
    """A worker's batch steps from its claim's time; one that waited 20 s would have extended the lease to a
    moment already past, and another owner could take the operation while the request was on its way."""
    waited = T0 + timedelta(seconds=20)
    script = Clocked(waited)
    script.run(flow.step_claimed(CONTRACT, LEASE, record(), T0))
    reserve = script.asked[1]
    assert isinstance(reserve, flow.Write) and reserve.hold_until == waited + lease_ttl(CONTRACT)
    assert "Send" in script.kinds()


def test_a_reservation_committed_too_late_for_its_lease_is_withheld_counted_and_the_lease_given_back() -> None:
    hold_until = T0 + lease_ttl(CONTRACT)
    script = Clocked(T0, hold_until - CONTRACT.timeout + timedelta(milliseconds=1))
    result = script.run(flow.step_claimed(CONTRACT, LEASE, record(), T0))
    assert "Send" not in script.kinds()
    final = script.asked[-1]
    assert isinstance(final, flow.Write) and final.release and final.record.status_requests_used == 1
    assert [event.KIND for event in final.events] == ["request_withheld"]
    assert isinstance(result, flow.Busy) and result.record.status_requests_used == 1
    # one reading earlier, the request still fits in the lease and goes out
    script = Clocked(T0, hold_until - CONTRACT.timeout)
    script.run(flow.step_claimed(CONTRACT, LEASE, record(), T0))
    assert "Send" in script.kinds()


def test_a_halt_sends_nothing() -> None:
    script = Script()
    result = script.run(flow.step_claimed(CONTRACT, LEASE, record(status_requests_used=3), T0))
    assert "Send" not in script.kinds()
    assert isinstance(result, flow.Done) and result.record.reason is StopReason.REQUEST_BUDGET_EXHAUSTED


def test_an_interrupt_during_the_request_gives_the_lease_back_and_propagates() -> None:
    """Item 20: a resume after Ctrl-C or SIGTERM must not wait out the lease."""
    script = Script(raise_on=flow.Send)
    with pytest.raises(KeyboardInterrupt):
        script.run(flow.step_claimed(CONTRACT, LEASE, record(), T0))
    assert script.kinds() == ["Now", "Write", "Now", "Send", "Release"]


def test_a_parser_defect_ends_in_a_recorded_stop_not_a_crash_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(flow, "observe", broken)
    script = Script()
    result = script.run(flow.step_claimed(CONTRACT, LEASE, record(), T0))
    assert isinstance(result, flow.Done) and result.record.reason is StopReason.INTEGRATION_FAILURE
    assert "RecursionError" in (result.record.detail or "")
    final = script.asked[-1]
    assert isinstance(final, flow.Write) and final.release and final.decision is not None


def test_a_request_refused_locally_is_an_integration_failure() -> None:
    class Refuses(Script):
        def answer(self, effect: flow.Effect[Any]) -> Any:
            if isinstance(effect, flow.Send):
                self.asked.append(effect)
                raise CredentialError("refusing to send the credential to http://elsewhere")
            return super().answer(effect)

    script = Refuses()
    result = script.run(flow.step_claimed(CONTRACT, LEASE, record(), T0))
    assert isinstance(result, flow.Done) and result.record.reason is StopReason.INTEGRATION_FAILURE
    assert "elsewhere" in (result.record.detail or "")


def test_not_due_claims_nothing() -> None:
    script = Script()
    later: datetime = T0 + timedelta(minutes=1)
    result = script.run(flow.step(CONTRACT, record(next_poll_at=later), T0))
    assert script.asked == [] and isinstance(result, flow.NotYet) and result.until == later


def test_an_unvetted_exception_text_never_reaches_the_record() -> None:
    """Only our own errors are written never to hold a secret; anything else is recorded by its type alone."""

    class Leaks(Script):
        def answer(self, effect: flow.Effect[Any]) -> Any:
            if isinstance(effect, flow.Send):
                raise RuntimeError("header Authorization: Bearer tok-LEAKED-1 could not be encoded")
            return super().answer(effect)

    result = Leaks().run(flow.step_claimed(CONTRACT, LEASE, record(), T0))
    assert isinstance(result, flow.Done) and result.record.reason is StopReason.INTEGRATION_FAILURE
    assert "RuntimeError" in (result.record.detail or "") and "tok-LEAKED" not in (result.record.detail or "")


def test_a_send_reached_too_late_by_its_driver_is_checked_again_and_not_sent() -> None:
    """A batch driver performs other operations' effects (their commits) between a flow's last clock reading
    and its Send: the Send carries the moment from which nothing may go out, and a driver that reaches it later
    throws `SendTooLate` in, so the flow applies the same rules at that moment instead of sending."""
    hold_until = T0 + lease_ttl(CONTRACT)

    class LateDriver(Clocked):
        def __init__(self, at: datetime) -> None:
            super().__init__(T0)
            self.at = at

        def answer(self, effect: flow.Effect[Any]) -> Any:
            if isinstance(effect, flow.Send):
                self.asked.append(effect)
                late = flow.too_late(effect, self.at)
                assert late is not None
                raise late
            return super().answer(effect)

    deadline = CONTRACT_RECORD.deadline_at
    script = LateDriver(deadline)
    result = script.run(flow.step_claimed(CONTRACT, LEASE, CONTRACT_RECORD, T0))
    [send] = [e for e in script.asked if isinstance(e, flow.Send)]  # once: the flow did not try again
    assert send.not_after == min(deadline, hold_until - CONTRACT.timeout + timedelta(microseconds=1))
    assert isinstance(result, flow.Done) and result.record.reason is StopReason.DEADLINE_EXCEEDED
    assert result.record.status_requests_used == 1

    script = LateDriver(hold_until - CONTRACT.timeout + timedelta(microseconds=1))
    result = script.run(flow.step_claimed(CONTRACT, LEASE, record(), T0))
    final = script.asked[-1]
    assert isinstance(final, flow.Write) and [event.KIND for event in final.events] == ["request_withheld"]
    assert isinstance(result, flow.Busy)
    # Up to that moment the rule lets it go: the same edge as the flow's own check.
    assert send.not_after is not None and flow.too_late(send, send.not_after - timedelta(microseconds=1)) is None


def test_a_refused_contract_stops_in_one_fenced_write_with_only_close_and_announces_nothing() -> None:
    """An operation whose stored contract is not installed: halted under its own rule, with a decision that uses
    nothing of that contract (no console link, no cancel URL), and no webhook of its text is announced."""
    script = Script()
    result = script.run(flow.refuse_claimed(LEASE, record(), T0, "not installed", rule="contract_not_installed"))
    assert script.kinds() == ["NewDecisionId", "Write"]
    (write,) = [e for e in script.asked if isinstance(e, flow.Write)]
    assert write.release and write.decision is not None
    assert [o.kind.value for o in write.decision.options] == ["close"]
    assert isinstance(result, flow.Done)
    stopped = result.record
    assert (stopped.phase, stopped.reason, stopped.detail) == (
        Phase.STOPPED,
        StopReason.INTEGRATION_FAILURE,
        "not installed",
    )
    assert write.events[0].KIND == "decision"
    assert write.events[0].new_event()[1]["rule"] == "contract_not_installed"


def test_a_refused_contract_of_a_final_operation_only_gives_the_lease_back() -> None:
    script = Script()
    done = record().stopped(StopReason.DEADLINE_EXCEEDED, "deadline passed", T0)
    result = script.run(flow.refuse_claimed(LEASE, done, T0, "not installed", rule="contract_not_installed"))
    assert script.kinds() == ["Release"] and isinstance(result, flow.Done) and result.record is done


def test_a_refused_contract_whose_write_is_fenced_out_records_the_lost_lease() -> None:
    script = Script(write_ok=False)
    result = script.run(flow.refuse_claimed(LEASE, record(), T0, "not installed", rule="contract_not_installed"))
    assert script.kinds() == ["NewDecisionId", "Write", "Append"] and isinstance(result, flow.Busy)


@pytest.mark.parametrize("left_ms", [50, 250, 5000])
def test_an_operation_another_owner_holds_is_looked_at_again_no_later_than_its_deadline(left_ms: int) -> None:
    """The pause before looking again at a held operation (200-500 ms) never outlasts the deadline ahead of it."""
    record = make_record(CONTRACT, deadline=timedelta(milliseconds=left_ms))
    script = Script()
    original = script.answer

    def held(effect: flow.Effect[Any]) -> Any:
        if isinstance(effect, flow.Claim):
            script.asked.append(effect)
            return None  # another owner holds the lease
        if isinstance(effect, flow.Draw):
            script.asked.append(effect)
            return 0.99  # the longest pause the draw gives
        return original(effect)

    script.answer = held  # type: ignore[method-assign]
    result = script.run(flow.step(CONTRACT, record, T0))
    assert isinstance(result, flow.Busy)
    assert result.retry_at == min(T0 + timedelta(milliseconds=200 + 0.99 * 300), record.deadline_at)
    assert result.retry_at <= record.deadline_at
