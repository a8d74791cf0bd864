"""The Python API for agent code that is not MCP: one bounded watch, a typed outcome, the same core and store.

    from pollwarden import Succeeded, Watch

    outcome = Watch("contracts/exports.toml", "exp_71c", home="~/.local/state/pollwarden").run()
    if isinstance(outcome, Succeeded):
        use(outcome.result)
    else:
        tell_a_person(outcome.reason, outcome.decision)

`await pollwarden.watch(...)` runs the same watch on a worker thread, so the event loop keeps running while the
watcher sleeps between polls (with no lease held, R38); `pollwarden.watch_sync(...)` is its blocking twin. The
record, the audit trail and the decision request are exactly what `pollwarden watch` leaves: `status`, `story`,
`decisions` and `decide` work on them as on any other operation.

The caller's process holds the credential here (it comes from the environment, as for `pollwarden watch`), so a
contract that asks for agent approvals (`approval = "session"` or `"per_call"`) is refused: those gates protect a
credential from an agent, and only `pollwarden mcp`, which keeps the credential away from the agent, can enforce
them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from .catalogue import resolve_contract
from .clock import utcnow
from .core.admission import Limits, WatchRequest, check, operation_id_problem
from .core.contract import Contract, ContractError, load_contract
from .core.contract_result import JSONValue
from .core.durations import DurationError, parse_duration
from .core.escalation import DecisionRequest
from .core.reasons import Phase, StopReason
from .core.record import OperationRecord
from .errors import PollwardenError

if TYPE_CHECKING:
    from .engine import StepResult
    from .store.base import Store

__all__ = ["Outcome", "Stopped", "Succeeded", "Watch", "WatchError", "watch", "watch_sync"]


_NAMES = {"status_location": "status_url"}
"""Admission's field names as this API's parameters, where they differ."""


class WatchError(PollwardenError, ValueError):
    """A watch that cannot start or resume as asked; nothing was sent. The message says what to change."""


@dataclass(frozen=True)
class Succeeded:
    """The provider reported success and every field the next action needs passed validation (R17)."""

    operation_id: str
    result: JSONValue
    """Any JSON value the contract's `[result]` allows: a str for a string result (the default), as before."""
    record: OperationRecord


@dataclass(frozen=True)
class Stopped:
    """Waiting ended without success. `decision` is the open request a person answers (None when the job
    itself ended at the provider and nothing is left to decide, or when it was already decided)."""

    operation_id: str
    reason: StopReason
    decision: DecisionRequest | None
    record: OperationRecord | None = None

    @property
    def job_ended(self) -> bool:
        return self.reason.job_ended


Outcome = Succeeded | Stopped


def _duration(value: timedelta | str | None, what: str) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        parsed = value
    else:
        try:
            parsed = parse_duration(value)
        except DurationError as exc:
            raise WatchError(f"{what}: {exc}") from None
    if parsed is not None and parsed <= timedelta(0):
        raise WatchError(f"{what} must be longer than zero")
    return parsed


class Watch:
    """One operation: created on first `run()`, resumed on later ones (its deadline and budget are kept)."""

    def __init__(
        self,
        contract: Contract | str | Path,
        job_id: str | None = None,
        *,
        home: str | Path | None = None,
        store: Store | None = None,
        deadline: timedelta | str | None = None,
        max_requests: int | None = None,
        operation_id: str | None = None,
        on_progress: Callable[[StepResult], None] | None = None,
        vars: Mapping[str, str] | None = None,
        status_url: str | None = None,
    ) -> None:
        """`contract` is a Contract, a path, or a shipped contract's name (`pollwarden contracts`); `vars` gives
        its [vars]; `status_url` is a status URL the provider returned (a contract with status_url_handles)."""
        if vars is not None and (
            not isinstance(vars, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in vars.items())
        ):
            raise WatchError('vars must be a mapping of names to strings, like vars={"repo": "acme/deploy"}')
        if isinstance(contract, Contract):
            if vars:
                raise WatchError("vars apply to a contract given by name or path; this Contract is already built")
            self.contract = contract
        else:
            try:
                if isinstance(contract, Path):
                    self.contract = load_contract(contract.expanduser(), vars)
                else:
                    self.contract = resolve_contract(contract, vars)
            except ContractError as exc:
                raise WatchError(str(exc)) from None
        if self.contract.approval != "none":
            raise WatchError(
                f"contract {self.contract.name!r} asks for agent approvals (approval = {self.contract.approval!r});"
                " in-process code holds the credential itself and cannot be gated, so watch it through"
                ' `pollwarden mcp` (or set approval = "none" if a person\'s approval is not needed)'
            )
        if not self.contract.safe_status:
            raise WatchError(
                f"contract {self.contract.name!r} declares safe_status = false: its status request is an action,"
                " so pollwarden will not repeat it"
            )
        if job_id is None and operation_id is None and status_url is None:
            raise WatchError("give a job_id (or a status_url) to start a watch, or the operation_id of one to resume")
        if operation_id is not None and (problem := operation_id_problem(operation_id)):
            raise WatchError(f"operation_id {operation_id!r}: {problem}")
        self.limits = Limits(deadline=_duration(deadline, "deadline"), max_requests=max_requests)
        self.status_url = status_url
        # Admission's own checks, before anything is opened: the same words as every other interface.
        probe = WatchRequest(self.contract, job_id, operation_id, self.limits, status_location=status_url)
        if (refused := check(probe)) is not None:
            raise WatchError(f"cannot watch: {refused.message_for(_NAMES)}")
        self.job_id = probe.job_id
        self.operation_id = operation_id
        self._home = home
        self._store = store
        self._on_progress = on_progress

    def run(self) -> Outcome:
        """Watch until a validated result or a reasoned stop; blocks, sleeping between polls with no lease."""
        # What only a running watch needs is imported here, on its first run: the engine and its events, the
        # status client, the store (and with it the audit crypto). `import pollwarden` and building a Watch,
        # which checks the contract and the limits with the core alone, load none of them.
        from .engine import AdmissionError, Engine
        from .home import resolve_home
        from .http import CredentialError, StatusClient, resolve_secret
        from .operating import HomeError, open_store
        from .store.owner import process_owner

        try:
            secret = resolve_secret(self.contract)
        except CredentialError as exc:
            raise WatchError(str(exc)) from None
        own = self._store is None
        if self._store is not None:
            store = self._store
        else:
            try:
                store = open_store(resolve_home(str(self._home) if self._home is not None else None))
            except HomeError as exc:
                raise WatchError(str(exc)) from None
        try:
            engine = Engine(store, owner=process_owner("api"), clock=utcnow)
            request = WatchRequest(
                self.contract,
                self.job_id,
                self.operation_id,
                self.limits,
                by="python api",
                credential=secret,
                status_location=self.status_url,
            )
            try:
                admitted = engine.admit(request)
            except AdmissionError as exc:
                raise WatchError(f"cannot watch: {exc}") from None
            self.operation_id = admitted.record.operation_id  # a later run() resumes this operation
            with StatusClient(self.contract, secret, clock=utcnow) as client:
                final = engine.run(self.contract, client, admitted.record.operation_id, on_progress=self._on_progress)
            return outcome_of(store, final)
        finally:
            if own:
                store.close()


def outcome_of(store: Store, record: OperationRecord) -> Outcome:
    if record.phase is Phase.SUCCEEDED:
        return Succeeded(record.operation_id, record.result, record)
    assert record.reason is not None, "a final record that did not succeed carries its stop reason"
    open_requests = [d.request for d in store.decisions(record.operation_id, open_only=True)]
    return Stopped(record.operation_id, record.reason, open_requests[-1] if open_requests else None, record)


def watch_sync(
    contract: Contract | str | Path,
    job_id: str | None = None,
    *,
    home: str | Path | None = None,
    store: Store | None = None,
    deadline: timedelta | str | None = None,
    max_requests: int | None = None,
    operation_id: str | None = None,
    vars: Mapping[str, str] | None = None,
    status_url: str | None = None,
) -> Outcome:
    """`Watch(...).run()` in one call."""
    return Watch(
        contract,
        job_id,
        home=home,
        store=store,
        deadline=deadline,
        max_requests=max_requests,
        operation_id=operation_id,
        vars=vars,
        status_url=status_url,
    ).run()


async def watch(
    contract: Contract | str | Path,
    job_id: str | None = None,
    *,
    home: str | Path | None = None,
    store: Store | None = None,
    deadline: timedelta | str | None = None,
    max_requests: int | None = None,
    operation_id: str | None = None,
    vars: Mapping[str, str] | None = None,
    status_url: str | None = None,
) -> Outcome:
    """The same watch without blocking the event loop: it runs on a worker thread and is awaited here.

    Cancelling the awaiting task does not stop the thread mid-request; the operation stays durable and can be
    resumed with its operation_id (its deadline and budget are kept).
    """
    import asyncio  # here, not at the top: its caller runs a loop, so it is loaded; `watch_sync`'s caller may not

    prepared = Watch(
        contract,
        job_id,
        home=home,
        store=store,
        deadline=deadline,
        max_requests=max_requests,
        operation_id=operation_id,
        vars=vars,
        status_url=status_url,
    )
    return await asyncio.to_thread(prepared.run)
