"""Admission: whether a request to watch creates an operation, resumes one, narrows it, or is refused.

One pure rule for every interface (`watch`, `enqueue`, the Python API, the MCP server's `start_watch`): the
drivers parse their flags or arguments into a `WatchRequest`, hand it here with what the store holds, and carry
out the answer. Authority only ever shrinks here: a resume may narrow a limit, never widen one, and a job that
already has an operation gets that operation back, never a fresh budget (widening is a person's decision).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from .contract.parse import Contract, job_path_problem
from .durations import format_duration, format_rfc3339
from .identity import NotOneJob, canonical_job, canonical_status_url
from .ids import (
    MAX_JOB_ID_CHARS,
    job_id_problem,
    new_operation_id,
    operation_id_problem,
    submission_operation_id,
)
from .learnt import Learnt
from .learnt_first import place_first
from .record import OperationRecord, new_record
from .scrub import Scrubber

MAX_COUNT = 1_000_000
"""The largest request or failure budget anyone may ask for: far beyond any real watch, far below overflow."""


class HeldSecret(Protocol):
    """A credential the driver holds (`pollwarden.transport.credentials.Credential`): the core only asks whether text
    holds it."""

    def found_in(self, text: str) -> bool: ...


@dataclass(frozen=True)
class Limits:
    """What the caller asks for; None means the contract's value (for an agent: its `[agent]` cap)."""

    deadline: timedelta | None = None
    max_requests: int | None = None
    max_transport_failures: int | None = None
    base_delay: timedelta | None = None
    max_delay: timedelta | None = None
    useful_for: timedelta | None = None
    lag_target: timedelta | None = None
    """The p95 detection lag the contract's learnt schedule keeps for this operation (`[schedule] lag_target`)."""


@dataclass(frozen=True)
class WatchRequest:
    contract: Contract
    job_id: str | None
    operation_id: str | None = None
    limits: Limits = field(default_factory=Limits)
    by: str = "cli"
    """Who asks, as the `created` event records it: "cli", "enqueue", "python api", "agent session ..."."""
    agent: bool = False
    """An agent asks: the contract's `[agent]` caps bound what it may ask for, and are its defaults."""
    status_location: str | None = None
    request_fingerprint: str | None = None
    credential: str | HeldSecret | None = field(default=None, repr=False)
    """The credential this watch will send, when the caller holds it: a job id that contains it is refused (it
    would be stored and sent in the status URL). Never stored, never shown."""

    created_before: int | None = None
    """For an agent: how many operations its session has created under this contract already (the driver counts
    them); a request that would create one more than `[agent].max_operations` is refused. None: not counted."""
    identity_problems: tuple[Problem, ...] = field(default=(), init=False, repr=False, compare=False)
    """Why the job as given cannot be read as one job (`core.identity`): refused by `check`."""

    def __post_init__(self) -> None:
        # One job, one identity: the job id and status URL in the one spelling that is stored, looked up and
        # sent, before anything else reads them (`repeated`, the store's lookup of the job, `admit`).
        canonical = canonical_job(self.contract, self.job_id, self.status_location)
        object.__setattr__(self, "job_id", canonical.job_id)
        object.__setattr__(self, "status_location", canonical.status_location)
        problems = tuple(Problem(name, text) for name, text in canonical.problems)
        object.__setattr__(self, "identity_problems", problems)


def status_location_problem(contract: Contract, url: object) -> str | None:
    """Why this status URL cannot be polled for `contract`, or None: the one place the origin rule lives, so a
    URL handed in by a person, an API caller or an agent never takes the credential anywhere else."""
    if not contract.status_url_handles:
        return _takes_no_status_url(contract)
    return status_url_problem(contract, url)


def _takes_no_status_url(contract: Contract) -> str:
    return (
        f"contract {contract.name!r} does not take a status URL (it does not declare status_url_handles = true);"
        " give the job id instead"
    )


def status_url_problem(contract: Contract, url: object) -> str | None:
    """The origin rule alone, for a status URL however it arrived (given, or named by a submission's answer)."""
    try:
        canonical_status_url(contract, url)
    except NotOneJob as exc:
        return str(exc)
    return None


class Refusal(StrEnum):
    INVALID = "invalid_argument"
    """The request itself is malformed: nothing is looked up, nothing is audited."""
    LIMIT = "limit_exceeded"
    """More than the contract lets this caller ask for."""
    CONFLICT = "conflict"
    """It contradicts an existing operation (another job, another contract, wider limits): audited on it."""
    NOT_INSTALLED = "contract_not_installed"
    """The contract version is not installed in the store (`engine.installed`): nothing is created."""


@dataclass(frozen=True)
class Create:
    record: OperationRecord
    event: dict[str, Any]
    """The `created` audit payload: one shape whoever creates."""


@dataclass(frozen=True)
class Resume:
    record: OperationRecord
    reused_job: bool = False
    """True when the caller named no operation and got the job's existing one back."""


@dataclass(frozen=True)
class Narrow:
    record: OperationRecord
    """The stored record the narrowing applies to; the driver re-applies `narrow` under the lease."""
    narrowed: OperationRecord
    reused_job: bool = False


@dataclass(frozen=True)
class Problem:
    """One reason for a refusal; `field` is named in each interface's own words (`--max-requests`, `max_requests`)."""

    field: str | None
    text: str
    allowed: str | int | None = None
    """For a limit an agent may not exceed: the most it may ask for."""

    def render(self, names: Mapping[str, str]) -> str:
        return self.text if self.field is None else f"{names.get(self.field, self.field)} {self.text}"


@dataclass(frozen=True)
class Refuse:
    kind: Refusal
    problems: tuple[Problem, ...]
    operation_id: str | None = None
    """The existing operation the refusal is audited on (`resume_refused`), when there is one."""

    def message_for(self, names: Mapping[str, str]) -> str:
        return "; ".join(problem.render(names) for problem in self.problems)

    @property
    def message(self) -> str:
        return self.message_for({})


Admission = Create | Resume | Narrow | Refuse


def created_event(record: OperationRecord, by: str) -> dict[str, Any]:
    return {
        **record.summary(),
        "request_fingerprint": record.request_fingerprint,
        "contract_fingerprint": record.contract_fingerprint,
        "expected_terminal": list(record.expected_terminal),
        "created_by": by,
    }


def _limit_problems(request: WatchRequest) -> tuple[list[Problem], list[Problem]]:
    """(malformed, beyond the agent cap) for the asked limits alone."""
    limits = request.limits
    bad: list[Problem] = []
    durations = {
        "deadline": limits.deadline,
        "base_delay": limits.base_delay,
        "max_delay": limits.max_delay,
        "useful_for": limits.useful_for,
        "lag_target": limits.lag_target,
    }
    for name, duration in durations.items():
        if duration is not None and duration <= timedelta(0):
            bad.append(Problem(name, "must be longer than zero"))
    counts = {"max_requests": limits.max_requests, "max_transport_failures": limits.max_transport_failures}
    for name, count in counts.items():
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT):
            bad.append(Problem(name, f"must be a whole number from 1 to {MAX_COUNT}"))
    schedule = request.contract.schedule
    base = limits.base_delay or schedule.base_delay
    if (limits.base_delay or limits.max_delay) and (limits.max_delay or schedule.max_delay) < base:
        bad.append(Problem("max_delay", "must not be shorter than the base delay"))
    deadline = granted_limits(request)[0] or request.contract.limits.deadline
    if limits.useful_for is not None and timedelta(0) < deadline < limits.useful_for:
        bad.append(
            Problem(
                "useful_for",
                f"{format_duration(limits.useful_for)} is longer than the deadline {format_duration(deadline)},"
                " which would end the watch first; ask for a shorter window or a longer deadline",
            )
        )
    if not bad:  # checked before any store is opened: a new watch, or a resume asking for such a deadline
        bad.extend(
            first_check_problems(
                request.contract, deadline, limits.useful_for or request.contract.escalation.useful_for
            )
        )
    over: list[Problem] = []
    if request.agent:
        contract = request.contract
        if limits.deadline is not None and limits.deadline > contract.agent_max_deadline:
            over.append(
                Problem(
                    "deadline",
                    f"{format_duration(limits.deadline)} exceeds [agent].max_deadline"
                    f" {format_duration(contract.agent_max_deadline)} of contract {contract.name!r}",
                    allowed=format_duration(contract.agent_max_deadline),
                )
            )
        if limits.max_requests is not None and limits.max_requests > contract.agent_max_requests:
            over.append(
                Problem(
                    "max_requests",
                    f"{limits.max_requests} exceeds [agent].max_requests {contract.agent_max_requests}"
                    f" of contract {contract.name!r}",
                    allowed=contract.agent_max_requests,
                )
            )
    return bad, over


def first_check_problems(contract: Contract, deadline: timedelta, useful_for: timedelta | None) -> list[Problem]:
    """Why a new operation with this deadline (and usefulness window) could never send its first status request:
    `[schedule].first_check` falls at or after it, and no wait outlasts the deadline, so the watch would only wait
    to stop. Refused before anything is created, naming both durations (docs/contracts.md, "first_check")."""
    first = contract.schedule.first_check
    problems: list[Problem] = []
    for name, limit, what in (("deadline", deadline, "the deadline"), ("useful_for", useful_for, "the window")):
        if limit is not None and limit <= first:
            problems.append(
                Problem(
                    name,
                    f"{format_duration(limit)} is not longer than contract {contract.name!r}'s first_check"
                    f" {format_duration(first)} ([schedule]): its first status request would fall at or after"
                    f" {what}, so nothing could be sent; ask for more than {format_duration(first)}",
                )
            )
    return problems


def narrow(record: OperationRecord, limits: Limits) -> OperationRecord:
    """The record with every asked limit that is tighter applied; looser ones are `widening`'s business.

    The record itself comes back when nothing is tighter, so a caller can tell a plain resume by identity."""
    plan = record.plan
    deadline_at, max_requests, max_failures = plan.deadline_at, plan.max_status_requests, plan.max_transport_failures
    useful_until = plan.useful_until
    if limits.deadline is not None and record.created_at + limits.deadline < deadline_at:
        deadline_at = record.created_at + limits.deadline
    if limits.max_requests is not None and limits.max_requests < max_requests:
        max_requests = max(limits.max_requests, 1)
    if limits.max_transport_failures is not None and limits.max_transport_failures < max_failures:
        max_failures = limits.max_transport_failures
    if limits.useful_for is not None:
        useful = record.created_at + limits.useful_for
        if useful_until is None or useful < useful_until:
            useful_until = useful
    tighter = replace(
        plan,
        deadline_at=deadline_at,
        max_status_requests=max_requests,
        max_transport_failures=max_failures,
        useful_until=useful_until,
    )
    return record if tighter == plan else record.with_plan(tighter)


def widening(record: OperationRecord, limits: Limits) -> list[Problem]:
    """Every asked limit that would give the operation more authority than it was granted."""
    plan = record.plan
    problems: list[Problem] = []
    if limits.deadline is not None and record.created_at + limits.deadline > plan.deadline_at:
        problems.append(
            Problem(
                "deadline",
                f"{format_duration(limits.deadline)} would move the deadline past {format_rfc3339(plan.deadline_at)}",
            )
        )
    if limits.max_requests is not None and limits.max_requests > plan.max_status_requests:
        problems.append(
            Problem("max_requests", f"{limits.max_requests} exceeds the approved {plan.max_status_requests}")
        )
    if limits.max_transport_failures is not None and limits.max_transport_failures > plan.max_transport_failures:
        problems.append(
            Problem(
                "max_transport_failures",
                f"{limits.max_transport_failures} exceeds the approved {plan.max_transport_failures}",
            )
        )
    useful = plan.useful_until
    if limits.useful_for is not None and useful is not None and record.created_at + limits.useful_for > useful:
        problems.append(
            Problem(
                "useful_for",
                f"{format_duration(limits.useful_for)} would move the usefulness window past {format_rfc3339(useful)}",
            )
        )
    delays = {
        "base_delay": (limits.base_delay, plan.schedule.base_delay),
        "max_delay": (limits.max_delay, plan.schedule.max_delay),
        "lag_target": (limits.lag_target, plan.schedule.lag_target),
    }
    for name, (asked, stored) in delays.items():
        if asked is not None and asked != stored:
            problems.append(
                Problem(name, f"{format_duration(asked)} differs from the operation's {format_duration(stored)}")
            )
    return problems


def _resume(request: WatchRequest, existing: OperationRecord, *, reused_job: bool) -> Admission:
    problems: list[Problem] = []
    if request.job_id is not None and request.job_id != existing.job_id:
        problems.append(
            Problem(None, f"operation {existing.operation_id} watches job {existing.job_id}, not {request.job_id}")
        )
    if request.contract.fingerprint() != existing.contract_fingerprint:
        problems.append(
            Problem(
                None,
                f"contract {request.contract.name!r} differs from the one operation {existing.operation_id} was"
                " created with (states, fields, status_url or credential); resume it with the original contract",
            )
        )
    wider = widening(existing, request.limits)
    problems.extend(wider)
    if wider:
        problems.append(Problem(None, "more authority is an approval: a person grants it with `pollwarden decide`"))
    if problems:
        return Refuse(Refusal.CONFLICT, tuple(problems), existing.operation_id)
    narrowed = narrow(existing, request.limits)
    if narrowed is existing:
        return Resume(existing, reused_job=reused_job)
    return Narrow(existing, narrowed, reused_job=reused_job)


def held_secret(contract: Contract, credential: str | HeldSecret | None) -> HeldSecret | None:
    """The credential as something that can say whether a text holds it, in every form it is sent in. A
    caller admitting many requests builds it once and hands the same one to each."""
    if isinstance(credential, str):
        return Scrubber([credential], scheme=contract.auth.scheme if contract.auth else None)
    return credential or None


UNSAFE_STATUS_RULE = "unsafe_status"
"""The rule of the stop recorded when a worker claims an operation whose contract may not be polled at all."""


def watchable_problem(contract: Contract) -> str | None:
    """Why no operation of this contract may be polled, or None: its status request is an action (R22), which
    pollwarden never repeats. The one rule every interface asks before a watch, and the worker before a poll."""
    if contract.safe_status:
        return None
    return (
        f"contract {contract.name!r} declares safe_status = false: its status request is an action (it changes"
        " state, charges or refreshes something), so pollwarden will not repeat it"
    )


def check(request: WatchRequest) -> Refuse | None:
    """The part of admission that needs nothing stored: drivers call it before they open or query a store, so a
    malformed request creates nothing (not even a home) and never reaches a database as an unencodable string."""
    bad: list[Problem] = []
    if (unwatchable := watchable_problem(request.contract)) is not None:
        bad.append(Problem(None, unwatchable))
    if request.operation_id is not None and (problem := operation_id_problem(request.operation_id)):
        bad.append(Problem("operation_id", f"{request.operation_id}: {problem}"))
    if request.status_location is not None and not request.contract.status_url_handles:
        bad.append(Problem("status_location", _takes_no_status_url(request.contract)))
    else:
        bad.extend(problem for problem in request.identity_problems if problem.field == "status_location")
    held = held_secret(request.contract, request.credential)
    if request.status_location is not None and held and held.found_in(request.status_location):
        bad.append(Problem("status_location", "contains the credential; give the URL the provider returned"))
    if request.job_id is not None and (problem := job_id_problem(request.job_id)):
        bad.append(Problem("job_id", problem))
    elif (
        request.job_id is not None
        and request.status_location is None
        and request.contract.job_is_path
        and (problem := job_path_problem(request.job_id))
    ):
        bad.append(Problem("job_id", f"{problem} (contract {request.contract.name!r} places it in the path)"))
    elif request.job_id is not None and held and held.found_in(request.job_id):
        bad.append(Problem("job_id", "contains the credential; give the provider's job id"))
    else:
        bad.extend(problem for problem in request.identity_problems if problem.field == "job_id")
    malformed, over = _limit_problems(request)
    bad.extend(malformed)
    if bad:
        return Refuse(Refusal.INVALID, tuple(bad))
    if over:
        return Refuse(Refusal.LIMIT, (*over, Problem(None, "an agent may ask for less, never more")))
    return None


def repeated(requests: Sequence[WatchRequest]) -> list[tuple[int, int, Problem]]:
    """(index, earlier index, why) for every request that names the job (under the same contract name) or the
    operation of an earlier one: one batch must not ask twice for one thing, since the second would be admitted
    against what the first is about to create, and which of the two wins would be an accident of order."""
    jobs: dict[tuple[str, str], int] = {}
    operations: dict[str, int] = {}
    found: list[tuple[int, int, Problem]] = []
    for index, request in enumerate(requests):
        operation, job = request.operation_id, request.job_id
        if operation is not None and (earlier := operations.setdefault(operation, index)) != index:
            found.append((index, earlier, Problem("operation_id", f"{operation} is given twice")))
        elif job is not None and (earlier := jobs.setdefault((request.contract.name, job), index)) != index:
            found.append((index, earlier, Problem("job_id", "is given twice")))
    return found


def check_many(requests: Sequence[WatchRequest], where: Callable[[int], str]) -> list[tuple[int, Refuse]]:
    """`check` for each request of a batch, and `repeated`: (index, refusal) for each refused one, in order.

    `where` names a request's place as the caller's interface does ("line 7"), for the refusal of a repeat."""
    refused: dict[int, list[Problem]] = {}
    kinds: dict[int, Refusal] = {}
    for index, request in enumerate(requests):
        if (refusal := check(request)) is not None:
            refused[index], kinds[index] = list(refusal.problems), refusal.kind
    for index, earlier, problem in repeated(requests):
        text = f"{problem.text} (also at {where(earlier)}); give each once"
        refused.setdefault(index, []).append(replace(problem, text=text))
        kinds.setdefault(index, Refusal.INVALID)
    return [(index, Refuse(kinds[index], tuple(refused[index]))) for index in sorted(refused)]


def granted_limits(request: WatchRequest) -> tuple[timedelta | None, int | None]:
    """The deadline and status request budget a new operation gets: what was asked, else the contract's (None);
    for an agent, its `[agent]` caps are the defaults. A submission's watch gets the same as a watch."""
    deadline, max_requests = request.limits.deadline, request.limits.max_requests
    if request.agent:
        deadline = deadline or request.contract.agent_max_deadline
        max_requests = max_requests or request.contract.agent_max_requests
    return deadline, max_requests


def operations_refused(request: WatchRequest) -> Refuse | None:
    """An agent's request that would create one operation more than its session may under the contract
    (`[agent].max_operations`); resumes never get here. The one rule for start_watch and submit_job alike."""
    if not request.agent or request.created_before is None:
        return None
    contract = request.contract
    cap = contract.agent_max_operations
    if request.created_before < cap:
        return None
    text = (
        f"{cap} reached: this agent session has created {request.created_before} operations of contract"
        f" {contract.name!r} ([agent].max_operations), and a job it has not watched yet would be one more. Watch"
        " one of those (the same job gets its operation back), or ask a person to start more"
    )
    return Refuse(Refusal.LIMIT, (Problem("max_operations", text, allowed=cap),))


def admit(
    request: WatchRequest,
    existing: OperationRecord | None,
    same_job: Sequence[OperationRecord],
    now: datetime,
    *,
    token: str,
    learnt: Learnt | None = None,
    u: float = 0.5,
) -> Admission:
    """The one admission rule.

    `existing` is the stored operation named by `request.operation_id` (None when there is none or no id was
    given); `same_job` are the stored operations of the same contract name and job id, newest first; `token` is
    the random part of a new operation id (handed in, so this stays pure). `learnt`: the contract's learnt model
    (`core.learnt`), which places a new operation's first check (jittered by the draw `u`) when it may learn.
    """
    refused = check(request)
    if refused is not None:
        return refused
    if existing is not None:
        return _resume(request, existing, reused_job=False)
    if request.job_id is None:
        return Refuse(Refusal.INVALID, (Problem("job_id", "is required to start a new operation"),))
    if same_job:
        earlier = same_job[0]
        if request.operation_id is not None:
            return Refuse(
                Refusal.CONFLICT,
                (
                    Problem(
                        None,
                        f"job {request.job_id} is already watched by operation {earlier.operation_id}; resume that"
                        " one (a second operation would be a fresh budget for the same job, which only a person's"
                        " decision may grant)",
                    ),
                ),
                earlier.operation_id,
            )
        return _resume(request, earlier, reused_job=True)
    if (capped := operations_refused(request)) is not None:
        return capped
    contract = request.contract
    limits = request.limits
    deadline, max_requests = granted_limits(request)
    record = new_record(
        contract,
        operation_id=request.operation_id or new_operation_id(contract.name, now, token),
        job_id=request.job_id,
        now=now,
        deadline=deadline,
        max_requests=max_requests,
        max_transport_failures=limits.max_transport_failures,
        base_delay=limits.base_delay,
        max_delay=limits.max_delay,
        lag_target=limits.lag_target,
        request_fingerprint=request.request_fingerprint,
        useful_for=limits.useful_for or contract.escalation.useful_for,
        status_location=request.status_location,
    )
    first = place_first(record, learnt, u)  # recorded with what placed it: `why` replays it
    return Create(first.record, {**created_event(first.record, request.by), **first.event_fields()})


__all__ = [
    "MAX_COUNT",
    "MAX_JOB_ID_CHARS",
    "Admission",
    "Create",
    "Limits",
    "Narrow",
    "Problem",
    "Refusal",
    "Refuse",
    "Resume",
    "WatchRequest",
    "admit",
    "check",
    "check_many",
    "created_event",
    "first_check_problems",
    "granted_limits",
    "held_secret",
    "job_id_problem",
    "narrow",
    "new_operation_id",
    "operation_id_problem",
    "operations_refused",
    "repeated",
    "status_location_problem",
    "status_url_problem",
    "submission_operation_id",
    "widening",
]
