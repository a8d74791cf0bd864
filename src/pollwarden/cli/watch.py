"""`pollwarden watch`: one job until a validated result or a reasoned stop, with progress a person can read."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, ClassVar, TextIO

from ..clock import utcnow
from ..core.admission import Limits, WatchRequest, operation_id_problem
from ..core.contract.parse import Contract
from ..core.contract.result import result_text
from ..core.decide import Decision
from ..core.durations import format_duration, format_moment
from ..core.reasons import Phase
from ..core.record import OperationRecord
from ..core.result_part import part_words
from ..core.words import checks_of, checks_used, delay_words, plural, stop_title
from ..engine import Engine, Polled, StepResult, Watching
from ..engine.installed import NotInstalled
from ..engine.preamble import Installing, Ready, Refused, admit, ready
from ..home.operating import HomeError, command_line, contract_of
from ..home.outbox import delivering
from ..report.progress import progress_of
from ..shown import shown
from ..store.base import Store
from ..store.bell import listening
from ..store.owner import process_owner
from ..transport.http import StatusClient
from .common import (
    EXIT_ESCALATED,
    EXIT_JOB_ENDED,
    EXIT_OK,
    UsageError,
    _duration,
    _load_contract,
    _open_store,
    shown_request,
    vars_of,
)
from .terminal import FittedOut, fit_middle


def exit_code(record: OperationRecord) -> int:
    if record.phase is Phase.SUCCEEDED:
        return EXIT_OK
    if record.reason is not None and record.reason.job_ended:
        return EXIT_JOB_ENDED
    return EXIT_ESCALATED


# -- watch ------------------------------------------------------------------------------------------


FLAGS = {
    "job_id": "--job",
    "operation_id": "--operation",
    "deadline": "--deadline",
    "max_requests": "--max-requests",
    "max_transport_failures": "--max-transport-failures",
    "base_delay": "--base-delay",
    "max_delay": "--max-delay",
    "useful_for": "--useful-for",
    "lag_target": "--lag-target",
    "status_location": "--status-url",
}
"""Admission's field names as this command's flags, so a refusal names what to change."""


def watch_request(args: argparse.Namespace, contract: Contract) -> WatchRequest:
    """The flags as an admission request; the engine decides whether it creates, resumes, narrows or refuses."""
    limits = Limits(
        deadline=_duration(args.deadline, "--deadline"),
        max_requests=args.max_requests,
        max_transport_failures=args.max_transport_failures,
        base_delay=_duration(args.base_delay, "--base-delay"),
        max_delay=_duration(args.max_delay, "--max-delay"),
        useful_for=_duration(args.useful_for, "--useful-for"),
        lag_target=_duration(args.lag_target, "--lag-target"),
    )
    return WatchRequest(
        contract,
        args.job,
        args.operation,
        limits,
        by="cli",
        status_location=getattr(args, "status_url", None),
    )


def decide_hint(args: argparse.Namespace, decision_id: str) -> str:
    """`pollwarden decide D --option N --by YOUR_NAME`, with the --home/--db this command was given."""
    words = ["pollwarden", "decide", decision_id, "--option", "N", "--by", "YOUR_NAME"]
    return command_line(words, home=args.home, db=getattr(args, "db", None))


def _contract(args: argparse.Namespace, store: Store) -> Contract:
    """`--contract` when given; otherwise, to resume, the contract stored with `--operation` (item 18)."""
    if args.contract is not None:
        return _load_contract(args.contract, vars_of(args))
    if args.vars:
        raise UsageError("--var needs --contract: a resumed operation keeps the vars it was created with")
    if args.operation is None:
        raise UsageError("give --contract FILE and --job ID to start watching, or --operation ID to resume one")
    try:
        contract, _ = contract_of(store, args.operation, by=None)  # NotInstalled: `cmd_watch` records the stop
    except HomeError as exc:
        raise UsageError(f"{exc}; to start a new operation give --contract FILE and --job ID") from None
    return contract


class ProgressLine:
    """What a person sees while `watch` waits. On a terminal: one line, redrawn in place every second and after
    every step (the state, checks used of allowed, the next check and who chose its time, the deadline), so a
    long wait never scrolls. Piped, or with `--quiet`: one plain line per decision, for logs. `--json`: none."""

    watching: ClassVar[str | None] = None
    """The operation the last step was about: an interrupted `watch` names it in its resume hint."""

    def __init__(self, out: TextIO, *, live: bool, quiet: bool, clock: Callable[[], datetime] = utcnow) -> None:
        self.out = out
        self.clock = clock
        """The store's, as the times it shows against are (a due time in the database's clock on PostgreSQL)."""
        self.live = live and not quiet
        self.quiet = quiet
        """No progress at all: `--json` prints one object at the end and nothing before it."""
        self._dirty = False

    def _clear(self) -> None:
        if self._dirty:
            self.out.write("\r\033[K")
            self.out.flush()
            self._dirty = False

    def __call__(self, result: StepResult) -> None:
        ProgressLine.watching = (result.decision.record if isinstance(result, Polled) else result.record).operation_id
        if self.quiet:
            return
        now = self.clock()
        if not self.live:
            if isinstance(result, Polled):
                self.out.write(_decision_line(result.decision, now) + "\n")
                self.out.flush()
            return
        shown_now = progress_of(result)
        if shown_now.final:
            self._clear()  # the outcome is printed next, on a line of its own
            return
        # The job id cut in the middle: a long one would leave no room for the progress the line is for.
        self.out.write(f"\r\033[K{fit_middle(shown(shown_now.job_id), 32)}: {shown(shown_now.message(now))}")
        self.out.flush()
        self._dirty = True


def _decision_line(decision: Decision, now: datetime) -> str:
    record = decision.record
    seen = f"HTTP {record.last_http_status}" if record.last_http_status else "no response"
    if record.last_state and record.last_http_status and 200 <= record.last_http_status < 300:
        seen = f"state {shown(record.last_state)}"
    checks = checks_used(record.status_requests_used, record.plan.max_status_requests)
    stamp = format_moment(now)
    if decision.next_poll_at is not None and not record.is_final:
        wait = format_duration(timedelta(seconds=max(0, round((decision.next_poll_at - now).total_seconds()))))
        return f"{stamp} {seen} · {checks} · next check in {wait} ({delay_words(decision.delay_source)})"
    if record.phase is Phase.SUCCEEDED:
        return f"{stamp} {seen} · {checks} · succeeded: {shown(result_text(record.result))}"
    return f"{stamp} {seen} · {checks} · stopped: {record.reason.value if record.reason else '?'}"


def _final_json(record: OperationRecord) -> dict[str, Any]:
    summary = record.summary()
    summary["outcome"] = "succeeded" if record.phase is Phase.SUCCEEDED else "stopped"
    return summary


def _ready(request: WatchRequest) -> Ready:
    """The preamble's first half (`engine.preamble.ready`), its refusal in this command's words (exit 2)."""
    try:
        return ready(request)
    except Refused as exc:
        raise UsageError(exc.said(FLAGS, "watch")) from None


def cmd_watch(args: argparse.Namespace) -> int:
    for flag in ("deadline", "base_delay", "max_delay", "useful_for", "lag_target"):
        _duration(getattr(args, flag), "--" + flag.replace("_", "-"))
    checked: Ready | None = None
    if args.contract is not None:  # all that needs no store is checked before one is opened: exit 2 creates nothing
        checked = _ready(watch_request(args, _load_contract(args.contract, vars_of(args))))
    elif args.operation is not None and (problem := operation_id_problem(args.operation)):
        raise UsageError(f"cannot watch: --operation {args.operation}: {problem}")
    store = _open_store(args.home)
    try:
        engine = Engine(store, owner=process_owner("watch"))
        # `--contract`: this watch runs with its caller's own credential, so what it is given is installed as it
        # starts (audited): a worker or a resume later runs exactly this version
        installing = Installing("watch --contract", args.contract) if checked is not None else None
        if checked is None:
            try:
                contract = _contract(args, store)
            except NotInstalled as exc:  # a resume runs only an installed version: this one is stopped, recorded
                with delivering(store, "watch"):  # its head goes to the witness as any stop's would
                    final = engine.refuse_stored(args.operation, str(exc))
                return _report(args, store, final, sys.stdout)
            checked = _ready(watch_request(args, contract))
        # A stop's webhook and the witness's heads go out from the outbox on a thread of their own; at the end the
        # watch waits for them `outbox.EXIT_WAIT` seconds at most, and leaves the rest to the next process.
        with delivering(store, "watch"):
            return _watch(args, store, engine, checked, installing)
    finally:
        store.close()


def _watch(
    args: argparse.Namespace, store: Store, engine: Engine, checked: Ready, installing: Installing | None
) -> int:
    """Admit, watch to the end, print the outcome: with the store open and its deliveries on their way."""
    try:
        admitted = admit(checked, engine, installing)
    except Refused as exc:
        raise UsageError(exc.said(FLAGS, "watch")) from None
    contract, secret = checked.request.contract, checked.secret
    record = admitted.record
    out: TextIO = FittedOut(sys.stdout)  # type: ignore[assignment]  # on a terminal, no line wraps
    if not args.json:
        how = ""
        if not admitted.created:
            how = f"; resumed with {record.status_requests_used} used"
            if admitted.reused_job:
                how = f"; this job's existing operation, resumed with {record.status_requests_used} used"
        out.write(
            f"operation {shown(record.operation_id)}: job {shown(record.job_id)} via {shown(contract.name)},"
            f" deadline {format_moment(record.deadline_at)}, budget {plural(record.plan.max_status_requests, 'check')}"
            f"{how}\n"
        )
        out.flush()
    progress = ProgressLine(out, live=out.isatty() and not args.quiet, quiet=args.json, clock=engine.clock)
    ProgressLine.watching = record.operation_id  # an interrupt from here on names it in the resume hint
    # With a [push] table, the store's bell ends a wait at once when a provider's push made the operation due.
    with (
        StatusClient(contract, secret, clock=engine.clock) as client,
        listening(store.bell, contract.push is not None) as bell,
    ):
        # A signal raises `Interrupted` wherever it lands; the engine records the `interrupted` event.
        final = engine.run(
            contract,
            client,
            record.operation_id,
            Watching(
                on_progress=progress,
                sleep=None if bell is None else bell.wait,
                tick=1.0 if progress.live else None,
                by="cli",
            ),
        )
    return _report(args, store, final, out)


def _report(args: argparse.Namespace, store: Store, final: OperationRecord, out: TextIO) -> int:
    """How a watch ended, with its open decision (and the command that answers it), and its exit code."""
    open_decisions = store.decisions(final.operation_id, open_only=True) if final.is_final else []
    if args.json:
        summary = _final_json(final)
        summary["decision"] = open_decisions[-1].request.to_json() if open_decisions else None
        print(json.dumps(summary, sort_keys=True))
    else:
        _print_outcome(final, out)
        if open_decisions:
            asked = open_decisions[-1].request
            out.write("\n" + shown_request(asked).render() + "\n")
            out.write(f"Decide with: {decide_hint(args, asked.decision_id)}\n")
    return exit_code(final)


def _print_outcome(record: OperationRecord, out: TextIO) -> None:
    part = part_words(record)
    if record.phase is Phase.SUCCEEDED:
        out.write(f"succeeded: job {shown(record.job_id)}, result {shown(result_text(record.result))}\n")
        if part is not None:
            out.write(f"  {shown(part)}\n")
        return
    reason = record.reason.value if record.reason else "?"
    if record.reason is not None and record.reason.job_ended:
        out.write(f"{stop_title(record.reason)}: {reason}: {shown(record.detail)}\n")
    else:
        out.write(f"stopped, needs a decision: {reason}: {shown(record.detail)}\n")
    out.write(
        f"  last state {shown(record.last_state) if record.last_state is not None else 'none seen'},"
        f" last HTTP {record.last_http_status if record.last_http_status is not None else 'none'},"
        f" {checks_of(record.status_requests_used, record.plan.max_status_requests)} used,"
        f" transport failures {record.transport_failures_used} of {record.plan.max_transport_failures}\n"
    )
    if record.provider_error:
        out.write(f"  provider error: {shown(record.provider_error)}\n")
    if record.partial:
        out.write(f"  kept: {shown(result_text(record.result))}, {shown(part)}; `pollwarden fetch-result` gets it\n")
