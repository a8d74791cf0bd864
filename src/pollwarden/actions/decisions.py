"""A person's answer to a decision request, applied once, under the operation's lease, and audited (R41–R43).

`decide` is the only path that widens an operation's authority. It names the approver, refuses a second
answer, refuses options that expired because the operation moved on, and runs a cancel only when the
contract documents one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from .. import events as ev
from ..core.contract.parse import Contract
from ..core.durations import format_rfc3339
from ..core.escalation import (
    DecisionError,
    DecisionRequest,
    OptionKind,
    apply_extension,
    apply_recheck,
    stop_marker,
)
from ..core.lease import lease_ttl
from ..core.reasons import Phase, StopReason
from ..core.record import OperationRecord
from ..core.transitions import Change
from ..core.words import plural
from ..engine import changes
from ..shown import has_control
from ..store.base import DecisionTaken, Resolution, Store, StoredDecision
from ..store.owner import process_owner
from ..transport.http import StatusClient
from .provider import ActionError, cancel, submit


@dataclass(frozen=True)
class Outcome:
    message: str
    status: str  # decided | refused | open (inspect) | expired
    action: dict[str, Any] | None = None
    resume: str | None = None
    """The operation to watch next; each interface words its own hint (the CLI's carries its --home/--db)."""


@dataclass(frozen=True)
class Answer:
    """A person's answer to one decision: the option chosen (`refuse` for none), by whom, why, and when."""

    decision_id: str
    option: int | None
    by: str
    note: str | None
    now: datetime
    refuse: bool = False

    def closing(self, status: str, option: int | None = None) -> Resolution:
        """The decision's row as this answer closes it."""
        return Resolution(self.decision_id, status, self.by, self.note, option)


def open_decision(store: Store, record: OperationRecord) -> StoredDecision | None:
    """The open decision about the operation as it is now (its stop, or its running state, by `stop_marker`):
    an older open one describes a state that is gone, and its options would expire if chosen."""
    marker = stop_marker(record)
    current = [d for d in store.decisions(record.operation_id, open_only=True) if d.request.stop_marker == marker]
    return current[-1] if current else None


def _load(store: Store, decision_id: str) -> StoredDecision:
    stored = store.get_decision(decision_id)
    if stored is None:
        raise DecisionError(f"no decision {decision_id!r}; `pollwarden decisions` lists the open ones")
    if stored.status != "open":
        when = f" at {format_rfc3339(stored.decided_at)}" if stored.decided_at else ""
        who = f" by {stored.decided_by}" if stored.decided_by else ""
        raise DecisionError(f"decision {decision_id} was already {stored.status}{who}{when}; nothing changed")
    return stored


MAX_DECIDER = 100
MAX_NOTE = 500


def person_problem(by: object, note: object = None) -> tuple[str, str] | None:
    """Why `by` cannot name the person deciding, or `note` go with it, as (which, what is wrong); None if both
    may. The one rule for every way a person answers (`decide --by`, the console's form, a graph's resume
    value), applied again by `apply_decision` whoever calls it: the audit log names a person, in plain text."""
    if not isinstance(by, str) or not by.strip():
        return "by", "must name the person deciding"
    for which, text, most in (("by", by, MAX_DECIDER), ("note", note, MAX_NOTE)):
        if text is None:
            continue
        if not isinstance(text, str) or len(text) > most or has_control(text):
            return which, f"must be plain text of at most {most} characters (no control characters)"
    return None


def _claim(store: Store, operation_id: str, contract: Contract, now: datetime) -> changes.Held:
    """The operation's lease for a person's answer. A watcher holds it only while one step runs (a request and
    its record, bounded by the contract's timeout), so the answer waits for that step instead of failing on
    it: an operation polled every few hundred milliseconds would otherwise refuse most answers."""
    ttl = lease_ttl(contract)
    started = time.monotonic()

    def clock() -> datetime:
        return now + timedelta(seconds=time.monotonic() - started)

    try:
        return changes.claim(
            store, operation_id, process_owner("decide"), ttl, clock, changes.Patience.of(Change.ANSWER, ttl)
        )
    except changes.HeldElsewhere:
        raise DecisionError(f"operation {operation_id} is busy in another process; try again in a moment") from None


def apply_decision(store: Store, contract: Contract, answer: Answer, client: StatusClient | None = None) -> Outcome:
    if (problem := person_problem(answer.by, answer.note)) is not None:
        raise DecisionError(f"{problem[0]} {problem[1]}; nothing changed")
    answer = replace(answer, by=answer.by.strip())
    decision_id, by, note, now = answer.decision_id, answer.by, answer.note, answer.now
    stored = _load(store, decision_id)
    request = stored.request
    chosen = None if answer.refuse else request.option(answer.option if answer.option is not None else -1)
    held = _claim(store, request.operation_id, contract, now)
    record = held.record
    with changes.giving_back(held):
        if stop_marker(record) != request.stop_marker:
            expired = Resolution(decision_id, "expired", "pollwarden", "the operation moved on")
            _resolve(held, expired, None, [ev.DecisionExpired.of(request, by=by, note=note)])
            raise DecisionError(
                f"the options of decision {decision_id} expired: operation {request.operation_id} moved on since"
                f" (now {record.phase.value}{', ' + record.reason.value if record.reason else ''}); nothing changed"
            )
        if chosen is None:
            refused = ev.Refused.of(request, by=by, note=note)
            _resolve(held, answer.closing("refused"), None, [refused])
            stays = "stays stopped" if record.phase is Phase.STOPPED else "keeps watching within its limits"
            return Outcome(f"refused decision {decision_id}; operation {request.operation_id} {stays}", "refused")
        event = ev.Decided.chose(request, chosen, by=by, note=note)
        if chosen.kind is OptionKind.INSPECT:
            held.release()
            store.append(request.operation_id, ev.Inspected.chose(request, chosen, by=by, note=note), now)
            return Outcome(f"open {chosen.url} to inspect the job; decision {decision_id} stays open", "open")
        if chosen.kind is OptionKind.CLOSE:
            _resolve(held, answer.closing("decided", chosen.number), None, [event])
            return Outcome(f"closed: operation {request.operation_id} stays stopped as final", "decided")
        if chosen.kind in (OptionKind.EXTEND, OptionKind.PAUSE, OptionKind.RECHECK):
            recheck = chosen.kind is OptionKind.RECHECK
            extended = apply_recheck(record, chosen, now) if recheck else apply_extension(record, chosen, now)
            detail = ev.Extended.after(event, extended, chosen.effect)
            _resolve(held, answer.closing("decided", chosen.number), extended, [event, detail])
            if recheck:
                return _recheck(store, contract, client, request, by)
            return Outcome(
                f"extended operation {request.operation_id}: deadline {format_rfc3339(extended.deadline_at)},"
                f" at most {plural(extended.plan.max_status_requests, 'check')} in all",
                "decided",
                resume=request.operation_id,
            )
        if chosen.kind is OptionKind.KEEP:
            _resolve(held, answer.closing("decided", chosen.number), None, [event])
            return Outcome(f"kept: operation {request.operation_id} keeps watching within its limits", "decided")
        if chosen.kind is OptionKind.CANCEL:
            return _cancel(store, contract, client, held, request, answer.closing("decided", chosen.number), event, now)
        return _resubmit(store, contract, client, held, request, answer.closing("decided", chosen.number), event, now)


def _cancel(
    store: Store,
    contract: Contract,
    client: StatusClient | None,
    held: changes.Held,
    request: DecisionRequest,
    closing: Resolution,
    event: ev.Decided,
    now: datetime,
) -> Outcome:
    """The contract's documented cancel, sent once: the decision is closed first (a second answer is refused
    before anything is sent). An active operation stops in the same write, so no poll follows the cancel; if the
    provider refuses it, the stop says so instead of claiming a cancelled job."""
    if contract.cancel is None or client is None:
        raise DecisionError("the contract documents no cancel action; nothing was sent")
    decision_id, by, record = request.decision_id, closing.by, held.record
    stopped: OperationRecord | None = None
    if record.phase is Phase.ACTIVE:
        stopped = record.stopped(
            StopReason.JOB_CANCELLED, f"cancelled at the provider on decision {decision_id} by {by}", now
        )
    _resolve(held, closing, stopped, [event])
    try:
        result = cancel(contract, client, record)
    except ActionError as exc:
        result = {"action": "cancel", "ok": False, "detail": str(exc)}
    done = ev.ActionEvent.from_json({**result, "decision_id": decision_id, "by": by})
    if stopped is not None and not result.get("ok"):
        failed = stopped.stopped(
            StopReason.INTEGRATION_FAILURE,
            f"the cancel chosen on decision {decision_id} by {by} failed ({result.get('detail') or 'see story'});"
            " the job may still run at the provider, and it is no longer watched",
            now,
        )
        _rewrite(store, contract, failed, [done], now)
    else:
        store.append(request.operation_id, done, now)
    state = "sent" if result.get("ok") else "FAILED (see `story`)"
    watch = "; the watch stopped" if stopped is not None else ""
    return Outcome(f"cancel at provider {state} for job {request.job_id}{watch}", "decided", result)


def _recheck(
    store: Store, contract: Contract, client: StatusClient | None, request: DecisionRequest, by: str
) -> Outcome:
    """The one check a person chose, sent here with the credential configured in this process when there is one
    (`client`): one step of the engine, the same flow as any watch's, so it is reserved, counted, recorded, and a
    refusal stops the operation again with a new decision. Without one, the next watch of the operation sends it."""
    operation_id = request.operation_id

    def left(why: str) -> Outcome:
        said = f"operation {operation_id} is due for one check with the credential configured now; {why}"
        return Outcome(said, "decided", {"action": "recheck", "ok": True, "sent": False}, resume=operation_id)

    if client is None:
        return left("no credential can be read here, so the next watch of the operation sends it")
    from ..engine import Busy, Engine, NotYet, Polled

    result = Engine(store, owner=process_owner("decide")).step(contract, client, operation_id)
    if isinstance(result, NotYet | Busy):  # a watcher came first: it sends the check (or has sent it)
        return left("another watcher holds it and sends it")
    polled = isinstance(result, Polled)
    record = result.decision.record if isinstance(result, Polled) else result.record
    action: dict[str, Any] = {
        "action": "recheck",
        "ok": record.phase is not Phase.STOPPED,
        "sent": polled,
        "http_status": record.last_http_status if polled else None,
        "phase": record.phase.value,
        "reason": record.reason.value if record.reason else None,
        "by": by,
    }
    answered = f"HTTP {record.last_http_status}" if record.last_http_status is not None else "no answer"
    said = f"checked once with the credential configured now ({answered})" if polled else "nothing was sent"
    if record.phase is Phase.SUCCEEDED:
        return Outcome(f"{said}: operation {operation_id} succeeded", "decided", action)
    if record.phase is Phase.ACTIVE:
        state = f", job {record.last_state}" if record.last_state else ""
        return Outcome(f"{said}{state}: operation {operation_id} watches on", "decided", action, resume=operation_id)
    reason = record.reason.value if record.reason else "stopped"
    opened = open_decision(store, record)
    asks = f"; decision {opened.request.decision_id} asks what next" if opened is not None else ""
    return Outcome(f"{said}: operation {operation_id} stopped again ({reason}){asks}", "decided", action)


def _rewrite(
    store: Store, contract: Contract, record: OperationRecord, events: list[ev.NewEvent], now: datetime
) -> None:
    """Replace a stop just written with what is now known, under a new lease; the events go in either way."""
    owner, ttl = process_owner("decide"), lease_ttl(contract)
    try:
        with changes.holding(store, record.operation_id, owner, ttl, lambda: now) as held:
            held.write(record, events)
            return
    except changes.ChangeRefused:
        pass
    for event in events:
        store.append(record.operation_id, event, now)


def _resubmit(
    store: Store,
    contract: Contract,
    client: StatusClient | None,
    held: changes.Held,
    request: DecisionRequest,
    closing: Resolution,
    event: ev.Decided,
    now: datetime,
) -> Outcome:
    """A new job from the stored submission, only where the provider dedups by token (R34)."""
    operation_id = request.operation_id
    submission = store.get_submission(operation_id)
    if submission is None or contract.submit is None or not contract.submit.idempotency_header or client is None:
        raise DecisionError(
            "resubmission is refused: it needs a stored submission and a provider that declares idempotency"
            " ([submit].idempotency_header); nothing was sent"
        )
    listing = store.listing()  # an unreadable row's id is taken too
    taken = {s.record.operation_id for s in listing.operations} | {u.operation_id for u in listing.unreadable}
    new_id = next(f"{operation_id}.r{n}" for n in range(1, 1000) if f"{operation_id}.r{n}" not in taken)
    _resolve(held, closing, None, [event])
    try:
        submitted = submit(store, contract, client, operation_id=new_id, body=submission.body, now=now)
    except ActionError as exc:
        store.append(operation_id, ev.ActionEvent(action="resubmit", ok=False, detail=str(exc)), now)
        raise DecisionError(f"the resubmission failed: {exc}") from None
    result = {
        "action": "resubmit",
        "ok": True,
        "new_operation": new_id,
        "job": submitted.record.job_id,
        "by": closing.by,
    }
    store.append(operation_id, ev.ActionEvent.from_json(result), now)
    return Outcome(
        f"resubmitted as operation {new_id} (job {submitted.record.job_id})",
        "decided",
        result,
        resume=new_id,
    )


def _resolve(
    held: changes.Held, closing: Resolution, record: OperationRecord | None, events: list[ev.NewEvent]
) -> None:
    """The answer written through the operation's `Held` (engine/changes), in a person's words when refused."""
    try:
        held.resolve(closing, record, events)
    except DecisionTaken as exc:
        raise DecisionError(f"{exc}; nothing changed") from None
    except changes.TakenOver:
        raise DecisionError("the operation was taken over by another process while deciding; nothing changed") from None
