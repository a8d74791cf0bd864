"""The `pollwarden` command: parse, call the library, render. No decision is made here.

Exit codes: 0 succeeded, 1 internal error, 2 bad input (nothing changed), 3 the job ended at the
provider without success, 4 stopped and escalated for a decision, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn, TextIO

from . import __version__
from .actions import ActionError, ActionRefused, cancel, fetch_result, submit
from .agent_cli import add_agent_commands
from .audit import (
    AuditError,
    Checkpoint,
    VerifyReport,
    read_export,
    verify,
    write_checkpoint_file,
    write_export,
)
from .console import ConsoleServer, is_loopback, serve_until_signalled
from .core.contract import Contract, ContractError, load_contract
from .core.decide import Decision
from .core.durations import DurationError, format_duration, format_rfc3339, parse_duration, parse_rfc3339
from .core.escalation import DecisionError, DecisionRequest, OptionKind
from .core.reasons import Phase
from .core.record import OPERATION_ID, OperationRecord, new_record
from .fleet_cli import FleetUsageError, add_fleet_commands
from .home import resolve_home
from .http import CredentialError, StatusClient, resolve_secret
from .notify import deliver
from .operating import HomeError, contract_of, decide, open_store, status_client, trusted_checkpoint, verify_home
from .simulator import SCENARIOS, Simulator, Step, contract_text, serve
from .store.base import OperationExists, Store, Stored, StoreError
from .store.owner import process_owner
from .story import story_json, story_lines
from .watch import Done, NotYet, Polled, StepResult, Watcher, utcnow
from .why import WhyError, explain, pick

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_JOB_ENDED, EXIT_ESCALATED = 0, 1, 2, 3, 4


class UsageError(Exception):
    """Bad input from the person at the keyboard: reported in one line, exit 2, nothing changed."""


def exit_code(record: OperationRecord) -> int:
    if record.phase is Phase.SUCCEEDED:
        return EXIT_OK
    if record.reason is not None and record.reason.job_ended:
        return EXIT_JOB_ENDED
    return EXIT_ESCALATED


def _duration(text: str | None, flag: str) -> timedelta | None:
    if text is None:
        return None
    try:
        value = parse_duration(text)
    except DurationError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    if value <= timedelta(0):
        raise UsageError(f"{flag}: must be longer than zero")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0 or value > 1_000_000:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1000000, got {value}")
    return value


def _open_store(home_arg: str | None, *, keys: str = "write") -> Store:
    """keys: "write" loads or creates both audit keys, "read" needs the existing ones, "none" neither."""
    try:
        return open_store(resolve_home(home_arg), keys=keys)
    except HomeError as exc:
        raise UsageError(str(exc)) from None


def _load_contract(path: str) -> Contract:
    try:
        return load_contract(Path(path))
    except ContractError as exc:
        raise UsageError(str(exc)) from None


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


def _prepare(args: argparse.Namespace, store: Store, contract: Contract, now: datetime) -> OperationRecord:
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
            f"\r\033[K{record.job_id}: {record.last_state or 'not yet seen'} · requests"
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
        seen = f"state {record.last_state}"
    budget = f"{record.status_requests_used}/{record.plan.max_status_requests}"
    stamp = now.strftime("%H:%M:%S")
    if decision.next_poll_at is not None and not record.is_final:
        source = decision.delay_source.value if decision.delay_source else "?"
        return f"{stamp} {seen} · requests {budget} · next poll {decision.next_poll_at.strftime('%H:%M:%S')} ({source})"
    if record.phase is Phase.SUCCEEDED:
        return f"{stamp} {seen} · requests {budget} · succeeded: {record.result}"
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
                out.write("\n" + request.render() + "\n")
                out.write(f"Decide with: pollwarden decide {request.decision_id} --option N --by YOUR_NAME\n")
        return exit_code(final)
    finally:
        store.close()


def _notifier(store: Store, contract: Contract) -> Callable[[DecisionRequest], None]:
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
        out.write(f"succeeded: job {record.job_id}, result {record.result}\n")
        return
    reason = record.reason.value if record.reason else "?"
    label = "job ended" if record.reason and record.reason.job_ended else "stopped, needs a decision"
    out.write(f"{label}: {reason}: {record.detail}\n")
    out.write(
        f"  last state {record.last_state}, last HTTP {record.last_http_status},"
        f" requests {record.status_requests_used} of {record.plan.max_status_requests},"
        f" transport failures {record.transport_failures_used} of {record.plan.max_transport_failures}\n"
    )
    if record.provider_error:
        out.write(f"  provider error: {record.provider_error}\n")


# -- status and story ---------------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    store = _open_store(args.home, keys="none")
    try:
        if args.operation:
            stored = store.get(args.operation)
            if stored is None:
                raise UsageError(f"no operation {args.operation!r} in {store.path}; `pollwarden status` lists them")
            summary = stored.record.summary()
            if args.json:
                print(json.dumps(summary, sort_keys=True))
            else:
                for key, value in summary.items():
                    print(f"{key:26} {value if value is not None else '-'}")
            return EXIT_OK
        rows = [s.record for s in store.all()]
        if args.json:
            print(json.dumps([r.summary() for r in rows], sort_keys=True))
            return EXIT_OK
        if not rows:
            print("no operations yet")
            return EXIT_OK
        print(f"{'OPERATION':40} {'JOB':20} {'PHASE':10} {'REASON':26} {'STATE':16} REQUESTS")
        for r in rows:
            print(
                f"{r.operation_id:40} {r.job_id:20} {r.phase.value:10} {(r.reason.value if r.reason else '-'):26}"
                f" {(r.last_state or '-'):16} {r.status_requests_used}/{r.plan.max_status_requests}"
            )
        return EXIT_OK
    finally:
        store.close()


def cmd_story(args: argparse.Namespace) -> int:
    store = _open_store(args.home, keys="read")
    try:
        events = store.events(args.operation)  # a submission whose outcome is unknown has a log but no record
        if not events and store.get(args.operation) is None:
            raise UsageError(f"no operation {args.operation!r} in {store.path}; `pollwarden status` lists them")
        if args.json:
            print(json.dumps(story_json(events), sort_keys=True))
        else:
            for line in story_lines(events):
                print(line)
        return EXIT_OK
    finally:
        store.close()


# -- audit and why --------------------------------------------------------------------------------

EXIT_TAMPERED = 5


def _print_report(report: VerifyReport, *, as_json: bool, source: str, trusted: str | None) -> int:
    if as_json:
        print(json.dumps({**report.to_json(), "source": source, "trusted_checkpoint": trusted}, sort_keys=True))
    else:
        state = "intact" if report.ok else "TAMPERED"
        print(
            f"{source}: {state}: {report.records} records in {report.logs} logs, {report.checkpoints} checkpoints,"
            f" {report.bytes_verified} bytes verified"
            + (f", checked against {trusted}" if trusted else ", no checkpoint kept elsewhere to check rollback")
        )
        for problem in report.problems:
            where = f"log {problem.log_id}" + (f" record {problem.seq}" if problem.seq is not None else "")
            print(f"  {where}: {problem.what}")
    return EXIT_OK if report.ok else EXIT_TAMPERED


def _trusted(path: Path | None) -> tuple[Checkpoint | None, str | None]:
    try:
        return trusted_checkpoint(path)
    except HomeError as exc:
        raise UsageError(str(exc)) from None


def cmd_audit_verify(args: argparse.Namespace) -> int:
    """Needs no decryption key: the chain is over ciphertext, checkpoints are signed with a public key."""
    explicit = Path(args.checkpoint) if args.checkpoint else None
    if explicit is not None and not explicit.exists():
        raise UsageError(f"--checkpoint {explicit} does not exist")
    if args.file:
        path = Path(args.file)
        try:
            records, checkpoints, public_key = read_export(path)
        except AuditError as exc:
            raise UsageError(str(exc)) from None
        trusted, trusted_name = _trusted(explicit or Path(str(path) + ".checkpoint"))
        report = verify(records, checkpoints, public_key, trusted_checkpoint=trusted)
        return _print_report(report, as_json=args.json, source=str(path), trusted=trusted_name)
    try:
        check = verify_home(resolve_home(args.home), explicit)
    except HomeError as exc:
        raise UsageError(str(exc)) from None
    return _print_report(check.report, as_json=args.json, source=check.source, trusted=check.trusted)


def cmd_audit_export(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if not out.parent.exists():
        raise UsageError(f"--out {out}: the directory {out.parent} does not exist")
    store = _open_store(args.home, keys="write")
    try:
        if args.operation and store.get(args.operation) is None:
            raise UsageError(f"no operation {args.operation!r} in {store.path}; `pollwarden status` lists them")
        assert store.keys is not None
        made = store.checkpoint_heads(utcnow(), [args.operation] if args.operation else None)
        if not made:
            raise UsageError("the audit log is empty: nothing to export")
        checkpoints = store.audit_checkpoints(args.operation)
        count = write_export(
            out,
            store.audit_records(args.operation),
            checkpoints,
            store.keys.public_key,
            exported_at=format_rfc3339(utcnow()),
        )
        newest = max(made, key=lambda cp: cp.counter)
        write_checkpoint_file(Path(str(out) + ".checkpoint"), newest)
    finally:
        store.close()
    print(f"exported {count} records in {len(made)} logs to {out}; keep {out}.checkpoint somewhere else")
    return EXIT_OK


def cmd_audit_repair(args: argparse.Namespace) -> int:
    """An export cut off mid-line (a crash while copying) loses only its torn last line, kept aside."""
    path = Path(args.file)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]
    torn = tail != b""
    if not torn and complete:
        try:
            json.loads(complete[-1])
        except ValueError:
            torn, tail, complete = True, complete[-1], complete[:-1]
    if not torn:
        print(f"{path}: no torn tail; nothing to repair")
        return EXIT_OK
    aside = Path(str(path) + ".torn")
    aside.write_bytes(tail)
    path.write_bytes(b"".join(line + b"\n" for line in complete))
    print(f"{path}: removed a torn last line of {len(tail)} bytes (kept in {aside}); run `audit verify` again")
    return EXIT_OK


def cmd_why(args: argparse.Namespace) -> int:
    at = None
    if args.at:
        try:
            at = parse_rfc3339(args.at)
        except DurationError as exc:
            raise UsageError(f"--at: {exc}") from None
    store = _open_store(args.home, keys="read")
    try:
        if store.get(args.operation) is None:
            raise UsageError(f"no operation {args.operation!r} in {store.path}; `pollwarden status` lists them")
        events = store.events(args.operation)
    finally:
        store.close()
    try:
        explanation = explain(pick(events, seq=args.seq, at=at))
    except WhyError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(explanation.to_json(), sort_keys=True))
        return EXIT_OK
    data = explanation.to_json()
    decision = data["decision"]
    inputs = data["inputs"] or {}
    record = inputs.get("record", {})
    print(f"decision at record {data['seq']} ({data['at']}): rule {data['rule']!r} -> {decision['action']}")
    if decision.get("reason"):
        print(f"  reason: {decision['reason']}")
    if decision.get("next_poll_at"):
        print(
            f"  next poll: {decision['next_poll_at']} from {decision['delay_source']} (raw {decision['raw_delay']},"
            f" jitter draw {decision['jitter_u']})"
        )
    print(f"  detail: {decision['detail']}")
    for rejection in decision.get("rejections") or []:
        print(f"  rejected {rejection['source']} {rejection['value']!r}: {rejection['why']}")
    print("inputs:")
    print(f"  now: {inputs.get('now')}")
    if record:
        print(
            f"  record: requests {record['status_requests_used']} of {record['plan']['max_status_requests']},"
            f" transport failures {record['transport_failures_used']} of {record['plan']['max_transport_failures']},"
            f" deadline {record['plan']['deadline_at']}, last state {record.get('last_state')}"
        )
    observation = inputs.get("observation")
    if observation:
        print(
            f"  observation: {observation['kind']}, HTTP {observation['http_status']}, state {observation['state']},"
            f" Retry-After {observation['retry_after_header']}, hint {observation['hint_at']}"
        )
    if explanation.replayed is None:
        print("replay: not possible (this record carries no inputs)")
    elif explanation.same:
        print("replay: today's core decides the same")
    else:
        print("replay: today's core decides DIFFERENTLY:")
        for difference in explanation.differences:
            print(f"  {difference}")
    return EXIT_OK


# -- decisions and actions ----------------------------------------------------------------------------


def _contract_of(store: Store, operation_id: str) -> tuple[Contract, OperationRecord]:
    try:
        return contract_of(store, operation_id)
    except HomeError as exc:
        raise UsageError(str(exc)) from None


def _client(contract: Contract) -> StatusClient:
    try:
        return status_client(contract)
    except HomeError as exc:
        raise UsageError(str(exc)) from None


def cmd_decisions(args: argparse.Namespace) -> int:
    store = _open_store(args.home, keys="none")
    try:
        rows = store.decisions(args.operation, open_only=not args.all)
    finally:
        store.close()
    if args.json:
        print(json.dumps([d.to_json() for d in rows], sort_keys=True))
        return EXIT_OK
    if not rows:
        print("no open decisions" if not args.all else "no decisions")
        return EXIT_OK
    for stored in rows:
        if stored.status != "open":
            print(f"[{stored.status} by {stored.decided_by}, option {stored.option}]")
        print(stored.request.render())
        print(f"Decide with: pollwarden decide {stored.request.decision_id} --option N --by YOUR_NAME  (or --refuse)")
        print()
    return EXIT_OK


def cmd_decide(args: argparse.Namespace) -> int:
    if args.option is None and not args.refuse:
        raise UsageError("choose one: --option N (see `pollwarden decisions`) or --refuse")
    if not args.by.strip():
        raise UsageError("--by must name the person deciding")
    store = _open_store(args.home, keys="write")
    try:
        outcome = decide(store, args.decision, option=args.option, refuse=args.refuse, by=args.by, note=args.note)
    except (HomeError, DecisionError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        store.close()
    if args.json:
        print(json.dumps({"status": outcome.status, "message": outcome.message, "action": outcome.action}))
    else:
        print(outcome.message)
    return EXIT_OK if not outcome.action or outcome.action.get("ok") else EXIT_ESCALATED


def cmd_submit(args: argparse.Namespace) -> int:
    contract = _load_contract(args.contract)
    try:
        body = Path(args.body).read_bytes()
    except OSError as exc:
        raise UsageError(f"--body {args.body}: {exc.strerror}") from None
    try:
        json.loads(body)
    except ValueError:
        raise UsageError(f"--body {args.body}: not JSON; the submission body is sent as application/json") from None
    now = utcnow()
    operation_id = args.operation or f"{contract.name}-{now.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    if not OPERATION_ID.match(operation_id):
        raise UsageError(f"--operation {operation_id!r}: use 1-128 letters, digits, '.', '_', ':' or '-'")
    store = _open_store(args.home, keys="write")
    try:
        with _client(contract) as client:
            try:
                submitted = submit(
                    store,
                    contract,
                    client,
                    operation_id=operation_id,
                    body=body,
                    now=now,
                    deadline=_duration(args.deadline, "--deadline"),
                    max_requests=args.max_requests,
                    useful_for=_duration(args.useful_for, "--useful-for"),
                )
            except ActionRefused as exc:
                raise UsageError(str(exc)) from None
            except ActionError as exc:
                print(f"pollwarden: {exc}", file=sys.stderr)
                return EXIT_ESCALATED
    finally:
        store.close()
    record = submitted.record
    print(
        f"submitted: operation {record.operation_id}, job {record.job_id}"
        + (f", status at {record.status_location}" if record.status_location else "")
    )
    if not args.watch:
        return EXIT_OK
    ns = build_parser().parse_args(
        ["watch", "--contract", args.contract, "--operation", record.operation_id]
        + (["--home", args.home] if args.home else [])
        + (["--json"] if args.json else [])
    )
    return cmd_watch(ns)


def cmd_fetch_result(args: argparse.Namespace) -> int:
    store = _open_store(args.home, keys="write")
    try:
        contract, record = _contract_of(store, args.operation)
        out = Path(args.out)
        if not out.parent.exists():
            raise UsageError(f"--out {out}: the directory {out.parent} does not exist")
        with _client(contract) as client:
            try:
                result = fetch_result(contract, client, record, out)
            except ActionError as exc:
                raise UsageError(str(exc)) from None
        store.append(args.operation, "action", result, utcnow())
    finally:
        store.close()
    print(f"fetched {result['bytes']} bytes (sha256 {result['sha256']}) to {out}")
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancelling is new authority: it runs only as the option a person chose in a decision."""
    store = _open_store(args.home, keys="write")
    try:
        contract, record = _contract_of(store, args.operation)
        if contract.cancel is None:
            raise UsageError(f"contract {contract.name!r} documents no cancel action; nothing can be sent")
        approved = [
            d
            for d in store.decisions(args.operation)
            if d.status == "decided" and d.option is not None and d.request.option(d.option).kind is OptionKind.CANCEL
        ]
        if not approved:
            raise UsageError(
                f"cancelling {args.operation} needs a person's decision: choose the 'cancel at provider' option in"
                " `pollwarden decisions` / `pollwarden decide`; nothing was sent"
            )
        done = [e for e in store.events(args.operation) if e.kind == "action" and e.data.get("action") == "cancel"]
        if any(e.data.get("ok") for e in done):
            raise UsageError(f"the job of {args.operation} was already cancelled at the provider; nothing was sent")
        with _client(contract) as client:
            result = cancel(contract, client, record)
        store.append(args.operation, "action", {**result, "decision_id": approved[-1].request.decision_id}, utcnow())
    finally:
        store.close()
    print("cancel sent" if result["ok"] else f"cancel failed: {result}")
    return EXIT_OK if result["ok"] else EXIT_ESCALATED


# -- console --------------------------------------------------------------------------------------


def cmd_console(args: argparse.Namespace) -> int:
    """The operator console on loopback: a token printed here (or taken from --token-env) opens it."""
    token = None
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            raise UsageError(f"--token-env {args.token_env}: that environment variable is not set")
        if len(token) < 16:
            raise UsageError(f"--token-env {args.token_env}: the token must be at least 16 characters")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: must be between 0 and 65535")
    home = resolve_home(args.home)
    _open_store(args.home, keys="none").close()  # a home that cannot be opened is reported here, not per page
    server = ConsoleServer(home, host=args.host, port=args.port, token=token)
    if not is_loopback(args.host):
        print(
            f"pollwarden: warning: binding to {args.host}, not loopback: anyone who can reach this port can try"
            " the token, and the traffic is plain HTTP",
            file=sys.stderr,
        )

    def ready() -> None:
        print(f"pollwarden console on {server.url}/ for {home}")
        if token is None:
            print(f"log in: {server.login_url}")
        else:
            print(f"log in with the token in ${args.token_env}")
        print("stop with Ctrl-C")
        sys.stdout.flush()

    try:
        serve_until_signalled(server, ready)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    print("console stopped")
    return EXIT_OK


# -- simulate and demo --------------------------------------------------------------------------------


def cmd_simulate(args: argparse.Namespace) -> int:
    token = None
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            raise UsageError(f"--token-env {args.token_env}: that environment variable is not set")
    if args.time_scale <= 0:
        raise UsageError("--time-scale must be greater than zero")

    def ready(url: str) -> None:
        print(f"simulated provider listening on {url}", flush=True)
        if not args.quiet:
            print("scenarios (GET /jobs/<scenario>-<anything>):")
            for name, (description, _) in SCENARIOS.items():
                print(f"  {name:26} {description}")
            sys.stdout.flush()

    try:
        serve(args.host, args.port, token=token, time_scale=args.time_scale, on_ready=ready)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """The newcomer's first command: a real provider on loopback, a real watch, the story it leaves."""
    home = Path(tempfile.mkdtemp(prefix="pollwarden-demo-")) if args.home is None else Path(args.home)
    with Simulator() as sim:
        sim.add_job(
            "exp_71c",
            [
                Step(body={"state": "queued"}),
                Step(body={"state": "running"}),
                Step(status=503, body={"error": "maintenance"}, headers={"Retry-After": "5"}),
                Step(body={"state": "running", "poll_after_seconds": 1}),
                Step(body={"state": "succeeded", "result_url": "https://files.example/exports/exp_71c.csv"}),
            ],
        )
        sim.add_job("exp_72d", [Step(body={"state": "running"}), Step(body={"state": "awaiting_review"})])
        contract_path = home / "demo-contract.toml"
        home.mkdir(parents=True, exist_ok=True)
        demo = contract_text(
            sim.url, name="demo-exports", base_delay="500ms", max_delay="4s", deadline="2m", max_requests=8
        )
        contract_path.write_text(demo, encoding="utf-8")
        print(f"pollwarden demo: a simulated provider on {sim.url}, state in {home}\n")
        codes = []
        for job in ("exp_71c", "exp_72d"):
            print(f"$ pollwarden watch --contract {contract_path} --job {job} --operation demo-{job}")
            ns = build_parser().parse_args(
                [
                    "watch",
                    "--contract",
                    str(contract_path),
                    "--job",
                    job,
                    "--operation",
                    f"demo-{job}",
                    "--home",
                    str(home),
                ]
            )
            code = cmd_watch(ns)
            codes.append(code)
            print(f"(exit code {code}; the provider saw {sim.request_count(job)} status requests)\n")
            print(f"$ pollwarden story demo-{job}")
            cmd_story(build_parser().parse_args(["story", f"demo-{job}", "--home", str(home)]))
            print()
    ok = codes == [EXIT_OK, EXIT_ESCALATED]
    print("demo finished: one job succeeded with a validated result, one stopped on an unknown state.")
    return EXIT_OK if ok else EXIT_INTERNAL


# -- parser ---------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"pollwarden: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pollwarden", description="Bounded, durable, auditable waiting on external jobs.")
    parser.add_argument("--version", action="version", version=f"pollwarden {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def home(p: argparse.ArgumentParser) -> None:
        p.add_argument("--home", help="state directory (default $POLLWARDEN_HOME or ~/.local/state/pollwarden)")
        p.add_argument("--db", help="SQLite file or postgresql:// URL (default $POLLWARDEN_DB, else the home's file)")

    w = sub.add_parser("watch", help="watch one job until a validated result or a reasoned stop")
    w.add_argument("--contract", required=True, help="provider contract (TOML)")
    w.add_argument("--job", help="the provider's job id (required for a new operation)")
    w.add_argument("--operation", help="operation id: new to create, existing to resume")
    w.add_argument("--deadline", help="wall-clock deadline from the operation's start, e.g. 40m")
    w.add_argument("--max-requests", type=_positive, help="status request budget")
    w.add_argument("--max-transport-failures", type=_positive, help="transport-failure budget")
    w.add_argument("--base-delay", help="backoff base delay, e.g. 5s")
    w.add_argument("--max-delay", help="backoff cap, e.g. 120s")
    w.add_argument("--useful-for", help="business deadline: stop with usefulness_window_closed after this, e.g. 20m")
    w.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    home(w)
    w.set_defaults(func=cmd_watch)

    s = sub.add_parser("status", help="show one operation, or a table of all")
    s.add_argument("operation", nargs="?")
    s.add_argument("--json", action="store_true")
    home(s)
    s.set_defaults(func=cmd_status)

    st = sub.add_parser("story", help="an operation's decisions, told in order")
    st.add_argument("operation")
    st.add_argument("--json", action="store_true")
    home(st)
    st.set_defaults(func=cmd_story)

    sim = sub.add_parser("simulate", help="run a scripted job provider on loopback")
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument("--port", type=int, default=8080)
    sim.add_argument("--token-env", help="require 'Authorization: Bearer $VAR' on every job request")
    sim.add_argument("--time-scale", type=float, default=1.0, help="scale scenario times (0.1 = ten times faster)")
    sim.add_argument("--quiet", action="store_true", help="print only the listening line")
    sim.set_defaults(func=cmd_simulate)

    audit = sub.add_parser("audit", help="verify, export or repair the encrypted, hash-chained audit log")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True, parser_class=_Parser)
    av = audit_sub.add_parser("verify", help="check the chain and signed checkpoints; needs no decryption key")
    av.add_argument("--file", help="an export written by `audit export` (default: the log in the home)")
    av.add_argument("--checkpoint", help="a checkpoint kept elsewhere (default: FILE.checkpoint or the home's)")
    av.add_argument("--json", action="store_true")
    home(av)
    av.set_defaults(func=cmd_audit_verify)
    ae = audit_sub.add_parser("export", help="write a self-contained, verifiable export")
    ae.add_argument("--out", required=True)
    ae.add_argument("--operation", help="only this operation's log")
    home(ae)
    ae.set_defaults(func=cmd_audit_export)
    ar = audit_sub.add_parser("repair", help="cut a torn last line from an export (kept aside in FILE.torn)")
    ar.add_argument("--file", required=True)
    ar.set_defaults(func=cmd_audit_repair)

    wy = sub.add_parser("why", help="explain one decision and replay it through today's core")
    wy.add_argument("operation")
    which = wy.add_mutually_exclusive_group()
    which.add_argument("--seq", type=int, help="the decision's record number (see `story --json`)")
    which.add_argument("--at", help="the last decision at or before this RFC 3339 time")
    wy.add_argument("--json", action="store_true")
    home(wy)
    wy.set_defaults(func=cmd_why)

    ds = sub.add_parser("decisions", help="list decision requests waiting for a person")
    ds.add_argument("operation", nargs="?")
    ds.add_argument("--all", action="store_true", help="include decided, refused and expired ones")
    ds.add_argument("--json", action="store_true")
    home(ds)
    ds.set_defaults(func=cmd_decisions)

    dc = sub.add_parser("decide", help="apply one option of a decision request, or refuse it")
    dc.add_argument("decision")
    dc.add_argument("--option", type=int)
    dc.add_argument("--refuse", action="store_true")
    dc.add_argument("--by", default=os.environ.get("USER", ""), help="who decides (recorded in the audit log)")
    dc.add_argument("--note")
    dc.add_argument("--json", action="store_true")
    home(dc)
    dc.set_defaults(func=cmd_decide)

    sb = sub.add_parser("submit", help="submit a job as the contract's [submit] table documents, then watch it")
    sb.add_argument("--contract", required=True)
    sb.add_argument("--body", required=True, help="JSON request body")
    sb.add_argument("--operation")
    sb.add_argument("--deadline")
    sb.add_argument("--max-requests", type=_positive)
    sb.add_argument("--useful-for", help="business deadline: the result stops being useful after this, e.g. 20m")
    sb.add_argument("--watch", action="store_true", help="watch the job right away")
    sb.add_argument("--json", action="store_true")
    home(sb)
    sb.set_defaults(func=cmd_submit)

    fr = sub.add_parser("fetch-result", help="download the validated result (only after success)")
    fr.add_argument("operation")
    fr.add_argument("--out", required=True)
    home(fr)
    fr.set_defaults(func=cmd_fetch_result)

    cn = sub.add_parser("cancel", help="send the documented cancel, only as a decided decision option")
    cn.add_argument("operation")
    home(cn)
    cn.set_defaults(func=cmd_cancel)

    add_fleet_commands(sub, home)
    add_agent_commands(sub, home)

    co = sub.add_parser("console", help="serve the operator console (a web page) on loopback")
    co.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    co.add_argument("--port", type=int, default=8765)
    co.add_argument("--token-env", help="take the login token from this environment variable instead of a new one")
    home(co)
    co.set_defaults(func=cmd_console)

    d = sub.add_parser("demo", help="watch two jobs on a simulated provider and print their stories")
    home(d)
    d.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    if getattr(args, "db", None):
        os.environ["POLLWARDEN_DB"] = args.db  # one rule for every store this process opens (operating.py)
    try:
        return func(args)
    except UsageError as exc:
        print(f"pollwarden: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except FleetUsageError as exc:
        print(f"pollwarden: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StoreError as exc:
        print(f"pollwarden: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
