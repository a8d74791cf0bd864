"""The agent tools as plain functions over the `Session` (submit_job in `submit`): each validates, then acts."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

from .. import events as ev
from ..actions.decisions import open_decision
from ..actions.provider import ActionError, ActionRefused, NoResult, fetch_result, result_source
from ..core.admission import Limits, Refusal, Refuse, WatchRequest
from ..core.contract.parse import Contract
from ..core.durations import DurationError, format_duration, format_rfc3339, parse_duration
from ..core.escalation import DecisionError, DecisionRequest, OptionKind, build_request, stop_marker
from ..core.identity import canonical_job
from ..core.lease import lease_ttl
from ..core.record import OperationRecord
from ..core.result_part import result_part
from ..core.transitions import Change, allowed
from ..core.words import checks_of, plural
from ..engine import changes, new_decision_id
from ..engine.preamble import Credentials, Refused, admit, ready
from ..report.progress import Progress, progress_of_record
from ..store.base import Store, StoredDecision
from ..store.bell import Listener, listening, pause
from ..store.owner import process_owner
from .base import (
    ANSWER_MARGIN_SECONDS,
    MAX_EXTENSION_CHECKS,
    MAX_EXTENSION_MINUTES,
    MAX_REASON_CHARS,
    MAX_WAIT_SECONDS,
    RESULT_TEXT_CAP,
    UNREADABLE_TO_AGENT,
    CallContext,
    ToolFailure,
    busy,
    clean_text,
    recorded_after,
)
from .cancel import tool_request_cancel
from .gates import gated_call
from .session import Session
from .views import decision_view, final, seconds_until

Tool = Callable[..., dict[str, Any]]
"""`tool(broker, call, **arguments)`: a JSON-able reply, or a `ToolFailure`."""


def agent_limits(deadline: object, max_requests: object) -> Limits:
    """What an agent asks of a new watch (start_watch, submit_job), checked as arguments; admission checks them
    against the contract's [agent] caps."""
    if max_requests is not None and (isinstance(max_requests, bool) or not isinstance(max_requests, int)):
        raise ToolFailure("invalid_argument", "max_requests must be a whole number of at least 1")
    return Limits(deadline=agent_deadline(deadline), max_requests=max_requests)


def agent_deadline(deadline: object, name: str = "deadline") -> timedelta | None:
    """An agent's deadline (or another duration argument, `name`): a bare number is seconds, a string is a
    duration ("20m")."""
    if deadline is None:
        return None
    try:
        if isinstance(deadline, int | float) and not isinstance(deadline, bool):
            return timedelta(seconds=deadline)
        if isinstance(deadline, str):
            return parse_duration(deadline)
    except DurationError as exc:
        raise ToolFailure("invalid_argument", f"{name}: {exc}. Nothing was created") from None
    except (OverflowError, ValueError):  # inf, nan, or beyond what a time span holds
        raise ToolFailure(
            "invalid_argument",
            f'{name} must be a finite number of seconds or a duration such as "20m". Nothing was created',
        ) from None
    raise ToolFailure("invalid_argument", f'{name} must be a number of seconds or a duration such as "20m"')


AGENT_CAPS = {
    "deadline": "[agent].max_deadline",
    "max_requests": "[agent].max_requests",
    "max_operations": "[agent].max_operations",
}
REFUSALS = {Refusal.INVALID: "invalid_argument", Refusal.LIMIT: "limit_exceeded", Refusal.CONFLICT: "conflict"}


def tool_start_watch(
    broker: Session,
    call: CallContext,
    contract: str,
    job_id: str | None = None,
    deadline: str | float | None = None,
    max_requests: int | None = None,
    status_url: str | None = None,
    lag_target: str | float | None = None,
) -> dict[str, Any]:
    """Admission through the engine, as for every interface: the agent's caps bound what it asks, and the same job
    asked again gets its existing operation back (with what is left of its budget), never a fresh one."""
    served = broker.contract(contract)
    broker.ready(served)
    if status_url is not None and not isinstance(status_url, str):
        raise ToolFailure("invalid_argument", "status_url must be a string URL")
    if job_id is None and status_url is None:
        raise ToolFailure("invalid_argument", "give job_id, or the status_url the provider returned")
    limits = replace(agent_limits(deadline, max_requests), lag_target=agent_deadline(lag_target, "lag_target"))
    with broker.creating(served) as creation:
        request = WatchRequest(
            served,
            job_id,
            limits=limits,
            by=broker.requester,
            agent=True,
            status_location=status_url,
            created_before=creation.before,
            credential=broker.scrubber,  # every credential this server keeps: none is a job id or in a status URL
        )
        try:  # the preamble every interface runs: checked before the store is opened, then admitted
            prepared = ready(request, Credentials.GIVEN)
            with broker.store() as store:
                admitted = admit(prepared, broker.engine(store))
                creation.made = admitted.created
                record = admitted.record
                now = broker.clock()
                announce(broker, store, served, record, created=admitted.created)
                if record.is_final:
                    return {**final(store, record, now), "operation_id": record.operation_id, "reused": True}
        except Refused as exc:
            raise refused(exc) from None
    return watch_reply(served, record, now, created=admitted.created)


def refused(refusal: Refuse | Refused) -> ToolFailure:
    """A refusal in an agent's words: which cap was hit, and how much it may ask for instead; a contract that may
    not be watched is not ready (the server's configuration, a person's to fix)."""
    if isinstance(refusal, Refused):
        if refusal.refusal is None:
            return ToolFailure("not_ready", f"{refusal}. Nothing was sent")
        refusal = refusal.refusal
    capped = [p for p in refusal.problems if p.allowed is not None]
    extra: dict[str, Any] = {}
    if capped:
        extra = {"limit": AGENT_CAPS.get(capped[0].field or "", ""), "allowed": capped[0].allowed}
    words = refusal.message_for({"status_location": "status_url"})
    return ToolFailure(REFUSALS[refusal.kind], f"{words}. Nothing was created", **extra)


def announce(broker: Session, store: Store, served: Contract, record: OperationRecord, *, created: bool) -> None:
    """The session's record that it watches (or watches again) an operation."""
    kind = ev.WatchStarted if created else ev.WatchRejoined
    started = kind(operation=record.operation_id, contract=served.name, job=record.job_id, extra=record.summary())
    broker.audit(store, started)


def watch_reply(served: Contract, record: OperationRecord, now: datetime, *, created: bool) -> dict[str, Any]:
    """What start_watch (and submit_job, for the job it submitted) answers about an active operation."""
    reused = "" if created else (
        f"job {record.job_id} was already watched by this operation: it keeps its budget"
        f" ({checks_of(record.status_requests_used, record.plan.max_status_requests)} used). "
    )  # fmt: skip
    return {
        "status": "watching",
        "operation_id": record.operation_id,
        "reused": not created,
        "contract": served.name,
        "job_id": record.job_id,
        "deadline_at": format_rfc3339(record.deadline_at),
        "max_status_requests": record.plan.max_status_requests,
        "status_requests_used": record.status_requests_used,
        "next_check_at": format_rfc3339(record.due_at),
        # Who placed that check, as `status --json` says it: `learnt` when the contract's history did.
        "delay_source": record.delay_source.value,
        "retry_after_seconds": seconds_until(record.due_at, now),
        "approval": served.approval,
        "message": (
            f"{reused}watching job {record.job_id}: at most {plural(record.plan.max_status_requests, 'check')} until"
            f" {format_rfc3339(record.deadline_at)}. Call wait_operation(operation_id, max_wait_seconds) to wait"
            " here without a loop, or check_operation(operation_id) when retry_after_seconds has passed"
        ),
    }


def tool_start_own_watch(
    broker: Session, call: CallContext, contract: str, job_id: str | None = None, **limits: Any
) -> dict[str, Any]:
    """start_watch behind the ownership rule: a job a person's operation watches is refused before admission,
    which would otherwise rejoin (or narrow) that operation for the agent."""
    served = broker.contracts.get(contract) if isinstance(contract, str) else None
    # The job in the spelling admission looks it up by (a status URL is the job id by default).
    job = canonical_job(served, job_id, limits.get("status_url")).job_id if served is not None else None
    if served is not None and isinstance(job, str):
        with broker.store() as store:
            broker.refuse_a_persons_job(store, served, job)
    return tool_start_watch(broker, call, contract, job_id, **limits)


def tool_check_operation(broker: Session, call: CallContext, operation_id: str) -> dict[str, Any]:
    with broker.store() as store:
        return broker.advance(store, operation_id, call)


NO_PROGRESS_CAP = (
    "this call carried no progress token (_meta.progressToken), and agent hosts cut off a tool call that reports"
    " nothing after about 60 s"
)


def tool_wait_operation(
    broker: Session, call: CallContext, operation_id: str, max_wait_seconds: float
) -> dict[str, Any]:
    if isinstance(max_wait_seconds, bool) or not isinstance(max_wait_seconds, int | float) or max_wait_seconds < 0:
        raise ToolFailure("invalid_argument", "max_wait_seconds must be a number of seconds, 0 or more")
    # A caller that gets progress notifications may wait the full cap; a silent one answers before its host
    # gives up on it, with when to call again.
    top = float(MAX_WAIT_SECONDS) if call.progress is not None else broker.wait_without_progress
    capped = min(float(max_wait_seconds), top)
    started = time.monotonic()
    ends = started + capped
    if call.progress is None:
        # What it starts (a poll, an approval) must end before the host gives up, however short the wait asked:
        # the bound is the host's, so a short wait may still make its one poll.
        call = replace(call, answer_by=started + broker.wait_without_progress + ANSWER_MARGIN_SECONDS)
    # The store's bell ends a pause at once when a provider's push made the operation due (any process).
    with broker.store() as store, listening(store.bell, True) as bell:
        polled = False
        while True:
            try:
                reply, progress = broker.step(store, operation_id, call, after_poll=polled)
            except ToolFailure as failure:
                if failure.code != "approval_pending":
                    raise
                # The cap came first: the person's answer is still awaited, on the same grant next call.
                _, record = broker.operation(store, operation_id)
                reply, progress = {**failure.to_json(), "waiting_for": "approval"}, progress_of_record(record)
                reply = _wait_ended(reply, progress, capped, broker.clock(), approval=failure.message)
                break
            if reply["status"] in ("succeeded", "stopped"):
                break
            remaining = ends - time.monotonic()
            polled = reply["status"] == "polled"
            if polled and remaining > 0:
                continue  # the next step will say how long until the next poll
            if remaining <= 0 or reply.get("deferred") or call.cancelled.is_set() or broker.stopping.is_set():
                reply = _wait_ended(reply, progress, capped, broker.clock())
                break
            # No lease is held here: the engine released it after its step (R38).
            pause = min(float(reply.get("retry_after_seconds") or 0.05), remaining)
            # A cut call (tasks/cancel, a host's cancellation) stops waiting at once, before any further poll.
            if _pause(call.cancelled, bell, max(0.01, pause)) or broker.stopping.is_set():
                reply = _wait_ended(reply, progress, capped, broker.clock())
                break
    reply["waited_seconds"] = round(time.monotonic() - started, 3)
    if capped < max_wait_seconds:
        reply["max_wait_seconds_capped_to"] = capped
        reply["capped_because"] = (
            f"at most {MAX_WAIT_SECONDS} s per call" if call.progress is not None else NO_PROGRESS_CAP
        )
    return reply


def _pause(cancelled: threading.Event, bell: Listener | None, seconds: float) -> bool:
    """Wait `seconds`, ended early by a ring of the store's bell; True when the call was cancelled meanwhile."""
    if bell is None:
        return cancelled.wait(seconds)
    pause(bell, seconds, cancelled)
    return cancelled.is_set()


def _wait_ended(
    reply: dict[str, Any], progress: Progress, waited: float, now: datetime, *, approval: str | None = None
) -> dict[str, Any]:
    """The answer of a wait that ran out of time: when the next check is due, and that asking sooner is free."""
    due = progress.seconds_to_next_check(now)
    when = "now" if not due else f"in {due:g} s"
    if approval is not None:
        message = f"still waiting after {waited:g} s: {approval}"
    else:
        message = (
            f"still waiting after {waited:g} s ({progress.message(now)}). The next status check is due {when};"
            " calling wait_operation again sends no provider request before then, so call it again now to keep"
            " waiting (the operation keeps its deadline and budget)"
        )
    return {
        **reply,
        "status": "not_yet",
        "wait_ended": True,
        "retry_after_seconds": due,
        "next_check_at": None if progress.next_check_at is None else format_rfc3339(progress.next_check_at),
        "progress": progress.to_json(now),
        "message": message,
    }


def tool_get_decision(broker: Session, call: CallContext, operation_id: str) -> dict[str, Any]:
    with broker.store() as store:
        _, record = broker.operation(store, operation_id)
        rows = store.decisions(operation_id)
        open_rows = [d for d in rows if d.status == "open"]
        shown = _with_agent_requests(store, open_rows[-1].request) if open_rows else None
    return {
        "operation_id": operation_id,
        "phase": record.phase.value,
        "reason": record.reason.value if record.reason else None,
        "decision": shown,
        "history": [
            {
                "decision_id": d.request.decision_id,
                "status": d.status,
                "decided_by": d.decided_by,
                "option": d.option,
                "requested_by": d.request.requested_by,
            }
            for d in rows
        ],
        "message": (
            "a person decides with `pollwarden decide` or the console; an agent cannot"
            if open_rows
            else "no open decision for this operation"
        ),
    }


def tool_request_extension(
    broker: Session, call: CallContext, operation_id: str, minutes: int, checks: int, reason: str
) -> dict[str, Any]:
    for name, value, top in (("minutes", minutes, MAX_EXTENSION_MINUTES), ("checks", checks, MAX_EXTENSION_CHECKS)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise ToolFailure("invalid_argument", f"{name} must be a whole number from 1 to {top}")
    why = clean_text(str(reason), MAX_REASON_CHARS)
    if not why:
        raise ToolFailure("invalid_argument", "reason must say why more waiting is worth it (R43)")
    asked = {"minutes": minutes, "checks": checks, "reason": why, "requested_by": broker.requester}
    with broker.store() as store:
        contract, record = broker.operation(store, operation_id)
        if not allowed(Change.REQUEST_EXTENSION, record.phase):
            raise ToolFailure(
                "not_stopped",
                f"operation {operation_id} is {record.phase.value}; more authority is asked for after a stop"
                " (the operation keeps its approved deadline and budget until then)",
            )
        marker = stop_marker(record)
        already = _already_asked(store, operation_id, marker)
        if already is not None:
            return already
        now = broker.clock()
        try:
            ttl = lease_ttl(contract)
            patience = changes.Patience.of(Change.REQUEST_EXTENSION, ttl)
            with changes.holding(store, operation_id, process_owner("mcp"), ttl, broker.clock, patience) as held:
                current = held.record
                if stop_marker(current) != marker:
                    raise ToolFailure("busy", f"operation {operation_id} moved on a moment ago; look at it again")
                # Checked again under the lease: two requests racing for one stop must not both be added.
                already = _already_asked(store, operation_id, marker)
                if already is not None:
                    held.release()
                    return already
                request, new = _extension_request(store, contract, current, marker, now, (minutes, checks, why, broker))
                # The operation's id is in the event itself: the story names the operation from it.
                event = ev.ExtensionRequested.prepared(
                    {"operation": operation_id, "decision_id": request.decision_id, **asked, "added": new is None}
                )
                held.write(current, [event], decision=new)
        except changes.ChangeRefused as exc:
            raise busy(exc) from None
        # The request and its audit event are committed in the operation's log; this is the session's copy.
        recorded_after(store, broker.log_id, event, now, f"extension request {request.decision_id}")
        shown = _with_agent_requests(store, request)
    return {
        "status": "requested",
        "attached": new is None,
        "decision": shown,
        "message": (
            f"decision {request.decision_id} is waiting for a person (pollwarden decisions / decide, or the"
            " console); your request is attached to it and you cannot grant it. get_decision(operation_id) shows"
            " what they chose"
        ),
    }


def _extension_request(
    store: Store,
    contract: Contract,
    current: OperationRecord,
    marker: str,
    now: datetime,
    asked: tuple[int, int, str, Session],
) -> tuple[DecisionRequest, DecisionRequest | None]:
    """The decision an agent's request for more goes to: this stop's open one, or a new one (then returned
    twice: it is written with the request, and its webhook queued with it, as every decision request's is)."""
    minutes, checks, why, broker = asked
    operation_id = current.operation_id
    opened = _open_decision(store, operation_id, marker)
    new: DecisionRequest | None
    if opened is not None:
        request, new = opened.request, None
    else:
        try:
            request = new = build_request(
                current,
                contract,
                now,
                decision_id=new_decision_id(),
                requested=(timedelta(minutes=minutes), checks, why, broker.requester),
            )
        except DecisionError as exc:
            raise ToolFailure("not_stopped", str(exc)) from None
    if not any(o.kind in (OptionKind.EXTEND, OptionKind.PAUSE) for o in request.options):
        reason_value = current.reason.value if current.reason else "?"
        # The stop's own options (an agent's request would have left only close among them).
        own = build_request(current, contract, now, decision_id=request.decision_id).options
        choices = " or ".join(repr(o.label) for o in own)
        raise ToolFailure(
            "not_extendable",
            f"a stop for {reason_value} does not allow more waiting (R30); a person may choose {choices}."
            " Nothing was requested",
        )
    return request, new


def _open_decision(store: Store, operation_id: str, marker: str) -> StoredDecision | None:
    """The open decision of this very stop, if there is one: an agent's request is added to it."""
    stored = store.get(operation_id)
    if stored is None or stop_marker(stored.record) != marker:
        return None
    return open_decision(store, stored.record)


def _agent_requests(store: Store, request: DecisionRequest) -> list[dict[str, Any]]:
    """The agents' requests for more, each audited in the operation's log against the decision it went to."""
    return [
        {k: e.data.get(k) for k in ("minutes", "checks", "reason", "requested_by")}
        for e in store.events(request.operation_id)
        if e.kind == "extension_requested" and e.data.get("decision_id") == request.decision_id
    ]


def _with_agent_requests(store: Store, request: DecisionRequest) -> dict[str, Any]:
    return {**decision_view(request), "agent_requests": _agent_requests(store, request)}


def _already_asked(store: Store, operation_id: str, marker: str) -> dict[str, Any] | None:
    """One agent request per open decision: asking again says so and changes nothing."""
    opened = _open_decision(store, operation_id, marker)
    if opened is None:
        return None
    shown = _with_agent_requests(store, opened.request)
    if not opened.request.requested_by and not shown["agent_requests"]:
        return None
    return {
        "status": "requested",
        "already_requested": True,
        "decision": shown,
        "message": f"decision {opened.request.decision_id} for this stop already has an agent's request; a person"
        " decides it, you cannot. Nothing was changed",
    }


def tool_fetch_result(broker: Session, call: CallContext, operation_id: str) -> dict[str, Any]:
    with broker.store() as store:
        contract, record = broker.operation(store, operation_id)
        try:  # a result that must not be fetched (none yet, another host, ...) is refused before a person is asked
            result_source(contract, record)
        except NoResult as exc:
            raise ToolFailure("no_result", f"{exc}. Nothing was sent") from None
        except ActionRefused as exc:
            _fetch_failed(broker, store, operation_id, exc)

        def send() -> tuple[dict[str, Any], dict[str, Any]]:
            with tempfile.TemporaryDirectory(prefix="pollwarden-result-") as scratch:
                out = Path(scratch) / "result"
                with broker.client(contract) as client:
                    try:
                        info = fetch_result(contract, client, record, out)
                    except ActionError as exc:
                        _fetch_failed(broker, store, operation_id, exc)
                with out.open("rb") as written:  # a result file may be a GiB: the agent sees the head only
                    body = written.read(RESULT_TEXT_CAP * 4 + 4)
            info.pop("out", None)
            store.append(operation_id, ev.ActionEvent.prepared({**info, "by": broker.requester}), broker.clock())
            summary = {"outcome": "sent", "bytes": info["bytes"], "sha256": info["sha256"]}
            return {**info, "body": body}, summary

        fetched = gated_call(broker, store, contract, record, "fetch_result", call, send)
    body: bytes = fetched.pop("body")
    text = body.decode("utf-8", errors="replace")
    size: int = fetched["bytes"]
    return {
        "status": "fetched",
        "operation_id": operation_id,
        "bytes": size,
        "sha256": fetched["sha256"],  # of the whole file, as written
        "content_type": fetched.get("content_type"),
        "text": text[:RESULT_TEXT_CAP],
        "truncated": len(text) > RESULT_TEXT_CAP or len(body) < size,
        "url": fetched.get("url"),
        **result_part(record),
    }


def _fetch_failed(broker: Session, store: Store, operation_id: str, exc: ActionError) -> NoReturn:
    """A fetch that did not happen, or did not succeed: audited on the operation, and the agent told why."""
    detail = {"action": "fetch_result", "ok": False, "detail": str(exc), "by": broker.requester}
    store.append(operation_id, ev.ActionEvent.prepared(detail), broker.clock())
    raise ToolFailure("fetch_failed", str(exc)) from None


def tool_list_operations(broker: Session, call: CallContext) -> dict[str, Any]:
    now = broker.clock()
    with broker.store() as store:
        listing = store.listing()
        rows = [
            s.record
            for s in listing.operations
            if s.record.contract_name in broker.contracts and broker.agent_made(store, s.record.operation_id)
        ]
        # Named, never described: what the row holds instead of a record is nobody's text to hand an agent.
        unreadable = [
            u.operation_id
            for u in listing.unreadable
            if u.contract_name in broker.contracts and broker.agent_made(store, u.operation_id)
        ]
    return {
        "session": broker.session_id,
        "isolation": broker.isolation,
        "contracts": {
            name: {
                "approval": c.approval,
                "ready": name not in broker.not_ready,
                "max_deadline": format_duration(c.agent_max_deadline),
                "max_requests": c.agent_max_requests,
            }
            for name, c in sorted(broker.contracts.items())
        },
        # A file the server could not load is not served; saying so (and why) spares the agent a guess at a name
        # that will never be served, and tells it what to pass on to the person who keeps the directory.
        "contracts_not_served": [
            {"problem": problem, "fix": "a person must correct the file and restart `pollwarden mcp`"}
            for problem in broker.problems
        ],
        "operations": [
            {
                "operation_id": r.operation_id,
                "contract": r.contract_name,
                "job_id": r.job_id,
                "phase": r.phase.value,
                "reason": r.reason.value if r.reason else None,
                "last_state": r.last_state,
                "status_requests_used": r.status_requests_used,
                "max_status_requests": r.plan.max_status_requests,
                "deadline_at": format_rfc3339(r.deadline_at),
                "next_check_at": None if r.is_final else format_rfc3339(r.due_at),
            }
            for r in rows
        ]
        + [{"operation_id": op, "phase": "unreadable", "problem": UNREADABLE_TO_AGENT} for op in unreadable],
        "now": format_rfc3339(now),
    }


TOOLS: dict[str, Tool] = {
    "start_watch": tool_start_own_watch,
    "check_operation": tool_check_operation,
    "wait_operation": tool_wait_operation,
    "get_decision": tool_get_decision,
    "request_extension": tool_request_extension,
    "request_cancel": tool_request_cancel,
    "fetch_result": tool_fetch_result,
    "list_operations": tool_list_operations,
}
