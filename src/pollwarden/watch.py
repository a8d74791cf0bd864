"""The driver for one operation: load, ask the core, do what it says, hand back what happened.

It follows R37 step by step and decides nothing itself. The lease is held only from the claim to the
record of one response (R38); sleeping happens with no lease and no open transaction.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .core.codec import record_to_json
from .core.contract import Contract
from .core.decide import Decision, Finished, Halt, Poll, Wait, decide, halt, next_step, reserve
from .core.durations import format_rfc3339
from .core.escalation import DecisionRequest, build_request
from .core.observe import Observation, observe
from .core.reasons import Phase
from .core.record import OperationRecord
from .http import StatusClient
from .store.base import Lease, NewEvent, Store


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_decision_id() -> str:
    """Short enough to type after `pollwarden decide`; random so two stops never share one."""
    return "d" + secrets.token_hex(5)


def can_resubmit(store: Store, contract: Contract, record: OperationRecord) -> bool:
    """A new job may be offered only from a stored submission to a provider that dedups by token (R34)."""
    return (
        contract.submit is not None
        and contract.submit.idempotency_header is not None
        and store.get_submission(record.operation_id) is not None
    )


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


def lease_ttl(contract: Contract) -> timedelta:
    """Long enough for one bounded request and its record, short enough that a crash is not waited out."""
    return contract.timeout * 2 + timedelta(seconds=5)


def decision_events(
    before: OperationRecord, obs: Observation, decision: Decision, now: datetime, u: float, *, sent_at: datetime
) -> list[NewEvent]:
    """What one poll leaves in the trail: the observation, the decision with its inputs, and the outcome."""
    events: list[NewEvent] = [
        ("observed", {"sent_at": format_rfc3339(sent_at), **obs.to_json()}),
        (
            "decision",
            {
                **decision.to_json(),
                "request_no": before.status_requests_used,
                "max_status_requests": before.plan.max_status_requests,
                "deadline_at": format_rfc3339(before.deadline_at),
                "state": obs.state,
                "http_status": obs.http_status,
                "inputs": {
                    "record": record_to_json(before),
                    "observation": obs.to_json(),
                    "now": now.isoformat(),
                    "u": u,
                },
            },
        ),
    ]
    events.extend(("guidance_rejected", r.to_json()) for r in decision.rejections)
    events.extend(outcome_events(decision.record))
    return events


def outcome_events(record: OperationRecord) -> list[NewEvent]:
    if record.phase is Phase.SUCCEEDED:
        return [("succeeded", {"result": record.result, "state": record.last_state})]
    if record.phase is Phase.STOPPED and record.reason is not None:
        kind = "job_ended" if record.reason.job_ended else "escalated"
        return [(kind, {"reason": record.reason.value, "detail": record.detail, "summary": record.summary()})]
    return []


class Watcher:
    """Runs the R37 step for one operation through a store and a status client."""

    def __init__(
        self,
        store: Store,
        contract: Contract,
        client: StatusClient,
        *,
        owner: str,
        clock: Callable[[], datetime] = utcnow,
        rng: random.Random | None = None,
        notify: Callable[[DecisionRequest], None] | None = None,
    ) -> None:
        self.store = store
        self.contract = contract
        self.client = client
        self.owner = owner
        self.clock = clock
        self.rng = rng or random.Random()
        self.notify = notify

    def _escalation(self, record: OperationRecord, now: datetime) -> DecisionRequest | None:
        """Every stop gets one decision request, written in the same transaction as the stop (R29)."""
        if record.phase is not Phase.STOPPED:
            return None
        return build_request(
            record,
            self.contract,
            now,
            decision_id=new_decision_id(),
            can_resubmit=can_resubmit(self.store, self.contract, record),
        )

    def _announce(self, request: DecisionRequest | None) -> None:
        if request is not None and self.notify is not None:
            self.notify(request)

    def step(self, operation_id: str) -> StepResult:
        stored = self.store.get(operation_id)
        if stored is None:
            raise KeyError(operation_id)
        now = self.clock()
        first = next_step(stored.record, now)
        if isinstance(first, Finished):
            return Done(stored.record)
        if isinstance(first, Wait):
            return NotYet(stored.record, first.until)
        claimed = self.store.claim(operation_id, self.owner, now, lease_ttl(self.contract))
        if claimed is None:
            return Busy(stored.record, now + timedelta(milliseconds=200 + self.rng.random() * 300))
        lease, record = claimed  # reloaded under the lease: another owner may have moved it on
        return self.step_claimed(lease, record, now)

    def step_claimed(self, lease: Lease, record: OperationRecord, now: datetime) -> StepResult:
        """R37 from "acquire ownership lease" on: the worker enters here with a lease from its batch claim."""
        step = next_step(record, now)
        if isinstance(step, Finished | Wait):
            self.store.release(lease)
            return Done(record) if isinstance(step, Finished) else NotYet(record, step.until)
        if isinstance(step, Halt):
            decision = halt(record, step.reason, now, step.detail, rule=step.reason.value)
            event = {
                **decision.to_json(),
                "request_no": record.status_requests_used,
                "max_status_requests": record.plan.max_status_requests,
                "deadline_at": format_rfc3339(record.deadline_at),
                "state": record.last_state,
                "http_status": record.last_http_status,
                "inputs": {"record": record_to_json(record), "now": now.isoformat()},
            }
            request = self._escalation(decision.record, now)
            events: list[NewEvent] = [("decision", event), *outcome_events(decision.record)]
            if self.store.write(lease, decision.record, events, now, release=True, decision=request):
                self._announce(request)
            else:
                self._lost(lease, decision.record, now)
            return Done(decision.record)
        assert isinstance(step, Poll)
        return self._poll(lease, record, now)

    def _poll(self, lease: Lease, record: OperationRecord, now: datetime) -> StepResult:
        reserved = reserve(record, now)
        event = {
            "request_no": reserved.status_requests_used,
            "max_status_requests": reserved.plan.max_status_requests,
            "deadline_at": format_rfc3339(reserved.deadline_at),
            "lease_token": lease.token,
        }
        if not self.store.write(lease, reserved, [("reserved", event)], now, release=False):
            return self._lost(lease, record, now)
        exchange = self.client.fetch(
            record.job_id,
            {
                "X-Pollwarden-Reservation": str(reserved.status_requests_used),
                "X-Pollwarden-Lease": str(lease.token),
            },
            location=record.status_location,
        )
        observation = observe(self.contract, exchange)
        after = self.clock()
        u = self.rng.random()
        decision = decide(reserved, observation, after, u)
        events = decision_events(reserved, observation, decision, after, u, sent_at=exchange.sent_at)
        request = self._escalation(decision.record, after)
        if not self.store.write(lease, decision.record, events, after, release=True, decision=request):
            return self._lost(lease, reserved, after)
        self._announce(request)
        return Polled(decision, observation)

    def _lost(self, lease: Lease, record: OperationRecord, now: datetime) -> Busy:
        """A fenced write changed nothing: a newer owner exists. Its facts win; ours are discarded."""
        self.store.append(lease.operation_id, "lease_lost", {"owner": lease.owner, "token": lease.token}, now)
        return Busy(record, now + timedelta(milliseconds=200))

    def run(
        self,
        operation_id: str,
        *,
        on_progress: Callable[[StepResult], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        tick: float | None = None,
    ) -> OperationRecord:
        """Step until the operation is final; sleep in between with no lease held (R38)."""
        while True:
            result = self.step(operation_id)
            if on_progress is not None:
                on_progress(result)
            if isinstance(result, Done):
                return result.record
            if isinstance(result, Polled):
                if result.decision.record.is_final:
                    return result.decision.record
                continue
            until = result.until if isinstance(result, NotYet) else result.retry_at
            delay = max(0.0, (until - self.clock()).total_seconds())
            sleep(min(delay, tick) if tick else delay)


def describe(result: StepResult) -> dict[str, Any]:
    """A small machine view of a step, for logs and the MCP server."""
    if isinstance(result, Polled):
        return {"step": "polled", **result.decision.to_json()}
    if isinstance(result, NotYet):
        return {"step": "not_yet", "until": format_rfc3339(result.until)}
    if isinstance(result, Busy):
        return {"step": "busy", "retry_at": format_rfc3339(result.retry_at)}
    return {"step": "done", "phase": result.record.phase.value}
