"""The poll step as one sans-I/O flow: it yields effects (claim, write, send, ...) and never performs one.

This is the step protocol of docs/design.md written once. `step` and `step_claimed` are generators in the
manner of httpx's `auth_flow`: a driver executes each effect it yields and sends the answer back, so the rules
(reserve before send, record and release in one fenced write, a stop's decision request in that same write, give
the lease back when anything escapes) cannot drift between `watch`, the worker, the Python API and the MCP
server. Today every driver is synchronous (`engine.driver.Engine`); an asynchronous driver executes the same effects.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar, cast

from ..core.contract.parse import Contract
from ..core.decide import Decision, Finished, Halt, Poll, Wait, decide, halt, next_step, reserve
from ..core.durations import format_rfc3339
from ..core.escalation import DecisionRequest, build_request
from ..core.learnt import Learnt
from ..core.lease import lease_ttl
from ..core.observe import Exchange, Kind, Observation, observe
from ..core.reasons import Category, DelaySource, Phase, StopReason
from ..core.record import OperationRecord
from ..errors import PollwardenError
from ..events import DecisionEvent, LeaseLost, NewEvent, RequestWithheld, Reserved, outcome_events, poll_events
from ..store.base import FencedWrite, Lease

R = TypeVar("R")
T = TypeVar("T")


# -- effects: what the flow asks its driver to do, and what each one answers ----------------------------------


class Effect(Generic[R]):
    """A request to the driver; `R` is the type of the answer the driver sends back."""


@dataclass(frozen=True)
class Claim(Effect["tuple[Lease, OperationRecord] | None"]):
    """Take the operation's lease (None: someone else holds it); answers with the record reloaded under it."""

    operation_id: str
    ttl: timedelta


@dataclass(frozen=True)
class Write(FencedWrite, Effect[bool]):
    """One fenced write: the record, its events and any decision request, committed before the flow goes on;
    False if the lease was lost. A batching driver commits the writes of many flows in one transaction."""


@dataclass(frozen=True)
class Release(Effect[None]):
    lease: Lease


@dataclass(frozen=True)
class Append(Effect[None]):
    """An event that changes no record (a lost lease)."""

    operation_id: str
    event: NewEvent


@dataclass(frozen=True)
class Send(Effect[Exchange]):
    """The one status request, with the credential the driver's client holds.

    `not_after`: the flow checked the deadline and the lease's cover at one moment; a driver that performs other
    effects before this one (a batch commits other operations' writes first) sends nothing from this moment on
    and throws `SendTooLate` in instead (`too_late`), so the flow checks again."""

    job_id: str
    headers: dict[str, str]
    location: str | None
    not_after: datetime | None = None


class SendTooLate(PollwardenError):
    """Thrown into a flow by a driver that reached its Send at or after `not_after`: nothing was sent."""

    def __init__(self, at: datetime) -> None:
        super().__init__(f"the request was not sent: it was reached at {format_rfc3339(at)}, too late")
        self.at = at


def too_late(send: Send, now: datetime) -> SendTooLate | None:
    """What a driver throws in instead of performing `send` at `now`: the one rule every driver keeps."""
    return SendTooLate(now) if send.not_after is not None and now >= send.not_after else None


@dataclass(frozen=True)
class Renew(Effect[None]):
    """Drop the credential the driver's client holds, so the next request reads the one configured now (a person
    chose one check with it after a refusal: `DelaySource.CREDENTIAL_RECHECK`)."""


@dataclass(frozen=True)
class Now(Effect[datetime]):
    pass


@dataclass(frozen=True)
class Draw(Effect[float]):
    """One uniform draw in [0, 1) for the jitter, recorded so `why` can replay the decision."""


@dataclass(frozen=True)
class LearntModel(Effect[Learnt | None]):
    """The contract's learnt model for this lag target (`engine.learning`), None while it has none: asked only for
    a pending answer of an operation that may learn."""

    contract: str
    lag_target: timedelta
    key: str | None = None
    """The operation's `[schedule] learn_key` value, if known: that key's model (`Models.model`)."""
    max_gap: timedelta | None = None
    """The schedule's `max_delay`: the plan places no two checks further apart (None: no bound)."""


@dataclass(frozen=True)
class CanResubmit(Effect[bool]):
    """Whether a stored submission to an idempotent provider lets a decision offer a new job (R34)."""

    operation_id: str


@dataclass(frozen=True)
class NewDecisionId(Effect[str]):
    pass


Flow = Generator[Effect[Any], Any, T]


def ask(effect: Effect[R]) -> Generator[Effect[Any], Any, R]:
    """Yield one effect and return the driver's answer with the effect's own answer type."""
    return cast(R, (yield effect))


# -- what one step ends in ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Done:
    record: OperationRecord


@dataclass(frozen=True)
class NotYet:
    record: OperationRecord
    until: datetime


@dataclass(frozen=True)
class Busy:
    """Another owner holds the lease: it is sending or recording; look again shortly."""

    record: OperationRecord
    retry_at: datetime


@dataclass(frozen=True)
class Polled:
    decision: Decision
    observation: Observation


StepResult = Done | NotYet | Busy | Polled


# -- the flow ------------------------------------------------------------------------------------------------------


def step(contract: Contract, record: OperationRecord, now: datetime) -> Flow[StepResult]:
    """R37 from the top: nothing is claimed unless a poll or a stop is due."""
    first = next_step(record, now)
    if isinstance(first, Finished):
        return Done(record)
    if isinstance(first, Wait):
        return NotYet(record, first.until)
    claimed = yield from ask(Claim(record.operation_id, lease_ttl(contract)))
    if claimed is None:
        u = yield from ask(Draw())
        return Busy(record, _look_again(record, now, timedelta(milliseconds=200 + u * 300)))
    lease, current = claimed  # reloaded under the lease: another owner may have moved it on
    return (yield from step_claimed(contract, lease, current, now))


def step_claimed(contract: Contract, lease: Lease, record: OperationRecord, now: datetime) -> Flow[StepResult]:
    """R37 from "acquire ownership lease" on: the worker enters here with a lease from its batch claim.

    Whatever escapes (an interrupt, a store error) gives the lease back first, so a resume starts at once."""
    try:
        step = next_step(record, now)
        if isinstance(step, Finished | Wait):
            yield from ask(Release(lease))
            return Done(record) if isinstance(step, Finished) else NotYet(record, step.until)
        if isinstance(step, Halt):
            decision = halt(record, step.reason, now, step.detail, rule=step.reason.value)
            return (yield from _record(contract, lease, record, None, decision, now, None))
        assert isinstance(step, Poll)
        return (yield from _poll(contract, lease, record, now))
    except GeneratorExit:
        raise
    except BaseException:
        yield from ask(Release(lease))
        raise


def refuse_claimed(lease: Lease, record: OperationRecord, now: datetime, detail: str, *, rule: str) -> Flow[StepResult]:
    """A claimed operation whose stored contract must not be run (`engine.installed`: not an installed version):
    stopped as `integration_failure` under `rule`, with a decision request a person can only close, in one fenced
    write. Nothing of the contract is used: no request, no credential, no console link, no webhook."""
    if record.is_final:
        yield from ask(Release(lease))
        return Done(record)
    decision = halt(record, StopReason.INTEGRATION_FAILURE, now, detail, rule=rule)
    trail = [DecisionEvent.of(record, None, decision, now), *outcome_events(decision.record)]
    decision_id = yield from ask(NewDecisionId())
    request = build_request(decision.record, None, now, decision_id=decision_id)
    written = yield from ask(Write(lease, decision.record, list(trail), release=True, decision=request))
    if not written:
        return (yield from _lost(lease, record, now))
    return Done(decision.record)


def _poll(contract: Contract, lease: Lease, record: OperationRecord, now: datetime) -> Flow[StepResult]:
    reserved = reserve(record, now)
    # The reservation is committed before the request goes out (R16), and it moves the lease expiry to cover
    # the bounded request, so no other owner can take the operation while the answer is on its way. The cover is
    # measured from now, not from the step's start: a worker's batch may have waited since its claim.
    hold_until = (yield from ask(Now())) + lease_ttl(contract)
    if not (
        yield from ask(
            Write(
                lease,
                reserved,
                [Reserved.prepared(Reserved.payload(reserved, lease.token))],
                release=False,
                hold_until=hold_until,
            )
        )
    ):
        return (yield from _lost(lease, record, now))
    if reserved.delay_source is DelaySource.CREDENTIAL_RECHECK:
        yield from ask(Renew())  # the check a person chose is sent with the credential configured now
    sending = yield from ask(Now())
    # Nothing of pollwarden's own goes to the provider unless the contract's [headers] ask for it.
    headers = contract.poll_headers(reservation=reserved.status_requests_used, lease=lease.token)
    # Nothing goes out once the deadline has passed, nor so late that the lease could lapse before the bounded
    # request ends (another owner could take the operation while this answer is on its way).
    # (`too_late` refuses from `not_after` on: a request may still start exactly at hold_until - timeout.)
    not_after = min(reserved.deadline_at, hold_until - contract.timeout + timedelta(microseconds=1))
    while True:
        if sending >= reserved.deadline_at:
            # The deadline passed while the reservation was committed (a slow fsync, a descheduled process): the
            # reservation stands as counted, and nothing is sent after the deadline, however late the commit was.
            detail = f"deadline {format_rfc3339(reserved.deadline_at)} passed before the request could go out"
            late = StopReason.DEADLINE_EXCEEDED
            decision = halt(reserved, late, sending, detail, rule=late.value)
            return (yield from _record(contract, lease, reserved, None, decision, sending, None))
        if sending + contract.timeout > hold_until:
            # One owner per operation wins over one request's cost.
            why = f"the reservation took until {format_rfc3339(sending)}; the lease would not cover the request"
            withheld = RequestWithheld(request_no=reserved.status_requests_used, why=why)
            if not (yield from ask(Write(lease, reserved, [withheld], release=True))):
                return (yield from _lost(lease, record, sending))
            return Busy(reserved, sending)
        try:
            exchange: Exchange | None = yield from ask(
                Send(record.job_id, headers, record.status_location, not_after=not_after)
            )
            problem = None
        except SendTooLate as late_send:  # the driver reached it too late: the same rules, at that moment
            sending = late_send.at
            continue
        except Exception as exc:  # refused locally (a status location off the contract's origin, a bad header)
            exchange, problem = None, f"the status request could not be sent: {_words(exc)}"
        break
    after = yield from ask(Now())
    observation: Observation | None = None
    if exchange is not None:
        try:
            observation = observe(contract, exchange)
        except Exception as exc:  # a parser defect must end in a recorded stop, never a crash loop
            problem = f"the provider's answer could not be classified: {type(exc).__name__}"
    if observation is None:
        decision = halt(reserved, StopReason.INTEGRATION_FAILURE, after, problem or "no answer", rule="internal_error")
        return (yield from _record(contract, lease, reserved, None, decision, after, None))
    u = yield from ask(Draw())
    learnt = None
    if reserved.plan.schedule.learn and observation.kind is Kind.JOB_STATE and observation.category is Category.PENDING:
        key = reserved.sample_key or observation.learn_key
        schedule = reserved.plan.schedule
        learnt = yield from ask(LearntModel(reserved.contract_name, schedule.lag_target, key, schedule.max_delay))
    decision = decide(reserved, observation, after, u, learnt)
    return (yield from _record(contract, lease, reserved, observation, decision, after, u, exchange=exchange))


def _record(
    contract: Contract,
    lease: Lease,
    before: OperationRecord,
    observation: Observation | None,
    decision: Decision,
    now: datetime,
    u: float | None,
    *,
    exchange: Exchange | None = None,
) -> Flow[StepResult]:
    """The decision, its trail and any decision request (with its webhook's delivery, queued by the store) in one
    fenced write that releases the lease."""
    if observation is not None and exchange is not None and u is not None:
        events = poll_events(before, observation, decision, now, u, sent_at=exchange.sent_at)
    else:  # a stop without an answer to show: the decision and its outcome
        trail = [DecisionEvent.of(before, None, decision, now), *outcome_events(decision.record)]
        events = list(trail)
    request = yield from _escalation(contract, decision.record, now)
    try:
        written = yield from ask(Write(lease, decision.record, events, release=True, decision=request))
    except Exception as exc:
        # The trail itself could not be written (a value the audit encoder refused): stop with what is known
        # for certain, without the provider's data, so the operation does not poll again on every claim.
        if observation is None:
            raise
        stopped = halt(
            before, StopReason.INTEGRATION_FAILURE, now, f"the answer could not be recorded: {type(exc).__name__}",
            rule="internal_error",
        )  # fmt: skip
        return (yield from _record(contract, lease, before, None, stopped, now, None))
    if not written:
        return (yield from _lost(lease, before, now))
    # Its webhook, if the contract names one, was queued in that write (the outbox): nobody here waits for it.
    # A stop without an observation (a limit reached, an answer that could not be classified) is final.
    return Polled(decision, observation) if observation is not None else Done(decision.record)


def _escalation(contract: Contract, record: OperationRecord, now: datetime) -> Flow[DecisionRequest | None]:
    """Every stop gets one decision request, written in the same transaction as the stop (R29)."""
    if record.phase is not Phase.STOPPED:
        return None
    resubmit = contract.submit is not None and contract.submit.idempotency_header is not None
    if resubmit:
        resubmit = yield from ask(CanResubmit(record.operation_id))
    decision_id = yield from ask(NewDecisionId())
    return build_request(record, contract, now, decision_id=decision_id, can_resubmit=resubmit)


def _lost(lease: Lease, record: OperationRecord, now: datetime) -> Flow[StepResult]:
    """A fenced write changed nothing: a newer owner exists. Its facts win; ours are discarded."""
    lost = LeaseLost(owner=lease.owner, token=lease.token)
    yield from ask(Append(lease.operation_id, lost))
    return Busy(record, _look_again(record, now, timedelta(milliseconds=200)))


def _look_again(record: OperationRecord, now: datetime, after: timedelta) -> datetime:
    """When to look again at an operation another owner holds: after a short pause, but no later than the plan's
    last moment while it is still ahead (no wait outlasts a limit); past it, the pause (the holder records the stop)."""
    latest = record.plan.latest_poll
    return min(now + after, latest) if now < latest else now + after


def _words(exc: Exception) -> str:
    """An exception as a person may read it: the message of our own errors (written never to hold a secret),
    only the type of anything else, whose text nobody vetted."""
    text = str(exc).strip() if isinstance(exc, PollwardenError) else ""
    return text[:300] if text else type(exc).__name__
