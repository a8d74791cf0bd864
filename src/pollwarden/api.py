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

import asyncio
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from .core.contract import Contract, ContractError, load_contract
from .core.durations import DurationError, format_duration, format_rfc3339, parse_duration
from .core.escalation import DecisionRequest
from .core.reasons import Phase, StopReason
from .core.record import OPERATION_ID, OperationRecord, new_record
from .home import resolve_home
from .http import CredentialError, StatusClient, resolve_secret
from .operating import HomeError, open_store
from .store.base import OperationExists, Store
from .store.owner import process_owner
from .watch import StepResult, Watcher, utcnow

__all__ = ["Outcome", "Stopped", "Succeeded", "Watch", "WatchError", "watch", "watch_sync"]


class WatchError(ValueError):
    """A watch that cannot start or resume as asked; nothing was sent. The message says what to change."""


@dataclass(frozen=True)
class Succeeded:
    """The provider reported success and every field the next action needs passed validation (R17)."""

    operation_id: str
    result: str
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
    ) -> None:
        if isinstance(contract, Contract):
            self.contract = contract
        else:
            try:
                self.contract = load_contract(Path(contract).expanduser())
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
        if job_id is None and operation_id is None:
            raise WatchError("give a job_id to start a watch, or the operation_id of one to resume")
        if job_id is not None and (
            not job_id.strip() or len(job_id) > 512 or any(not ch.isprintable() for ch in job_id)
        ):
            raise WatchError("job_id must be the provider's job id: non-empty, at most 512 printable characters")
        if operation_id is not None and not OPERATION_ID.match(operation_id):
            raise WatchError(f"operation_id {operation_id!r}: use 1-128 letters, digits, '.', '_', ':' or '-'")
        if max_requests is not None and (isinstance(max_requests, bool) or max_requests < 1):
            raise WatchError("max_requests must be at least 1")
        self.job_id = job_id
        self.deadline = _duration(deadline, "deadline")
        self.max_requests = max_requests
        self.operation_id = operation_id or self._new_id()
        self._home = home
        self._store = store
        self._on_progress = on_progress

    def _new_id(self) -> str:
        prefix = re.sub(r"[^A-Za-z0-9._:-]", "-", self.contract.name)[:40].strip("-.:_") or "op"
        if not prefix[0].isalnum():
            prefix = "op"
        return f"{prefix}-{utcnow().strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"

    def _prepare(self, store: Store) -> OperationRecord:
        now = utcnow()
        stored = store.get(self.operation_id)
        if stored is None:
            if self.job_id is None:
                raise WatchError(f"no operation {self.operation_id!r} to resume; give a job_id to start one")
            record = new_record(
                self.contract,
                operation_id=self.operation_id,
                job_id=self.job_id,
                now=now,
                deadline=self.deadline,
                max_requests=self.max_requests,
                useful_for=self.contract.escalation.useful_for,
            )
            try:
                store.create(
                    record,
                    self.contract.source_text,
                    {
                        **record.summary(),
                        "request_fingerprint": record.request_fingerprint,
                        "contract_fingerprint": record.contract_fingerprint,
                        "expected_terminal": list(record.expected_terminal),
                        "created_by": "python api",
                    },
                )
            except OperationExists:
                return self._prepare(store)
            return record
        record = stored.record
        problems = []
        if self.job_id is not None and self.job_id != record.job_id:
            problems.append(f"it watches job {record.job_id}, not {self.job_id}")
        if self.contract.fingerprint() != record.contract_fingerprint:
            problems.append(f"it was created with another version of contract {self.contract.name!r}")
        if self.deadline is not None and record.created_at + self.deadline > record.deadline_at:
            problems.append(f"deadline {format_duration(self.deadline)} would move it past"
                            f" {format_rfc3339(record.deadline_at)}")  # fmt: skip
        if self.max_requests is not None and self.max_requests > record.plan.max_status_requests:
            problems.append(f"max_requests {self.max_requests} exceeds the approved {record.plan.max_status_requests}")
        if problems:
            store.append(self.operation_id, "resume_refused", {"why": "; ".join(problems)}, now)
            raise WatchError(
                f"cannot resume operation {self.operation_id}: " + "; ".join(problems) + ". Widening limits needs a"
                " person's decision (`pollwarden decide`)"
            )
        return record

    def run(self) -> Outcome:
        """Watch until a validated result or a reasoned stop; blocks, sleeping between polls with no lease."""
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
            record = self._prepare(store)
            with StatusClient(self.contract, secret, clock=utcnow) as client:
                watcher = Watcher(store, self.contract, client, owner=process_owner())
                final = watcher.run(record.operation_id, on_progress=self._on_progress)
            return outcome_of(store, final)
        finally:
            if own:
                store.close()


def outcome_of(store: Store, record: OperationRecord) -> Outcome:
    if record.phase is Phase.SUCCEEDED and record.result is not None:
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
) -> Outcome:
    """The same watch without blocking the event loop: it runs on a worker thread and is awaited here.

    Cancelling the awaiting task does not stop the thread mid-request; the operation stays durable and can be
    resumed with its operation_id (its deadline and budget are kept).
    """
    prepared = Watch(
        contract,
        job_id,
        home=home,
        store=store,
        deadline=deadline,
        max_requests=max_requests,
        operation_id=operation_id,
    )
    return await asyncio.to_thread(prepared.run)
