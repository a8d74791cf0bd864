"""`request_cancel`: an agent asks a person to cancel a job; the agent itself never cancels anything.

The request is a decision (core/escalation.py `CANCEL_REQUEST`): on a running operation a person chooses between
cancelling at the provider (the watch stops) and keeping watching, and the operation keeps polling within its
limits until then; on a stopped one the request goes to the stop's own open decision when that offers a cancel.
Only `pollwarden decide` or the console answers it, through `decisions.apply_decision`, which sends the
contract's documented cancel once. `tasks/cancel` (tasks.py) calls the same function.
"""

from __future__ import annotations

from typing import Any

from .. import events as ev
from ..actions.decisions import open_decision
from ..core.escalation import DecisionError, DecisionRequest, OptionKind, build_cancel_request
from ..core.lease import lease_ttl
from ..core.record import OperationRecord
from ..core.transitions import Change, allowed
from ..engine import changes, new_decision_id
from ..store.base import Store
from ..store.owner import process_owner
from .base import MAX_REASON_CHARS, CallContext, ToolFailure, busy, clean_text, recorded_after
from .session import Session
from .views import decision_view


def tool_request_cancel(broker: Session, call: CallContext, operation_id: str, reason: str) -> dict[str, Any]:
    why = clean_text(str(reason), MAX_REASON_CHARS)
    if not why:
        raise ToolFailure("invalid_argument", "reason must say why the job should be cancelled, for the person")
    return request_cancel(broker, operation_id, why)


def request_cancel(broker: Session, operation_id: str, why: str) -> dict[str, Any]:
    """The one path for an agent's cancel request (the tool and `tasks/cancel`): an open decision, new or
    existing, with the request audited in the operation's log and the session's."""
    with broker.store() as store:
        contract, record = broker.operation(store, operation_id)
        _cancellable(broker, record, store)
        owner, ttl = process_owner("mcp"), lease_ttl(contract)
        patience = changes.Patience.of(Change.REQUEST_CANCEL, ttl, broker.stopping)
        try:
            with changes.holding(store, operation_id, owner, ttl, broker.clock, patience) as held:
                current = held.record
                opened = open_decision(store, current)
                if opened is not None and _asked_by(store, opened.request, broker.requester):
                    held.release()
                    return _answer(store, opened.request, already=True)
                new: DecisionRequest | None = None
                if opened is not None:
                    if not any(o.kind is OptionKind.CANCEL for o in opened.request.options):
                        raise ToolFailure(
                            "not_cancellable",
                            f"the open decision {opened.request.decision_id} of operation {operation_id} offers no"
                            f" cancel ({_why(current)}); a person decides it. Nothing was requested",
                        )
                    request = opened.request
                else:
                    try:
                        request = new = build_cancel_request(
                            current,
                            contract,
                            broker.clock(),
                            decision_id=new_decision_id(),
                            reason=why,
                            requested_by=broker.requester,
                        )
                    except DecisionError as exc:
                        raise ToolFailure("not_cancellable", f"{exc}. Nothing was requested") from None
                # The operation's id is in the event itself: the session's copy names the operation from it.
                event = ev.CancelRequested(
                    operation=operation_id,
                    decision_id=request.decision_id,
                    reason=why,
                    requested_by=broker.requester,
                    added=new is None,
                )
                now = broker.clock()
                held.write(current, [event], decision=new)
        except changes.ChangeRefused as exc:
            raise busy(exc) from None
        recorded_after(store, broker.log_id, event, now, f"cancel request {request.decision_id}")
        return _answer(store, request, already=False)


def _cancellable(broker: Session, record: OperationRecord, store: Store) -> None:
    """Refusals that need no lease: a contract without a documented cancel, a job that is over."""
    contract = broker.contracts[record.contract_name]
    if contract.cancel is None:
        raise ToolFailure(
            "not_cancellable",
            f"contract {contract.name!r} documents no cancel action ([cancel]), so nothing can be cancelled there"
            " through pollwarden; the watch ends by itself at its deadline or budget. Nothing was requested",
        )
    if not allowed(Change.REQUEST_CANCEL, record.phase):
        raise ToolFailure("not_cancellable", f"operation {record.operation_id} succeeded; there is nothing to cancel")
    if record.reason is not None and record.reason.job_ended:
        raise ToolFailure(
            "not_cancellable",
            f"the provider already ended job {record.job_id} ({record.reason.value}); there is nothing to cancel",
        )


def _asked_by(store: Store, request: DecisionRequest, requester: str) -> bool:
    if request.requested_by == requester:
        return True
    return any(
        e.kind == "cancel_requested" and e.data.get("decision_id") == request.decision_id
        for e in store.events(request.operation_id)
    )


def _why(record: OperationRecord) -> str:
    return f"stopped for {record.reason.value}" if record.reason else record.phase.value


def cancel_requests(store: Store, request: DecisionRequest) -> list[dict[str, Any]]:
    """The agents' cancel requests on a decision, as the operation's log holds them."""
    return [
        {k: e.data.get(k) for k in ("reason", "requested_by")}
        for e in store.events(request.operation_id)
        if e.kind == "cancel_requested" and e.data.get("decision_id") == request.decision_id
    ]


def _answer(store: Store, request: DecisionRequest, *, already: bool) -> dict[str, Any]:
    return {
        "status": "requested",
        "already_requested": already,
        "decision": {**decision_view(request), "cancel_requests": cancel_requests(store, request)},
        "message": (
            f"decision {request.decision_id} is waiting for a person (pollwarden decisions / decide, or the"
            " console); nothing was cancelled and you cannot cancel it yourself. The operation keeps its limits;"
            " get_decision(operation_id) shows what they chose"
            + ("; you had already asked, so nothing changed" if already else "")
        ),
    }
