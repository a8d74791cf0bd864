"""`pollwarden mcp`: an agent waits on external jobs through tools, never through a loop or a credential.

The server is the credential broker of R47: contracts in `--contracts DIR` bind each secret to its status URL
origin, the agent names a contract only by its `name`, and the server makes every provider call itself, through
the same `Watcher` step as `pollwarden watch` (same core, same store, same audit). No tool argument can choose a
host, a path outside the status template, a header or a credential.

Every provider call passes one fixed sequence (`Broker._gated_call`):

    configuration ready -> per-call gate -> session gate -> durable "intent" record -> call -> result record

A per-call gate waits (bounded by `[agent].approval_timeout`) for `pollwarden approve-call`; a session gate needs
one `pollwarden approve-session` per agent session and contract, revocable. A missing answer is a distinct
`approval_timeout`, never a silent yes. Every reply and error passes through one `Scrubber`.

The `Broker` is plain synchronous code (tested directly and driven by the MCP tools on worker threads); the MCP
layer at the bottom only adapts it to the SDK's `MCPServer`.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import secrets
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypeVar
from urllib.parse import quote

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from . import __version__
from .actions import ActionError, fetch_result
from .core.contract import Contract, ContractError, load_contract
from .core.decide import Finished, Halt, Poll, Wait, next_step
from .core.durations import DurationError, format_duration, format_rfc3339, parse_duration
from .core.escalation import DecisionError, DecisionRequest, OptionKind, build_request, stop_marker
from .core.reasons import Phase
from .core.record import OPERATION_ID, OperationRecord, new_record
from .http import CredentialError, StatusClient, resolve_secret
from .notify import deliver
from .operating import HomeError, open_store
from .store.base import Grant, OperationExists, Store, agent_log_id
from .store.owner import process_owner
from .watch import Busy, Done, NotYet, Polled, StepResult, Watcher, new_decision_id, utcnow

log = logging.getLogger("pollwarden.mcp")

MAX_WAIT_SECONDS = 300
"""The hard cap of one `wait_operation`: long enough to save an agent many turns, short enough for any client."""

RESULT_TEXT_CAP = 64 * 1024
"""Characters of a fetched result returned to the agent; the sha256 and byte count cover the whole body."""

APPROVAL_POLL_SECONDS = 0.2
MAX_EXTENSION_MINUTES = 24 * 60
MAX_EXTENSION_CHECKS = 1000
MAX_REASON_CHARS = 500
MAX_JOB_ID_CHARS = 512

T = TypeVar("T")


class ToolFailure(Exception):
    """A reply the agent gets as an error: a machine code, a sentence, and what to do next."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra

    def to_json(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.extra}


# -- secrets never leave ----------------------------------------------------------------------------


class Scrubber:
    """Removes every configured secret value (and its common encodings) from text and JSON-able values.

    Defence in depth: secrets never reach a reply by design; this is the net under that design.
    """

    MARK = "[secret]"

    def __init__(self, values: Iterable[str]) -> None:
        variants: set[str] = set()
        for value in values:
            if not value:
                continue
            variants.add(value)
            variants.add(quote(value, safe=""))
            variants.add(json.dumps(value)[1:-1])
            variants.add(base64.b64encode(value.encode()).decode().rstrip("="))
            variants.add(base64.urlsafe_b64encode(value.encode()).decode().rstrip("="))
        # Longest first, so a secret that contains another is removed whole.
        self._variants = sorted((v for v in variants if v), key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._variants)

    def text(self, text: str) -> str:
        for variant in self._variants:
            if variant in text:
                text = text.replace(variant, self.MARK)
        return text

    def found_in(self, text: str) -> bool:
        return any(variant in text for variant in self._variants)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


class ScrubLogs(logging.Filter):
    """Every log line the server writes to stderr goes through the scrubber, tracebacks included."""

    def __init__(self, scrubber: Scrubber) -> None:
        super().__init__()
        self.scrubber = scrubber

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string must not break logging
            message = str(record.msg)
        record.msg = self.scrubber.text(message)
        record.args = None
        if record.exc_info:
            record.exc_text = self.scrubber.text(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def secret_values(contracts: Iterable[Contract], environ: Mapping[str, str]) -> list[str]:
    names: set[str] = set()
    for contract in contracts:
        if contract.auth is not None:
            names.add(contract.auth.secret_env)
        if contract.escalation.webhook_secret_env:
            names.add(contract.escalation.webhook_secret_env)
    return [environ[name] for name in sorted(names) if environ.get(name)]


# -- contracts ----------------------------------------------------------------------------------------


def load_contracts(directory: Path) -> tuple[dict[str, Contract], list[str]]:
    """Contracts by name from DIR/*.toml; unusable files and ambiguous names are reported, not served."""
    found: dict[str, Contract] = {}
    problems: list[str] = []
    ambiguous: set[str] = set()
    for path in sorted(directory.glob("*.toml")):
        try:
            contract = load_contract(path)
        except ContractError as exc:
            problems.append(str(exc))
            continue
        if contract.name in found:
            ambiguous.add(contract.name)
            problems.append(f"{path}: contract name {contract.name!r} is used by two files; neither is served")
            continue
        found[contract.name] = contract
    for name in ambiguous:
        found.pop(name, None)
    return found, problems


def _operation_prefix(name: str) -> str:
    prefix = re.sub(r"[^A-Za-z0-9._:-]", "-", name)[:40].strip("-.:_")
    return prefix if prefix and prefix[0].isalnum() else "op"


def _clean_text(text: str, limit: int) -> str:
    return "".join(ch if ch.isprintable() else " " for ch in text)[:limit].strip()


def _seconds_until(moment: datetime, now: datetime) -> float:
    return round(max(0.0, (moment - now).total_seconds()), 3)


def view(record: OperationRecord, now: datetime) -> dict[str, Any]:
    """What an agent sees of an operation: its budget and clock, never the credential context."""
    final = record.is_final
    return {
        "operation_id": record.operation_id,
        "contract": record.contract_name,
        "job_id": record.job_id,
        "phase": record.phase.value,
        "reason": record.reason.value if record.reason else None,
        "detail": record.detail,
        "last_state": record.last_state,
        "last_http_status": record.last_http_status,
        "status_requests_used": record.status_requests_used,
        "max_status_requests": record.plan.max_status_requests,
        "deadline_at": format_rfc3339(record.deadline_at),
        "seconds_to_deadline": _seconds_until(record.deadline_at, now),
        "next_check_at": None if final else format_rfc3339(record.next_poll_at),
        "result": record.result,
        "provider_error": record.provider_error,
    }


def _decision_view(request: DecisionRequest, status: str = "open") -> dict[str, Any]:
    return {
        "decision_id": request.decision_id,
        "status": status,
        "reason": request.reason.value,
        "requested_by": request.requested_by,
        "request_reason": request.request_reason,
        "options": [o.to_json() for o in request.options],
        "message": request.render(),
        "decided_by_a_person_with": f"pollwarden decide {request.decision_id} --option N --by NAME (or the console)",
    }


@dataclass
class CallContext:
    """Per tool call: who is calling (for the session log) and whether the caller went away."""

    cancelled: threading.Event
    notify: Callable[[str], None] | None = None


# -- the broker ---------------------------------------------------------------------------------------


class Broker:
    """The agent-facing operations, synchronous, each on its own store connection."""

    def __init__(
        self,
        contracts: Mapping[str, Contract],
        home: Path,
        *,
        environ: Mapping[str, str] | None = None,
        session_id: str | None = None,
        clock: Callable[[], datetime] = utcnow,
        problems: Iterable[str] = (),
    ) -> None:
        env = os.environ if environ is None else environ
        self.contracts = dict(contracts)
        self.home = home
        self.clock = clock
        self.session_id = session_id or secrets.token_hex(6)
        self.log_id = agent_log_id(self.session_id)
        self.scrubber = Scrubber(secret_values(self.contracts.values(), env))
        self.problems = list(problems)
        self.stopping = threading.Event()
        self._secrets: dict[str, str | None] = {}
        self._not_ready: dict[str, str] = {}
        for name, contract in self.contracts.items():
            try:
                self._secrets[name] = resolve_secret(contract, env)
            except CredentialError as exc:
                self._not_ready[name] = str(exc)
            if not contract.safe_status:
                self._not_ready[name] = f"contract {name!r} declares safe_status = false"
        self._lock = threading.Lock()
        self._started = False
        self._calls = 0
        self._environ = env
        # Opening once creates the audit keys before any concurrent tool call could race to create them.
        self._open().close()

    # -- plumbing ------------------------------------------------------------------------------------

    def _open(self) -> Store:
        try:
            return open_store(self.home, keys="write")
        except HomeError as exc:
            raise ToolFailure("store_unavailable", f"the state store cannot be opened: {exc}") from None

    @contextlib.contextmanager
    def _store(self) -> Iterator[Store]:
        store = self._open()
        try:
            yield store
        finally:
            store.close()

    def _audit(self, store: Store, kind: str, data: Mapping[str, Any]) -> None:
        """A durable record in the session's audit chain; when it cannot be written, nothing happens."""
        try:
            store.append(self.log_id, kind, dict(data), self.clock())
        except Exception as exc:
            raise ToolFailure(
                "audit_unavailable",
                f"the audit record ({kind}) could not be written, so nothing was done: {exc.__class__.__name__}",
            ) from None

    def start_session(self, client: Mapping[str, Any] | None) -> None:
        """Written once, before the first tool call is served: which process, which contracts, which client."""
        with self._lock:
            if self._started:
                return
            with self._store() as store:
                self._audit(
                    store,
                    "session_started",
                    {
                        "session": self.session_id,
                        "pid": os.getpid(),
                        "server": f"pollwarden {__version__}",
                        "client": dict(client) if client else None,
                        "contracts": {n: c.approval for n, c in sorted(self.contracts.items())},
                        "contract_problems": self.problems,
                    },
                )
            self._started = True

    def dispatch(
        self, tool: str, call: CallContext, client: Mapping[str, Any] | None, **arguments: Any
    ) -> tuple[bool, dict[str, Any]]:
        """Run one tool; every outcome (reply, refusal, crash) comes back scrubbed as (ok, JSON-able dict)."""
        try:
            self.start_session(client)
            handler: Callable[..., dict[str, Any]] = getattr(self, "tool_" + tool)
            reply = handler(call, **arguments)
            return True, self.scrubber.value(reply)
        except ToolFailure as failure:
            return False, self.scrubber.value(failure.to_json())
        except Exception as exc:  # the agent gets a sentence, the operator the (scrubbed) traceback
            log.exception("tool %s failed", tool)
            message = f"internal error in {tool}: {exc.__class__.__name__}: {exc}"[:500]
            return False, self.scrubber.value({"error": "internal_error", "message": message})

    # -- lookups -------------------------------------------------------------------------------------

    def _contract(self, name: str) -> Contract:
        contract = self.contracts.get(name) if isinstance(name, str) else None
        if contract is None:
            raise ToolFailure(
                "unknown_contract",
                f"no contract named {_clean_text(str(name), 80)!r} is served here; contracts are named by their"
                " `name`, never by a path",
                contracts=sorted(self.contracts),
            )
        return contract

    def _ready(self, contract: Contract) -> None:
        problem = self._not_ready.get(contract.name)
        if problem is not None:
            log.warning("contract %s is not ready: %s", contract.name, problem)
            raise ToolFailure(
                "not_ready",
                f"contract {contract.name!r} is not ready on this server (its credential or safety declaration is"
                " missing); a person must fix the server's configuration. Nothing was sent",
            )

    def _operation(self, store: Store, operation_id: str) -> tuple[Contract, OperationRecord]:
        if not isinstance(operation_id, str) or not OPERATION_ID.match(operation_id):
            raise ToolFailure("unknown_operation", "no such operation; list_operations() shows them")
        stored = store.get(operation_id)
        if stored is None or stored.record.contract_name not in self.contracts:
            raise ToolFailure("unknown_operation", f"no operation {operation_id!r}; list_operations() shows them")
        return self.contracts[stored.record.contract_name], stored.record

    def _provider_ready(self, contract: Contract, record: OperationRecord) -> None:
        """Configuration ready: a credential, a safe status endpoint, and the table the operation was made with."""
        self._ready(contract)
        if contract.fingerprint() != record.contract_fingerprint:
            raise ToolFailure(
                "not_ready",
                f"operation {record.operation_id} was created with another version of contract {contract.name!r}"
                " (states, fields, status URL or credential); a person must resume it with the original. Nothing"
                " was sent",
            )

    def _client(self, contract: Contract) -> StatusClient:
        return StatusClient(contract, self._secrets.get(contract.name), clock=self.clock)

    def _watcher(self, store: Store, contract: Contract, client: StatusClient) -> Watcher:
        def notify(request: DecisionRequest) -> None:
            delivery = deliver(contract, request, environ=self._environ)
            if delivery is not None:
                kind = "notified" if delivery.ok else "notify_failed"
                store.append(
                    request.operation_id, kind, {"decision_id": request.decision_id, **delivery.to_json()}, self.clock()
                )

        return Watcher(store, contract, client, owner=process_owner(), clock=self.clock, notify=notify)

    # -- the gates -----------------------------------------------------------------------------------

    def _gated_call(
        self,
        store: Store,
        contract: Contract,
        record: OperationRecord,
        purpose: str,
        call: CallContext,
        send: Callable[[], tuple[T, dict[str, Any]]],
    ) -> T:
        """The fixed order for every provider call: ready, per-call gate, session gate, intent, call, result."""
        self._provider_ready(contract, record)
        grant_id: str | None = None
        if contract.approval == "per_call":
            grant_id = self._per_call_gate(store, contract, record, purpose, call)
        if contract.approval == "session":
            grant_id = self._session_gate(store, contract, record, purpose)
        with self._lock:
            self._calls += 1
            number = self._calls
        intent = {
            "call": number,
            "purpose": purpose,
            "operation": record.operation_id,
            "contract": contract.name,
            "job": record.job_id,
            "approval": contract.approval,
            "grant_id": grant_id,
            "status_requests_used": record.status_requests_used,
            "max_status_requests": record.plan.max_status_requests,
        }
        self._audit(store, "call_intent", intent)
        try:
            value, outcome = send()
        except ToolFailure as failure:
            self._result(store, {"call": number, "operation": record.operation_id, "outcome": failure.code})
            raise
        except Exception as exc:
            self._result(store, {"call": number, "operation": record.operation_id, "outcome": "error"})
            raise ToolFailure("call_failed", f"the provider call failed: {exc.__class__.__name__}") from None
        self._result(store, {"call": number, "operation": record.operation_id, **outcome})
        return value

    def _result(self, store: Store, data: Mapping[str, Any]) -> None:
        # The call has happened and its facts are in the operation's own log; a failed result record is
        # reported to the operator, not turned into a second call.
        try:
            store.append(self.log_id, "call_result", dict(data), self.clock())
        except Exception:
            log.exception("the result record of call %s could not be written", data.get("call"))

    def _deny(self, store: Store, record: OperationRecord, reason: str, grant_id: str | None) -> None:
        with contextlib.suppress(ToolFailure):
            self._audit(store, "call_denied", {"operation": record.operation_id, "why": reason, "grant_id": grant_id})

    def _per_call_gate(
        self, store: Store, contract: Contract, record: OperationRecord, purpose: str, call: CallContext
    ) -> str:
        """One pending grant per call; wait for a person, bounded; silence is `approval_timeout`, never a yes."""
        now = self.clock()
        timeout = contract.agent.approval_timeout
        grant = Grant(
            grant_id="c" + secrets.token_hex(5),
            kind="call",
            subject=self.session_id,
            scope=record.operation_id,
            status="pending",
            requested_at=now,
            detail={
                "contract": contract.name,
                "operation": record.operation_id,
                "job": record.job_id,
                "purpose": purpose,
                "status_request": record.status_requests_used + 1 if purpose == "status_request" else None,
                "max_status_requests": record.plan.max_status_requests,
                "deadline_at": format_rfc3339(record.deadline_at),
                "expires_at": format_rfc3339(now + timeout),
            },
        )
        try:
            store.request_grant(grant, self.log_id)
        except Exception as exc:
            raise ToolFailure(
                "audit_unavailable", f"the approval request could not be recorded ({exc.__class__.__name__})"
            ) from None
        how = f"pollwarden approve-call {grant.grant_id} --by NAME (or --refuse)"
        if call.notify is not None:
            with contextlib.suppress(Exception):
                call.notify(f"waiting up to {format_duration(timeout)} for a person: {how}")
        ends = time.monotonic() + timeout.total_seconds()
        while True:
            current = store.get_grant(grant.grant_id)
            status = current.status if current is not None else "missing"
            if status == "approved":
                return grant.grant_id
            if status != "pending":
                by = current.decided_by if current is not None else None
                self._deny(store, record, f"approval_{status}", grant.grant_id)
                raise ToolFailure(
                    "approval_refused",
                    f"a person refused this {purpose.replace('_', ' ')} (grant {grant.grant_id}); nothing was sent",
                    grant_id=grant.grant_id,
                    refused_by=by,
                    operation_id=record.operation_id,
                )
            gone = call.cancelled.is_set() or self.stopping.is_set()
            if gone or time.monotonic() >= ends:
                expired = store.decide_grant(
                    grant.grant_id,
                    expect="pending",
                    status="expired",
                    by="pollwarden",
                    at=self.clock(),
                    log_id=self.log_id,
                    note="the caller went away" if gone else f"no answer within {format_duration(timeout)}",
                )
                if not expired:
                    continue  # a person answered in the last instant: that answer counts
                self._deny(store, record, "approval_timeout", grant.grant_id)
                raise ToolFailure(
                    "approval_timeout",
                    f"no person approved this {purpose.replace('_', ' ')} within {format_duration(timeout)}"
                    f" ([agent].approval_timeout); grant {grant.grant_id} expired and nothing was sent. Calling"
                    " again asks again",
                    grant_id=grant.grant_id,
                    operation_id=record.operation_id,
                )
            self.stopping.wait(min(APPROVAL_POLL_SECONDS, max(0.0, ends - time.monotonic())))

    def _session_gate(self, store: Store, contract: Contract, record: OperationRecord, purpose: str) -> str:
        """One approval per agent session and contract; revoked means ask again, refused means no for good."""
        mine = [g for g in store.grants(kind="session", subject=self.session_id) if g.scope == contract.name]
        latest = mine[-1] if mine else None
        if latest is not None and latest.status == "approved":
            return latest.grant_id
        if latest is not None and latest.status == "refused":
            self._deny(store, record, "session_refused", latest.grant_id)
            raise ToolFailure(
                "approval_refused",
                f"a person refused this agent session the use of contract {contract.name!r}"
                f" (grant {latest.grant_id}); nothing was sent",
                grant_id=latest.grant_id,
                refused_by=latest.decided_by,
                operation_id=record.operation_id,
            )
        if latest is None or latest.status != "pending":
            latest = Grant(
                grant_id="s" + secrets.token_hex(5),
                kind="session",
                subject=self.session_id,
                scope=contract.name,
                status="pending",
                requested_at=self.clock(),
                detail={
                    "contract": contract.name,
                    "first_operation": record.operation_id,
                    "first_purpose": purpose,
                    "after": latest.grant_id if latest is not None else None,
                },
            )
            try:
                store.request_grant(latest, self.log_id)
            except Exception as exc:
                raise ToolFailure(
                    "audit_unavailable", f"the approval request could not be recorded ({exc.__class__.__name__})"
                ) from None
        self._deny(store, record, "approval_required", latest.grant_id)
        raise ToolFailure(
            "approval_required",
            f"contract {contract.name!r} needs a person to approve this agent session before any provider call;"
            f" nothing was sent. Ask them to run: pollwarden approve-session {latest.grant_id} --by NAME,"
            " then call again",
            grant_id=latest.grant_id,
            approve_with=f"pollwarden approve-session {latest.grant_id} --by NAME",
            session=self.session_id,
            operation_id=record.operation_id,
        )

    # -- one step of the controller ------------------------------------------------------------------

    def _advance(self, store: Store, operation_id: str, call: CallContext) -> dict[str, Any]:
        """At most one poll: "not yet" (no provider request) when nothing is due."""
        contract, record = self._operation(store, operation_id)
        now = self.clock()
        step = next_step(record, now)
        if isinstance(step, Finished):
            return self._final(store, record)
        if isinstance(step, Wait):
            return self._not_yet(record, step.until, now)
        if isinstance(step, Halt):  # a stop found before any request: recorded, nothing sent
            with self._client(contract) as client:
                result = self._watcher(store, contract, client).step(operation_id)
            return self._reply(store, result)
        assert isinstance(step, Poll)

        def send() -> tuple[StepResult, dict[str, Any]]:
            with self._client(contract) as client:
                result = self._watcher(store, contract, client).step(operation_id)
            if isinstance(result, Polled):
                polled = result.decision.record
                outcome = {
                    "outcome": "sent",
                    "http_status": result.observation.http_status,
                    "state": result.observation.state,
                    "phase": polled.phase.value,
                    "reason": polled.reason.value if polled.reason else None,
                    "request_no": polled.status_requests_used,
                }
            else:
                outcome = {"outcome": "not_sent", "step": type(result).__name__.lower()}
            return result, outcome

        return self._reply(store, self._gated_call(store, contract, record, "status_request", call, send))

    def _reply(self, store: Store, result: StepResult) -> dict[str, Any]:
        now = self.clock()
        if isinstance(result, Polled):
            record = result.decision.record
            if record.is_final:
                return self._final(store, record, polled=True)
            return {
                "status": "polled",
                "state": record.last_state,
                "http_status": record.last_http_status,
                "retry_after_seconds": _seconds_until(record.next_poll_at, now),
                "delay_source": record.delay_source.value,
                "operation": view(record, now),
            }
        if isinstance(result, NotYet):
            return self._not_yet(result.record, result.until, now)
        if isinstance(result, Busy):
            return {
                "status": "busy",
                "message": "another worker is polling this operation right now; look again shortly",
                "retry_after_seconds": _seconds_until(result.retry_at, now),
                "operation": view(result.record, now),
            }
        assert isinstance(result, Done)
        return self._final(store, result.record)

    def _not_yet(self, record: OperationRecord, until: datetime, now: datetime) -> dict[str, Any]:
        wait = _seconds_until(until, now)
        return {
            "status": "not_yet",
            "message": f"not yet: the next status check is due in {wait:g} s; no request was sent",
            "retry_after_seconds": wait,
            "next_check_at": format_rfc3339(until),
            "operation": view(record, now),
        }

    def _final(self, store: Store, record: OperationRecord, *, polled: bool = False) -> dict[str, Any]:
        now = self.clock()
        if record.phase is Phase.SUCCEEDED:
            return {
                "status": "succeeded",
                "polled": polled,
                "result": record.result,
                "message": "the job succeeded with a validated result; fetch_result(operation_id) retrieves it",
                "operation": view(record, now),
            }
        marker = stop_marker(record)
        current = [d for d in store.decisions(record.operation_id, open_only=True) if d.request.stop_marker == marker]
        decision = current[-1].request if current else None
        job_ended = bool(record.reason and record.reason.job_ended)
        return {
            "status": "stopped",
            "polled": polled,
            "reason": record.reason.value if record.reason else None,
            "detail": record.detail,
            "job_ended": job_ended,
            "decision": _decision_view(decision) if decision is not None else None,
            "message": (
                "the job ended at the provider without success"
                if job_ended
                else "waiting stopped and needs a person's decision; you may ask for more with request_extension,"
                " but only a person can grant it"
            ),
            "operation": view(record, now),
        }

    # -- tools ---------------------------------------------------------------------------------------

    def tool_start_watch(
        self,
        call: CallContext,
        contract: str,
        job_id: str,
        deadline: str | float | None = None,
        max_requests: int | None = None,
    ) -> dict[str, Any]:
        served = self._contract(contract)
        self._ready(served)
        if (
            not isinstance(job_id, str)
            or not job_id.strip()
            or len(job_id) > MAX_JOB_ID_CHARS
            or any(not ch.isprintable() for ch in job_id)
        ):
            raise ToolFailure(
                "invalid_argument",
                f"job_id must be the provider's job id: non-empty, at most {MAX_JOB_ID_CHARS} printable characters",
            )
        wanted_deadline = served.agent_max_deadline
        if deadline is not None:
            try:
                if isinstance(deadline, int | float) and not isinstance(deadline, bool):
                    wanted_deadline = timedelta(seconds=deadline)  # a bare number is seconds
                else:
                    wanted_deadline = parse_duration(str(deadline))
            except (DurationError, OverflowError, ValueError) as exc:
                raise ToolFailure("invalid_argument", f"deadline: {exc}") from None
            if wanted_deadline <= timedelta(0):
                raise ToolFailure("invalid_argument", "deadline must be longer than zero")
            if wanted_deadline > served.agent_max_deadline:
                raise ToolFailure(
                    "limit_exceeded",
                    f"deadline {format_duration(wanted_deadline)} exceeds [agent].max_deadline"
                    f" {format_duration(served.agent_max_deadline)} of contract {served.name!r}: an agent may ask for"
                    " less, never more. Nothing was created",
                    limit="[agent].max_deadline",
                    allowed=format_duration(served.agent_max_deadline),
                )
        wanted_requests = served.agent_max_requests
        if max_requests is not None:
            if isinstance(max_requests, bool) or not isinstance(max_requests, int) or max_requests < 1:
                raise ToolFailure("invalid_argument", "max_requests must be a whole number of at least 1")
            if max_requests > served.agent_max_requests:
                raise ToolFailure(
                    "limit_exceeded",
                    f"max_requests {max_requests} exceeds [agent].max_requests {served.agent_max_requests} of contract"
                    f" {served.name!r}: an agent may ask for less, never more. Nothing was created",
                    limit="[agent].max_requests",
                    allowed=served.agent_max_requests,
                )
            wanted_requests = max_requests
        now = self.clock()
        operation_id = f"{_operation_prefix(served.name)}-{now.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        record = new_record(
            served,
            operation_id=operation_id,
            job_id=job_id,
            now=now,
            deadline=wanted_deadline,
            max_requests=wanted_requests,
            useful_for=served.escalation.useful_for,
        )
        with self._store() as store:
            self._audit(
                store,
                "watch_started",
                {"operation": operation_id, "contract": served.name, "job": job_id, **record.summary()},
            )
            try:
                store.create(
                    record,
                    served.source_text,
                    {
                        **record.summary(),
                        "request_fingerprint": record.request_fingerprint,
                        "contract_fingerprint": record.contract_fingerprint,
                        "expected_terminal": list(record.expected_terminal),
                        "created_by": f"agent session {self.session_id}",
                    },
                )
            except OperationExists:  # pragma: no cover - a random suffix; kept as a guard
                raise ToolFailure("busy", "that operation id was taken a moment ago; call start_watch again") from None
        return {
            "status": "watching",
            "operation_id": operation_id,
            "contract": served.name,
            "job_id": job_id,
            "deadline_at": format_rfc3339(record.deadline_at),
            "max_status_requests": record.plan.max_status_requests,
            "next_check_at": format_rfc3339(record.next_poll_at),
            "retry_after_seconds": _seconds_until(record.next_poll_at, now),
            "approval": served.approval,
            "message": (
                f"watching job {job_id}: at most {record.plan.max_status_requests} status requests until"
                f" {format_rfc3339(record.deadline_at)}. Call wait_operation(operation_id, max_wait_seconds) to wait"
                " here without a loop, or check_operation(operation_id) when retry_after_seconds has passed"
            ),
        }

    def tool_check_operation(self, call: CallContext, operation_id: str) -> dict[str, Any]:
        with self._store() as store:
            return self._advance(store, operation_id, call)

    def tool_wait_operation(self, call: CallContext, operation_id: str, max_wait_seconds: float) -> dict[str, Any]:
        if isinstance(max_wait_seconds, bool) or not isinstance(max_wait_seconds, int | float) or max_wait_seconds < 0:
            raise ToolFailure("invalid_argument", "max_wait_seconds must be a number of seconds, 0 or more")
        capped = min(float(max_wait_seconds), float(MAX_WAIT_SECONDS))
        started = time.monotonic()
        ends = started + capped
        with self._store() as store:
            while True:
                reply = self._advance(store, operation_id, call)
                if reply["status"] in ("succeeded", "stopped"):
                    break
                remaining = ends - time.monotonic()
                if reply["status"] == "polled" and remaining > 0:
                    continue  # the next step will say how long until the next poll
                if remaining <= 0 or call.cancelled.is_set() or self.stopping.is_set():
                    reply = {
                        **reply,
                        "status": "not_yet",
                        "wait_ended": True,
                        "message": f"still waiting after {capped:g} s; call wait_operation again (the operation"
                        " keeps its deadline and budget)",
                    }
                    break
                # No lease is held here: the Watcher released it after its step (R38).
                pause = min(float(reply.get("retry_after_seconds") or 0.05), remaining)
                self.stopping.wait(max(0.01, pause))
        reply["waited_seconds"] = round(time.monotonic() - started, 3)
        if capped < max_wait_seconds:
            reply["max_wait_seconds_capped_to"] = MAX_WAIT_SECONDS
        return reply

    def tool_get_decision(self, call: CallContext, operation_id: str) -> dict[str, Any]:
        with self._store() as store:
            _, record = self._operation(store, operation_id)
            rows = store.decisions(operation_id)
        open_rows = [d for d in rows if d.status == "open"]
        return {
            "operation_id": operation_id,
            "phase": record.phase.value,
            "reason": record.reason.value if record.reason else None,
            "decision": _decision_view(open_rows[-1].request) if open_rows else None,
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
        self, call: CallContext, operation_id: str, minutes: int, checks: int, reason: str
    ) -> dict[str, Any]:
        for name, value, top in (("minutes", minutes, MAX_EXTENSION_MINUTES), ("checks", checks, MAX_EXTENSION_CHECKS)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise ToolFailure("invalid_argument", f"{name} must be a whole number from 1 to {top}")
        why = _clean_text(str(reason), MAX_REASON_CHARS)
        if not why:
            raise ToolFailure("invalid_argument", "reason must say why more waiting is worth it (R43)")
        with self._store() as store:
            contract, record = self._operation(store, operation_id)
            if record.phase is not Phase.STOPPED:
                raise ToolFailure(
                    "not_stopped",
                    f"operation {operation_id} is {record.phase.value}; more authority is asked for after a stop"
                    " (the operation keeps its approved deadline and budget until then)",
                )
            marker = stop_marker(record)
            for existing in store.decisions(operation_id, open_only=True):
                mine = existing.request.requested_by == self._requester
                if mine and existing.request.stop_marker == marker:
                    return {
                        "status": "requested",
                        "already_requested": True,
                        "decision": _decision_view(existing.request),
                        "message": "this stop already has your request; a person decides it, you cannot",
                    }
            now = self.clock()
            claimed = store.claim(operation_id, process_owner(), now, timedelta(seconds=30))
            if claimed is None:
                raise ToolFailure("busy", f"operation {operation_id} is busy in another process; try again shortly")
            lease, current = claimed
            try:
                if stop_marker(current) != marker:
                    raise ToolFailure("busy", f"operation {operation_id} moved on a moment ago; look at it again")
                try:
                    request = build_request(
                        current,
                        contract,
                        now,
                        decision_id=new_decision_id(),
                        requested=(timedelta(minutes=minutes), checks, why, self._requester),
                    )
                except DecisionError as exc:
                    raise ToolFailure("not_stopped", str(exc)) from None
                if not any(o.kind in (OptionKind.EXTEND, OptionKind.PAUSE) for o in request.options):
                    reason_value = current.reason.value if current.reason else "?"
                    raise ToolFailure(
                        "not_extendable",
                        f"a stop for {reason_value} does not allow more waiting (R30); a person may inspect or close"
                        " it. Nothing was requested",
                    )
                event = {
                    "decision_id": request.decision_id,
                    "minutes": minutes,
                    "checks": checks,
                    "reason": why,
                    "requested_by": self._requester,
                }
                if not store.write(
                    lease, current, [("extension_requested", event)], now, release=True, decision=request
                ):
                    raise ToolFailure("busy", f"operation {operation_id} was taken over; try again shortly")
            except BaseException:
                store.release(lease)
                raise
            # The request and its audit event are committed in the operation's log; this is the session's copy.
            try:
                store.append(self.log_id, "extension_requested", {"operation": operation_id, **event}, now)
            except Exception:
                log.exception("the session record of extension request %s could not be written", request.decision_id)
        return {
            "status": "requested",
            "decision": _decision_view(request),
            "message": (
                f"decision {request.decision_id} is waiting for a person (pollwarden decisions / decide, or the"
                " console); you cannot grant it. get_decision(operation_id) shows what they chose"
            ),
        }

    @property
    def _requester(self) -> str:
        return f"agent session {self.session_id}"

    def tool_fetch_result(self, call: CallContext, operation_id: str) -> dict[str, Any]:
        with self._store() as store:
            contract, record = self._operation(store, operation_id)
            if record.phase is not Phase.SUCCEEDED or not record.result:
                state = record.reason.value if record.reason else record.phase.value
                raise ToolFailure(
                    "no_result",
                    f"operation {operation_id} has no validated result ({state}); output may be fetched only after a"
                    " validated success (R6, R17). Nothing was sent",
                )

            def send() -> tuple[dict[str, Any], dict[str, Any]]:
                with tempfile.TemporaryDirectory(prefix="pollwarden-result-") as scratch:
                    out = Path(scratch) / "result"
                    with self._client(contract) as client:
                        try:
                            info = fetch_result(contract, client, record, out)
                        except ActionError as exc:
                            store.append(
                                operation_id,
                                "action",
                                {"action": "fetch_result", "ok": False, "detail": str(exc), "by": self._requester},
                                self.clock(),
                            )
                            raise ToolFailure("fetch_failed", str(exc)) from None
                    body = out.read_bytes()
                info.pop("out", None)
                store.append(operation_id, "action", {**info, "by": self._requester}, self.clock())
                summary = {"outcome": "sent", "bytes": info["bytes"], "sha256": info["sha256"]}
                return {**info, "body": body}, summary

            fetched = self._gated_call(store, contract, record, "fetch_result", call, send)
        body: bytes = fetched.pop("body")
        text = body.decode("utf-8", errors="replace")
        return {
            "status": "fetched",
            "operation_id": operation_id,
            "bytes": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
            "content_type": fetched.get("content_type"),
            "text": text[:RESULT_TEXT_CAP],
            "truncated": len(text) > RESULT_TEXT_CAP,
            "url": fetched.get("url"),
        }

    def tool_list_operations(self, call: CallContext) -> dict[str, Any]:
        now = self.clock()
        with self._store() as store:
            rows = [s.record for s in store.all() if s.record.contract_name in self.contracts]
        return {
            "session": self.session_id,
            "contracts": {
                name: {
                    "approval": c.approval,
                    "ready": name not in self._not_ready,
                    "max_deadline": format_duration(c.agent_max_deadline),
                    "max_requests": c.agent_max_requests,
                }
                for name, c in sorted(self.contracts.items())
            },
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
                    "next_check_at": None if r.is_final else format_rfc3339(r.next_poll_at),
                }
                for r in rows
            ],
            "now": format_rfc3339(now),
        }


# -- the MCP layer ------------------------------------------------------------------------------------

INSTRUCTIONS = """\
pollwarden waits on external jobs for you, within limits a person set. Start with start_watch(contract, job_id),
then call wait_operation(operation_id, max_wait_seconds) to wait here (up to 300 s per call) instead of looping.
check_operation never sends a request before the next check is due. When waiting stops, only a person can grant
more: request_extension asks them, get_decision shows their answer. fetch_result works only after a validated
success. You never handle credentials: contracts are named by `name` and the server makes every provider call.
"""


OperationId = Annotated[str, Field(description="an operation id returned by start_watch or list_operations")]
"""Tool argument types live at module level: the SDK evaluates the (string) annotations in this namespace."""


def build_server(broker: Broker) -> MCPServer[Any]:
    """The SDK's high-level `MCPServer` with the seven tools; every reply is a scrubbed JSON object."""
    scrubber = broker.scrubber

    async def scrub_everything(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """The protocol boundary: nothing leaves, reply or error, with a configured secret in it."""
        try:
            result = await call_next(ctx)
        except MCPError as exc:
            if scrubber.found_in(exc.error.message) or scrubber.found_in(json.dumps(exc.error.data, default=str)):
                raise MCPError(exc.error.code, scrubber.text(exc.error.message)) from None
            raise
        if result is None or not scrubber:
            return result
        dumped = result.model_dump(mode="json", by_alias=True) if isinstance(result, BaseModel) else dict(result)
        if not scrubber.found_in(json.dumps(dumped)):
            return result
        cleaned: dict[str, Any] = scrubber.value(dumped)
        return cleaned

    server: MCPServer[Any] = MCPServer(
        "pollwarden",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
        middleware=[scrub_everything],
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(ScrubLogs(scrubber))

    def client_of(ctx: Context) -> dict[str, Any] | None:
        try:
            params = ctx.session.client_params
            info = params.client_info.model_dump(mode="json", exclude_none=True) if params is not None else None
            return {"info": info, "protocol_version": ctx.protocol_version}
        except Exception:
            return None

    async def run(ctx: Context, tool: str, **arguments: Any) -> CallToolResult:
        cancelled = threading.Event()

        def notify(message: str) -> None:
            anyio.from_thread.run(ctx.info, scrubber.text(message))

        call = CallContext(cancelled=cancelled, notify=notify)
        try:
            ok, payload = await anyio.to_thread.run_sync(
                functools.partial(broker.dispatch, tool, call, client_of(ctx), **arguments),
                abandon_on_cancel=True,
            )
        except BaseException:
            cancelled.set()  # the worker thread sees it and expires any pending approval
            raise
        text = json.dumps(payload, indent=2, sort_keys=True)
        return CallToolResult(
            content=[TextContent(type="text", text=text)], structured_content=payload, is_error=not ok
        )

    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
    polls = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=False, open_world_hint=True)

    @server.tool(
        name="start_watch",
        annotations=ToolAnnotations(destructive_hint=False, open_world_hint=False),
        description="Create a bounded watch on a provider job (no provider request yet). The contract, named by its"
        " `name`, fixes the status URL and credential; deadline and max_requests may only be lower than the"
        " contract allows for agents. Returns the operation id, deadline, budget and when to look again.",
    )
    async def start_watch(
        contract: Annotated[str, Field(description="the contract's name, as list_operations shows")],
        job_id: Annotated[str, Field(description="the provider's job id")],
        ctx: Context,
        deadline: Annotated[
            str | float | None,
            Field(description="a duration like '10m' or '90s' (a number is seconds); default: the most allowed"),
        ] = None,
        max_requests: Annotated[
            int | None, Field(description="status request budget; default: the most allowed")
        ] = None,
    ) -> CallToolResult:
        return await run(
            ctx, "start_watch", contract=contract, job_id=job_id, deadline=deadline, max_requests=max_requests
        )

    @server.tool(
        name="check_operation",
        annotations=polls,
        description="Look at an operation once. If the next check is not due, answers 'not_yet' with"
        " retry_after_seconds and sends NO provider request; if due, performs exactly one status request.",
    )
    async def check_operation(operation_id: OperationId, ctx: Context) -> CallToolResult:
        return await run(ctx, "check_operation", operation_id=operation_id)

    @server.tool(
        name="wait_operation",
        annotations=polls,
        description="Wait here, server-side, until the operation succeeds, stops for a decision, or"
        f" max_wait_seconds pass (at most {MAX_WAIT_SECONDS}). Polls only when due. Use this instead of a loop.",
    )
    async def wait_operation(
        operation_id: OperationId,
        max_wait_seconds: Annotated[float, Field(description=f"seconds to wait, capped at {MAX_WAIT_SECONDS}")],
        ctx: Context,
    ) -> CallToolResult:
        return await run(ctx, "wait_operation", operation_id=operation_id, max_wait_seconds=max_wait_seconds)

    @server.tool(
        name="get_decision",
        annotations=read_only,
        description="The open decision request of a stopped operation (options a person may choose) and past ones.",
    )
    async def get_decision(operation_id: OperationId, ctx: Context) -> CallToolResult:
        return await run(ctx, "get_decision", operation_id=operation_id)

    @server.tool(
        name="request_extension",
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True, open_world_hint=False),
        description="Ask a person for more waiting after a stop: extra minutes and extra status checks, with a"
        " reason. Creates a decision request; only a person can grant it (pollwarden decide or the console).",
    )
    async def request_extension(
        operation_id: OperationId,
        minutes: Annotated[int, Field(description="extra minutes of waiting")],
        checks: Annotated[int, Field(description="extra status requests")],
        reason: Annotated[str, Field(description="why more waiting is worth it, for the person deciding")],
        ctx: Context,
    ) -> CallToolResult:
        return await run(
            ctx, "request_extension", operation_id=operation_id, minutes=minutes, checks=checks, reason=reason
        )

    @server.tool(
        name="fetch_result",
        annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=True),
        description="Retrieve the job's result, only after a validated success: the body as text (capped) and the"
        " sha256 of the whole body.",
    )
    async def fetch_result_tool(operation_id: OperationId, ctx: Context) -> CallToolResult:
        return await run(ctx, "fetch_result", operation_id=operation_id)

    @server.tool(
        name="list_operations",
        annotations=read_only,
        description="The contracts served here (by name, with their agent limits and approval mode) and the"
        " operations on them.",
    )
    async def list_operations(ctx: Context) -> CallToolResult:
        return await run(ctx, "list_operations")

    return server


def serve(contracts_dir: Path, home: Path) -> int:
    """Run the stdio server until the client goes away. Returns an exit code; stdout belongs to MCP."""
    # The wait notice is an MCP log message: deprecated as of spec 2026-07-28, still shown by many clients, and
    # best effort here. The SDK's deprecation warning would only add noise to the operator's stderr.
    warnings.filterwarnings("ignore", category=MCPDeprecationWarning)
    contracts, problems = load_contracts(contracts_dir)
    broker = Broker(contracts, home, problems=problems)
    server = build_server(broker)
    log.setLevel(logging.INFO)
    for problem in problems:
        log.warning("contract not served: %s", problem)
    log.info(
        "pollwarden mcp: session %s serving %s from %s, state in %s",
        broker.session_id,
        ", ".join(f"{n} (approval {c.approval})" for n, c in sorted(contracts.items())) or "no contracts",
        contracts_dir,
        home,
    )
    try:
        server.run("stdio")
    finally:
        broker.stopping.set()
    return 0


__all__ = [
    "MAX_WAIT_SECONDS",
    "Broker",
    "CallContext",
    "Scrubber",
    "ToolFailure",
    "build_server",
    "load_contracts",
    "serve",
]
