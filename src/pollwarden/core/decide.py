"""The controller as pure functions: record + observation + now (+ one random draw) -> decision.

`next_step` is R37's guard before any request; `reserve` is the budget increment that must be persisted
before sending (R16); `decide` turns one observation into a new record. Every outcome of `decide` is
named by a rule in `RULES`, one table, so `why` can say which rule fired and a test can cover each one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from .durations import format_duration, format_rfc3339
from .learnt import SNAP_SHARE, Learnt, phase, usable
from .learnt_inputs import estimate_words, near_estimate
from .observe import Kind, Observation
from .reasons import Category, DelaySource, StopReason
from .record import OperationRecord
from .schedule import Rejection, jittered, raw_delay


class Action(StrEnum):
    WAIT = "wait"
    SUCCEED = "succeed"
    STOP = "stop"


@dataclass(frozen=True)
class Poll:
    """Send one status request now (after reserving it)."""


@dataclass(frozen=True)
class Wait:
    until: datetime


@dataclass(frozen=True)
class Finished:
    """Terminal or escalated: nothing to send, ever, without a new authorisation."""


@dataclass(frozen=True)
class Halt:
    """A stop found before any request (deadline, budget): record it, send nothing."""

    reason: StopReason
    detail: str


Step = Poll | Wait | Finished | Halt


@dataclass(frozen=True)
class Decision:
    record: OperationRecord
    action: Action
    rule: str
    reason: StopReason | None = None
    next_poll_at: datetime | None = None
    delay_source: DelaySource | None = None
    raw_delay: timedelta | None = None
    jitter_u: float | None = None
    rejections: tuple[Rejection, ...] = field(default=())
    detail: str = ""
    learnt: Learnt | None = None
    """The contract's learnt model this decision was given (`why` replays with it); None: none was."""

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "rule": self.rule,
            "reason": self.reason.value if self.reason else None,
            "next_poll_at": format_rfc3339(self.next_poll_at) if self.next_poll_at else None,
            "delay_source": self.delay_source.value if self.delay_source else None,
            "raw_delay": format_duration(self.raw_delay) if self.raw_delay is not None else None,
            "jitter_u": self.jitter_u,
            "rejections": [r.to_json() for r in self.rejections],
            "detail": self.detail,
        }


def next_step(record: OperationRecord, now: datetime) -> Step:
    """R37 in order: final? deadline? budget? not yet due? — only then a poll."""
    if record.is_final:
        return Finished()
    if now >= record.deadline_at:
        return Halt(StopReason.DEADLINE_EXCEEDED, f"deadline {format_rfc3339(record.deadline_at)} has passed")
    useful_until = record.plan.useful_until
    if useful_until is not None and now >= useful_until:
        return Halt(
            StopReason.USEFULNESS_WINDOW_CLOSED,
            f"the result stopped being useful at {format_rfc3339(useful_until)}; more polling is not worth it",
        )
    if record.status_requests_used >= record.plan.max_status_requests:
        return Halt(
            StopReason.REQUEST_BUDGET_EXHAUSTED,
            f"all {record.plan.max_status_requests} status requests are used",
        )
    if now < record.due_at:
        return Wait(record.due_at)
    return Poll()


def reserve(record: OperationRecord, now: datetime) -> OperationRecord:
    """The reservation that is persisted before the request goes out; refused unless a poll is due."""
    step = next_step(record, now)
    if not isinstance(step, Poll):
        raise ValueError(f"no poll is due for {record.operation_id}: {type(step).__name__}")
    return record.reserved()


def defer(record: OperationRecord, until: datetime) -> OperationRecord:
    """Fleet pacing moves a poll later, never earlier (a Retry-After floor still holds), and never past a limit."""
    return record.deferred(max(record.next_poll_at, until))  # `deferred` keeps it within `Plan.latest_poll`


def paced_wait(record: OperationRecord, slot: datetime, now: datetime) -> timedelta:
    """How long fleet pacing waits for a near slot before this operation's poll: until the slot, but never past the
    plan's last moment (`Plan.latest_poll`), where the step stops the operation instead of sending."""
    return max(timedelta(0), min(slot, record.plan.latest_poll) - now)


def halt(record: OperationRecord, reason: StopReason, now: datetime, detail: str, rule: str) -> Decision:
    """Stop without a new observation (deadline, budget, lost credential): the last state is kept as seen."""
    return Decision(
        record=record.stopped(reason, detail, now), action=Action.STOP, rule=rule, reason=reason, detail=detail
    )


def decide(
    record: OperationRecord, obs: Observation, now: datetime, u: float, learnt: Learnt | None = None
) -> Decision:
    """Apply one observation to a record whose request was already reserved. `learnt`: the contract's model
    of its jobs' durations (`core.learnt`), which places the next check of a pending job when the plan lets it
    learn; whatever it is, the decision carries it, so `why` replays the decision with the same model."""
    seen = record.observed(
        at=obs.observed_at,
        http_status=obs.http_status,
        request_id=obs.request_id,
        state=obs.state,
        rate_limited=obs.kind is Kind.RATE_LIMITED,
        token_refused=obs.kind is Kind.TOKEN_REFUSED,
    ).keyed(obs.learn_key)
    key = (obs.kind, obs.category if obs.kind is Kind.JOB_STATE else None)
    rule_name, rule = RULES[key]
    decision = rule(_Ctx(seen, obs, now, u, rule_name, learnt))
    return decision if learnt is None else replace(decision, learnt=learnt)


@dataclass(frozen=True)
class _Ctx:
    """One observation being decided: `record` has already taken the observation in."""

    record: OperationRecord
    obs: Observation
    now: datetime
    u: float
    rule: str
    learnt: Learnt | None = None

    def stop(self, reason: StopReason, detail: str) -> Decision:
        return self._stopped(self.record.stopped(reason, detail, self.now), reason, detail)

    def end(self, reason: StopReason) -> Decision:
        """The provider ended the job: its own error, if it gave one, is kept for the person who looks."""
        final = self.record.ended(
            reason, self.obs.detail, self.now, self.obs.provider_error, result=self.obs.result, counts=self.obs.counts
        )
        return self._stopped(final, reason, self.obs.detail)

    def _stopped(self, final: OperationRecord, reason: StopReason, detail: str) -> Decision:
        return Decision(
            record=final,
            action=Action.STOP,
            rule=self.rule,
            reason=reason,
            rejections=self.obs.rejections,
            detail=detail,
        )

    def wait(self, *, floor: datetime | None = None, use_hint: bool = False) -> Decision:
        """Next poll time: local backoff, raised to a Retry-After floor or replaced by a valid hint (R9, R23).

        A 429 grows the delay sharply only when it names no Retry-After (R24): with one, the provider has said
        how long, and its answer is the floor over the ordinary backoff."""
        record = self.record
        spent = _limit_spent(record, self.now)
        if spent is not None:
            reason, why = spent
            return self.stop(reason, f"{self.obs.detail}; {why}")
        schedule = record.plan.schedule
        learnt_delay = self._learnt_delay() if use_hint else None
        if learnt_delay is not None:
            raw = _before_the_last_moment(record, self.now, min(learnt_delay, schedule.max_delay))
            when, source, rejections = self._when(self.now + raw, floor, use_hint, learnt=True)
        else:
            grow = record.rate_limited_consecutive if floor is None else 0
            raw = raw_delay(schedule, record.polls_completed, rate_limited=grow)
            when, source, rejections = self._when(self.now + jittered(schedule, raw, self.u), floor, use_hint)
        detail = self.obs.detail
        if source is DelaySource.LEARNT and self.learnt is not None:
            detail += "; " + self.learnt.words((when - self.now).total_seconds())
        elif source is DelaySource.PROVIDER_ESTIMATE and self.obs.estimate_at is not None:
            detail += "; " + estimate_words(self.obs.estimate_at)
        when, detail = _within_limits(record, when, detail)
        return Decision(
            record=record.waiting(when, source),
            action=Action.WAIT,
            rule=self.rule,
            next_poll_at=when,
            delay_source=source,
            raw_delay=raw,
            jitter_u=self.u,
            rejections=rejections,
            detail=detail,
        )

    def _learnt_delay(self) -> timedelta | None:
        """The delay the contract's learnt plan places the next check at, or None for the plain backoff: learning
        off, no model yet, a job older than the plan's last check, or a rate limit being waited out."""
        record = self.record
        learnt = usable(self.learnt, record)
        if learnt is None or record.rate_limited_consecutive:
            return None
        age, cap = (self.now - record.created_at).total_seconds(), record.plan.schedule.max_delay.total_seconds()
        delay = learnt.next_check(age + phase(record, learnt), self.u, cap)  # its own phase: no fleet waves
        return None if delay is None else timedelta(seconds=delay)

    def _when(
        self, backoff: datetime, floor: datetime | None, use_hint: bool, *, learnt: bool = False
    ) -> tuple[datetime, DelaySource, tuple[Rejection, ...]]:
        """The provider's word over the local backoff: a valid hint replaces it, a Retry-After raises it. Over a
        learnt check, a valid hint is a floor too: the provider knows this job, the history only its kind."""
        source = DelaySource.LEARNT if learnt else DelaySource.LOCAL_BACKOFF
        when, rejections = backoff, self.obs.rejections
        hint_at = self.obs.hint_at
        if use_hint and hint_at is not None:
            why = _hint_problem(hint_at, self.now, self.record)
            if why is None:
                if not learnt or hint_at >= when:
                    when, source = hint_at, DelaySource.PROVIDER_POLL_HINT
            else:
                rejections += (Rejection(self.obs.hint_field or "hint", format_rfc3339(hint_at), why),)
        estimate = self.obs.estimate_at
        if use_hint and estimate is not None and source is not DelaySource.PROVIDER_POLL_HINT:
            # A valid hint is the provider's word on the next check itself; the estimate only on the job's end.
            schedule = self.record.plan.schedule
            placed = near_estimate(when, estimate, self.now, schedule.lag_target, schedule.max_delay)
            if placed != when:
                when, source = placed, DelaySource.PROVIDER_ESTIMATE
        if floor is not None and floor >= when:
            when, source = floor, DelaySource.PROVIDER_RETRY_AFTER
        return when, source, rejections


def _limit_spent(record: OperationRecord, now: datetime) -> tuple[StopReason, str] | None:
    """After an answer that asks for more waiting, the limit already reached, budget first (the last request
    was just spent), or None."""
    if record.status_requests_used >= record.plan.max_status_requests:
        return StopReason.REQUEST_BUDGET_EXHAUSTED, f"all {record.plan.max_status_requests} status requests are used"
    if now >= record.deadline_at:
        return StopReason.DEADLINE_EXCEEDED, f"deadline {format_rfc3339(record.deadline_at)} has passed"
    useful_until = record.plan.useful_until
    if useful_until is not None and now >= useful_until:
        return StopReason.USEFULNESS_WINDOW_CLOSED, f"the result stopped being useful at {format_rfc3339(useful_until)}"
    return None


def _before_the_last_moment(record: OperationRecord, now: datetime, delay: timedelta) -> timedelta:
    """A learnt check planned past the plan's last moment (the deadline, the usefulness window) is made once just
    before it: the plan leaves long gaps where no job of the contract ended, and waking at the deadline only to
    stop would never look at a job that ended in one. Not when that moment is a tenth of the lag target away or
    less (this was the last check, or one was made moments ago)."""
    left = record.plan.latest_poll - now
    margin = record.plan.schedule.lag_target * SNAP_SHARE
    if now + delay < record.plan.latest_poll or left <= margin:
        return delay
    return left - min(timedelta(seconds=1), margin / 2)


def _within_limits(record: OperationRecord, when: datetime, detail: str) -> tuple[datetime, str]:
    """A wake-up past a limit happens at the limit instead, where `next_step` will stop it, and says so."""
    if when > record.deadline_at:
        detail += "; next poll would fall after the deadline, waking at the deadline instead"
        when = record.deadline_at
    useful_until = record.plan.useful_until
    if useful_until is not None and when > useful_until:
        detail += "; next poll would fall after the result stops being useful, waking then instead"
        when = useful_until
    return when, detail


def _hint_problem(hint_at: datetime, now: datetime, record: OperationRecord) -> str | None:
    if hint_at > record.deadline_at:
        return f"lands after the deadline {format_rfc3339(record.deadline_at)}"
    if hint_at < now:
        return "lies in the past (would make an immediate retry)"
    minimum = record.plan.schedule.base_delay / 2
    if hint_at - now < minimum:
        return f"sooner than the contract's minimum delay of {format_duration(minimum)}"
    return None


Rule = Callable[[_Ctx], Decision]


def _success(c: _Ctx) -> Decision:
    if c.obs.result_problem is not None:
        return c.stop(StopReason.RESULT_INVALID, f"{c.obs.detail}, but {c.obs.result_problem}")
    final = c.record.succeeded(c.obs.result, c.obs.detail, c.now, c.obs.counts)
    return Decision(record=final, action=Action.SUCCEED, rule=c.rule, rejections=c.obs.rejections, detail=c.obs.detail)


def _pending(c: _Ctx) -> Decision:
    expires_at = c.obs.expires_at
    if expires_at is not None and c.obs.observed_at > expires_at:
        return c.stop(
            StopReason.CONTRADICTORY_STATUS,
            f"{c.obs.detail} after the job's own expiry {format_rfc3339(expires_at)}",
        )
    # retry_after is set on a 2xx only when the contract says the provider means it ([schedule]
    # retry_after_on_success): then it is a floor under the hint and the backoff, as on a 429.
    c = replace(c, record=c.record.seen_pending(c.obs.observed_at))
    return c.wait(use_hint=True, floor=c.obs.retry_after)


def _ended(reason: StopReason) -> Rule:
    def rule(c: _Ctx) -> Decision:
        return c.end(reason)

    return rule


def _stop_with(reason: StopReason) -> Rule:
    def rule(c: _Ctx) -> Decision:
        return c.stop(reason, c.obs.detail)

    return rule


def _needs_action(c: _Ctx) -> Decision:
    return c.stop(StopReason.JOB_NEEDS_ACTION, f"{c.obs.detail}: the provider waits for a person to act there")


def _transport_failure(c: _Ctx) -> Decision:
    """5xx and network failures: the job state could not be learned; spend the transport budget (R14, R28)."""
    c = replace(c, record=c.record.transport_failed())
    used, limit = c.record.transport_failures_used, c.record.plan.max_transport_failures
    if used >= limit:
        reason = StopReason.AMBIGUOUS_DELIVERY if c.obs.delivery_unknown else StopReason.PROVIDER_FAILURE
        return c.stop(reason, f"{c.obs.detail}; transport-failure budget spent ({used} of {limit})")
    return c.wait(floor=c.obs.retry_after)


def _rate_limited(c: _Ctx) -> Decision:
    if c.record.rate_limited_consecutive >= c.record.plan.max_rate_limited:
        what = "429" if c.obs.http_status == 429 else "rate-limit"  # a [[rate_limit]] signal may be a 403 or 400
        detail = f"{c.record.rate_limited_consecutive} consecutive {what} responses"
        return c.stop(StopReason.RATE_LIMITED, detail)
    decision = c.wait(floor=c.obs.retry_after)
    if decision.action is Action.WAIT and decision.next_poll_at == c.record.deadline_at:
        # The rate limit leaves no poll before the deadline: say so now rather than wake up only to time out.
        detail = (
            f"HTTP {c.obs.http_status} and the provider's rate limit leaves no request before"
            f" {format_rfc3339(c.record.deadline_at)}"
        )
        return c.stop(StopReason.RATE_LIMITED, detail)
    return decision


def _credential_refreshed(c: _Ctx) -> Decision:
    """A 401 to a token a command or file can give again: it may just have expired, so the client has dropped it
    and the next poll, due at once, sends a fresh one. Once: a second 401 in a row is a refusal (never a loop)."""
    if c.record.token_refused_consecutive > 1:
        denied = replace(c, rule="authorization_denied")
        return denied.stop(StopReason.AUTHORIZATION_DENIED, f"{c.obs.detail} again, after the token was fetched again")
    spent = _limit_spent(c.record, c.now)
    if spent is not None:
        reason, why = spent
        return c.stop(reason, f"{c.obs.detail}; {why}")
    detail = f"{c.obs.detail}; it is fetched again and the next poll is due at once (once)"
    return Decision(
        record=c.record.waiting(c.now, DelaySource.LOCAL_BACKOFF),
        action=Action.WAIT,
        rule=c.rule,
        next_poll_at=c.now,
        delay_source=DelaySource.LOCAL_BACKOFF,
        raw_delay=timedelta(0),
        rejections=c.obs.rejections,
        detail=detail,
    )


def _not_found(c: _Ctx) -> Decision:
    """R26: a 404 soon after creation may be eventual consistency; later it is an integration failure."""
    grace = c.record.plan.not_found_grace
    if grace is not None and c.obs.observed_at - c.record.created_at <= grace:
        return c.wait()
    detail = (
        f"HTTP 404 for job {c.record.job_id} at {format_rfc3339(c.obs.observed_at)}, operation created"
        f" {format_rfc3339(c.record.created_at)}"
        + ("; outside the contract's not-found grace" if grace is not None else "; the contract names no grace")
    )
    return c.stop(StopReason.INTEGRATION_FAILURE, detail)


RULES: dict[tuple[Kind, Category | None], tuple[str, Rule]] = {
    (Kind.JOB_STATE, Category.SUCCESS): ("success_validated", _success),
    (Kind.JOB_STATE, Category.PENDING): ("pending_wait", _pending),
    (Kind.JOB_STATE, Category.FAILURE): ("job_failed", _ended(StopReason.JOB_FAILED)),
    (Kind.JOB_STATE, Category.CANCELLED): ("job_cancelled", _ended(StopReason.JOB_CANCELLED)),
    (Kind.JOB_STATE, Category.EXPIRED): ("job_expired", _ended(StopReason.JOB_EXPIRED)),
    # The provider holds the job for a person (an approval, a manual step): more polls cannot move it, and after
    # the person acts there, an extension resumes the watch.
    (Kind.JOB_STATE, Category.NEEDS_PERSON): ("job_needs_action", _needs_action),
    (Kind.JOB_STATE, Category.UNKNOWN): ("unknown_state", _stop_with(StopReason.UNKNOWN_STATE)),
    (Kind.INVALID_RESPONSE, None): ("invalid_response", _stop_with(StopReason.INVALID_RESPONSE)),
    (Kind.SERVER_ERROR, None): ("server_error", _transport_failure),
    (Kind.TRANSPORT, None): ("transport_failure", _transport_failure),
    (Kind.RATE_LIMITED, None): ("rate_limited", _rate_limited),
    (Kind.AUTH_DENIED, None): ("authorization_denied", _stop_with(StopReason.AUTHORIZATION_DENIED)),
    (Kind.TOKEN_REFUSED, None): ("credential_refreshed", _credential_refreshed),
    (Kind.NOT_FOUND, None): ("not_found", _not_found),
    (Kind.REDIRECT, None): ("redirect", _stop_with(StopReason.INTEGRATION_FAILURE)),
    (Kind.UNEXPECTED_STATUS, None): ("unexpected_status", _stop_with(StopReason.INTEGRATION_FAILURE)),
    # Nothing left the machine, so the provider learned nothing and retrying cannot help: a person fixes the
    # integration. The reserved request stays counted: the budget counts attempts, and this one was attempted.
    (Kind.LOCAL_ERROR, None): ("local_error", _stop_with(StopReason.INTEGRATION_FAILURE)),
}
