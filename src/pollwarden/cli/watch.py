"""`pollwarden watch`: one job until a validated result or a reasoned stop, with progress a person can read."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, ClassVar, TextIO

from ..core.contract import Contract
from ..core.decide import Decision
from ..core.durations import format_duration, format_rfc3339
from ..core.escalation import DecisionRequest
from ..core.reasons import Phase
from ..core.record import OPERATION_ID, OperationRecord, new_record
from ..http import CredentialError, StatusClient, resolve_secret
from ..notify import deliver
from ..shown import shown
from ..store.base import OperationExists, Stored
from ..store.open import AnyStore
from ..store.sqlite import process_owner
from ..watch import Done, NotYet, Polled, StepResult, Watcher, utcnow
from .common import (
    EXIT_ESCALATED,
    EXIT_JOB_ENDED,
    EXIT_OK,
    UsageError,
    _duration,
    _load_contract,
    _open_store,
    shown_request,
)


def exit_code(record: OperationRecord) -> int:
    if record.phase is Phase.SUCCEEDED:
        return EXIT_OK
    if record.reason is not None and record.reason.job_ended:
        return EXIT_JOB_ENDED
    return EXIT_ESCALATED


# -- watch ------------------------------------------------------------------------------------------


def _resume_problems(args: argparse.Namespace, contract: Contract, stored: Stored) -> list[str]:
    """Widening a limit is new authority (R41): only an audited approval may grant it."""
    record = stored.record
    plan = record.plan
    problems: list[str] = []
    if args.job is not None and args.job != record.job_id:
        problems.append(f"operation {record.operation_id} watches job {record.job_id}, not {args.job}")
    if contract.fingerprint() != record.contract_fingerprint:
        problems.append(
            f"contract {contract.name!r} differs from the one operation {record.operation_id} was created with"
            " (states, fields, status_url or credential); resume it with the original contract"
        )
    deadline = _duration(args.deadline, "--deadline")
    if deadline is not None and record.created_at + deadline > plan.deadline_at:
        problems.append(f"--deadline {args.deadline} would move the deadline past {format_rfc3339(plan.deadline_at)}")
    if args.max_requests is not None and args.max_requests > plan.max_status_requests:
        problems.append(f"--max-requests {args.max_requests} exceeds the approved {plan.max_status_requests}")
    if args.max_transport_failures is not None and args.max_transport_failures > plan.max_transport_failures:
        problems.append(
            f"--max-transport-failures {args.max_transport_failures} exceeds the approved {plan.max_transport_failures}"
        )
    for flag, value, stored_value in (
        ("--base-delay", args.base_delay, plan.schedule.base_delay),
        ("--max-delay", args.max_delay, plan.schedule.max_delay),
    ):
        parsed = _duration(value, flag)
        if parsed is not None and parsed != stored_value:
            problems.append(f"{flag} {value} differs from the operation's {format_duration(stored_value)}")
    return problems


def _narrowed(args: argparse.Namespace, record: OperationRecord) -> OperationRecord:
    plan = record.plan
    deadline = _duration(args.deadline, "--deadline")
    new_plan = plan.__class__(
        deadline_at=min(plan.deadline_at, record.created_at + deadline) if deadline else plan.deadline_at,
        max_status_requests=min(plan.max_status_requests, args.max_requests)
        if args.max_requests is not None
        else plan.max_status_requests,
        max_transport_failures=min(plan.max_transport_failures, args.max_transport_failures)
        if args.max_transport_failures is not None
        else plan.max_transport_failures,
        max_rate_limited=plan.max_rate_limited,
        schedule=plan.schedule,
        not_found_grace=plan.not_found_grace,
    )
    return record if new_plan == plan else record.evolve(plan=new_plan)


def _prepare(args: argparse.Namespace, store: AnyStore, contract: Contract, now: datetime) -> OperationRecord:
    operation_id = args.operation or f"{contract.name}-{now.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    if not OPERATION_ID.match(operation_id):
        raise UsageError(
            f"--operation {operation_id!r}: use 1-128 letters, digits, '.', '_', ':' or '-', starting with a"
            " letter or digit"
        )
    stored = store.get(operation_id)
    if stored is not None:
        problems = _resume_problems(args, contract, stored)
        if problems:
            store.append(operation_id, "resume_refused", {"why": "; ".join(problems)}, now)
            raise UsageError(
                "cannot resume: " + "; ".join(problems) + ". Widening limits is an approval: it needs a"
                " decision by a person (see `pollwarden decide`), not a flag"
            )
        narrowed = _narrowed(args, stored.record)
        if narrowed is not stored.record:
            claimed = store.claim(operation_id, process_owner(), now, timedelta(seconds=30))
            if claimed is None:
                raise UsageError(f"operation {operation_id} is busy in another process; try again in a moment")
            lease, current = claimed
            narrowed = _narrowed(args, current)
            store.write(lease, narrowed, [("limits_narrowed", narrowed.summary())], now, release=True)
        return narrowed
    if args.job is None:
        raise UsageError("--job is required to start a new operation")
    if not args.job.strip() or len(args.job) > 512 or any(ord(ch) < 32 or ord(ch) == 127 for ch in args.job):
        raise UsageError(
            "--job must be the provider's job id: non-empty, at most 512 characters, no control characters"
        )
    record = new_record(
        contract,
        operation_id=operation_id,
        job_id=args.job,
        now=now,
        deadline=_duration(args.deadline, "--deadline"),
        max_requests=args.max_requests if args.max_requests else None,
        max_transport_failures=args.max_transport_failures,
        base_delay=_duration(args.base_delay, "--base-delay"),
        max_delay=_duration(args.max_delay, "--max-delay"),
        useful_for=_duration(args.useful_for, "--useful-for") or contract.escalation.useful_for,
    )
    if record.plan.schedule.max_delay < record.plan.schedule.base_delay:
        raise UsageError("--max-delay must not be shorter than --base-delay")
    if args.max_requests == 0:
        raise UsageError("--max-requests must be at least 1")
    if args.max_transport_failures == 0:
        raise UsageError("--max-transport-failures must be at least 1 (a budget of 1 stops at the first failure)")
    try:
        store.create(
            record,
            contract.source_text,
            {
                **record.summary(),
                "request_fingerprint": record.request_fingerprint,
                "contract_fingerprint": record.contract_fingerprint,
                "expected_terminal": list(record.expected_terminal),
            },
        )
    except OperationExists:
        # Another process created it a moment ago: this one resumes it under the same checks.
        return _prepare(args, store, contract, now)
    return record


class Progress:
    """One line per decision; on a terminal also a live countdown that is overwritten in place."""

    watching: ClassVar[str | None] = None
    """The operation the last step was about: an interrupted `watch` names it in its resume hint."""

    def __init__(self, out: TextIO, *, live: bool, quiet: bool) -> None:
        self.out = out
        self.live = live
        self.quiet = quiet
        self._dirty = False

    def _clear(self) -> None:
        if self._dirty:
            self.out.write("\r\033[K")
            self._dirty = False

    def __call__(self, result: StepResult) -> None:
        Progress.watching = (result.decision.record if isinstance(result, Polled) else result.record).operation_id
        if self.quiet:
            return
        now = utcnow()
        if isinstance(result, Polled):
            self._clear()
            self.out.write(_decision_line(result.decision, now) + "\n")
            self.out.flush()
            return
        if not self.live or isinstance(result, Done):
            self._clear()
            return
        record = result.record
        until = result.until if isinstance(result, NotYet) else result.retry_at
        what = "next poll" if isinstance(result, NotYet) else "another owner is polling; retry"
        self.out.write(
            f"\r\033[K{shown(record.job_id)}: {shown(record.last_state or 'not yet seen')} · requests"
            f" {record.status_requests_used}/{record.plan.max_status_requests} · {what} in"
            f" {_left(until, now)} · deadline in {_left(record.deadline_at, now)}"
        )
        self.out.flush()
        self._dirty = True


def _left(moment: datetime, now: datetime) -> str:
    return format_duration(timedelta(seconds=max(0, round((moment - now).total_seconds()))))


def _decision_line(decision: Decision, now: datetime) -> str:
    record = decision.record
    seen = f"HTTP {record.last_http_status}" if record.last_http_status else "no response"
    if record.last_state and record.last_http_status and 200 <= record.last_http_status < 300:
        seen = f"state {shown(record.last_state)}"
    budget = f"{record.status_requests_used}/{record.plan.max_status_requests}"
    stamp = now.strftime("%H:%M:%S")
    if decision.next_poll_at is not None and not record.is_final:
        source = decision.delay_source.value if decision.delay_source else "?"
        return f"{stamp} {seen} · requests {budget} · next poll {decision.next_poll_at.strftime('%H:%M:%S')} ({source})"
    if record.phase is Phase.SUCCEEDED:
        return f"{stamp} {seen} · requests {budget} · succeeded: {shown(record.result)}"
    return f"{stamp} {seen} · requests {budget} · stopped: {record.reason.value if record.reason else '?'}"


def _final_json(record: OperationRecord) -> dict[str, Any]:
    summary = record.summary()
    summary["outcome"] = "succeeded" if record.phase is Phase.SUCCEEDED else "stopped"
    return summary


def cmd_watch(args: argparse.Namespace) -> int:
    contract = _load_contract(args.contract)
    if not contract.safe_status:
        raise UsageError(
            f"contract {contract.name!r} declares safe_status = false: its status request is an action"
            " (it changes state, charges or refreshes something), so pollwarden will not repeat it"
        )
    for flag in ("deadline", "base_delay", "max_delay"):
        _duration(getattr(args, flag), "--" + flag.replace("_", "-"))
    try:
        secret = resolve_secret(contract)
    except CredentialError as exc:
        raise UsageError(str(exc)) from None
    store = _open_store(args.home)
    try:
        record = _prepare(args, store, contract, utcnow())
        out = sys.stdout
        if not args.json:
            out.write(
                f"operation {record.operation_id}: job {record.job_id} via {contract.name}, deadline"
                f" {format_rfc3339(record.deadline_at)}, budget {record.plan.max_status_requests} requests\n"
            )
            out.flush()
        progress = Progress(out, live=out.isatty(), quiet=args.json)
        with StatusClient(contract, secret, clock=utcnow) as client:
            watcher = Watcher(store, contract, client, owner=process_owner(), notify=_notifier(store, contract))
            try:
                final = watcher.run(record.operation_id, on_progress=progress, tick=1.0 if progress.live else None)
            except KeyboardInterrupt:
                progress(Done(record))
                print(
                    f"interrupted; the record is kept. Resume with: pollwarden watch --contract {args.contract}"
                    f" --operation {record.operation_id}",
                    file=sys.stderr,
                )
                return 130
        open_decisions = store.decisions(final.operation_id, open_only=True) if final.is_final else []
        if args.json:
            summary = _final_json(final)
            summary["decision"] = open_decisions[-1].request.to_json() if open_decisions else None
            print(json.dumps(summary, sort_keys=True))
        else:
            _print_outcome(final, out)
            if open_decisions:
                request = open_decisions[-1].request
                out.write("\n" + shown_request(request).render() + "\n")
                out.write(f"Decide with: pollwarden decide {request.decision_id} --option N --by YOUR_NAME\n")
        return exit_code(final)
    finally:
        store.close()


def _notifier(store: AnyStore, contract: Contract) -> Callable[[DecisionRequest], None]:
    """After an escalation is committed, tell someone; the outcome of telling is audited too."""

    def notify(request: DecisionRequest) -> None:
        delivery = deliver(contract, request)
        if delivery is not None:
            kind = "notified" if delivery.ok else "notify_failed"
            store.append(
                request.operation_id, kind, {"decision_id": request.decision_id, **delivery.to_json()}, utcnow()
            )

    return notify


def _print_outcome(record: OperationRecord, out: TextIO) -> None:
    if record.phase is Phase.SUCCEEDED:
        out.write(f"succeeded: job {shown(record.job_id)}, result {shown(record.result)}\n")
        return
    reason = record.reason.value if record.reason else "?"
    label = "job ended" if record.reason and record.reason.job_ended else "stopped, needs a decision"
    out.write(f"{label}: {reason}: {shown(record.detail)}\n")
    out.write(
        f"  last state {shown(record.last_state)}, last HTTP {record.last_http_status},"
        f" requests {record.status_requests_used} of {record.plan.max_status_requests},"
        f" transport failures {record.transport_failures_used} of {record.plan.max_transport_failures}\n"
    )
    if record.provider_error:
        out.write(f"  provider error: {shown(record.provider_error)}\n")
