"""A person's answers and the actions beside polling: `decisions`, `decide`, `submit`, `fetch-result`, `cancel`."""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from dataclasses import replace
from pathlib import Path

from ..actions.decisions import person_problem
from ..actions.provider import ActionError, ActionRefused, admissible, cancel, fetch_result, submit
from ..clock import utcnow
from ..core.admission import Limits, new_operation_id, operation_id_problem
from ..core.bounded import TooLarge, read_bounded, read_stream_bounded
from ..core.contract.parse import Contract
from ..core.escalation import DecisionError, OptionKind, stop_marker
from ..core.record import OperationRecord
from ..core.result_part import part_words
from ..engine.installed import install_as_caller
from ..events import ActionEvent
from ..home.closing import BULK_REASONS, closable, close_ended, reason_problem
from ..home.directory import unknown_operation
from ..home.operating import HomeError, contract_of, decide, status_client
from ..shown import shown
from ..store.base import Store, StoredDecision
from ..transport.http import StatusClient
from .common import (
    EXIT_ESCALATED,
    EXIT_OK,
    UsageError,
    _duration,
    _load_contract,
    _open_store,
    output_file,
    resume_hint,
    shown_request,
    vars_of,
)
from .parser import build_parser
from .terminal import WrappedOut
from .watch import cmd_watch

# -- decisions and actions ----------------------------------------------------------------------------


def _contract_of(store: Store, operation_id: str, by: str) -> tuple[Contract, OperationRecord]:
    try:
        return contract_of(store, operation_id, by=by)
    except HomeError as exc:
        raise UsageError(str(exc)) from None


def _client(contract: Contract, store: Store) -> StatusClient:
    try:
        return status_client(contract, store)
    except HomeError as exc:
        raise UsageError(str(exc)) from None


CLOSE = "close"
"""`pollwarden decisions close`: the word in the operation's place."""


def cmd_decisions(args: argparse.Namespace) -> int:
    if args.operation == CLOSE:
        return _close_ended(args)
    if args.by is not None or args.note is not None:
        raise UsageError("--by and --note go with `pollwarden decisions close`; nothing changed")
    store = _open_store(args.home, keys="none")
    try:
        rows = store.decisions(args.operation, open_only=not args.all)
        if args.operation is not None and not rows and store.get(args.operation) is None:
            raise UsageError(unknown_operation(store.path, args.operation))
        rows = _with_provider_errors(store, rows)
    finally:
        store.close()
    if args.reason is not None:
        rows = [d for d in rows if d.request.why == args.reason]
    if args.json:
        print(json.dumps([d.to_json() for d in rows], sort_keys=True))
        return EXIT_OK
    if not rows:
        which = f" for operation {args.operation!r}" if args.operation else ""
        print(("no open decisions" if not args.all else "no decisions") + which)
        return EXIT_OK
    out = WrappedOut(sys.stdout)  # on a terminal (or with COLUMNS) word-wrapped; piped, as written
    for stored in rows:
        if stored.status != "open":
            print(f"[{stored.status} by {shown(stored.decided_by)}, option {stored.option}]", file=out)
        print(shown_request(stored.request).render(), file=out)
        decide_with = f"pollwarden decide {stored.request.decision_id} --option N --by YOUR_NAME  (or --refuse)"
        print(f"Decide with: {decide_with}", file=out)
        print(file=out)
    out.flush()
    return EXIT_OK


def _with_provider_errors(store: Store, rows: list[StoredDecision]) -> list[StoredDecision]:
    """A request written before requests carried the provider's error gets it from its operation's record, when
    the record is still at the stop the request is about."""
    missing = {d.request.decision_id: d.request.operation_id for d in rows if d.request.provider_error is None}
    if not missing:
        return rows
    records = store.get_many(list(missing.values()))
    filled = []
    for stored in rows:
        found = records.get(stored.request.operation_id)
        same_stop = found is not None and stop_marker(found.record) == stored.request.stop_marker
        if stored.request.decision_id in missing and found is not None and same_stop:
            stored = replace(stored, request=replace(stored.request, provider_error=found.record.provider_error))
        filled.append(stored)
    return filled


def _close_ended(args: argparse.Namespace) -> int:
    """`decisions close --by NAME [--reason R] [--note N]`: every open decision about a job the provider ended,
    closed by `closing.close_ended` (one `decide` each, audited), without a prompt."""
    if args.all:
        raise UsageError("--all does not go with `decisions close`: only open decisions can be closed")
    if args.by is None:
        raise UsageError("`decisions close` needs --by NAME: every close names the person who made it; nothing changed")
    if (problem := person_problem(args.by, args.note)) is not None:
        which, wrong = problem
        raise UsageError(f"--{which} {wrong}; nothing changed")
    if (bad := reason_problem(args.reason)) is not None:
        raise UsageError(f"--reason '{shown(args.reason)}': {bad}; nothing changed")
    store = _open_store(args.home, keys="write")
    try:
        done = close_ended(store, closable(store, args.reason), by=args.by.strip(), note=args.note)
    finally:
        store.close()
    closed = sum(1 for c in done if c.closed)
    if args.json:
        print(json.dumps({"closed": closed, "left_open": len(done) - closed, "decisions": [c.to_json() for c in done]}))
    elif not done:
        print(f"no open decision about a job that ended at the provider ({args.reason or ', '.join(BULK_REASONS)})")
    else:
        for c in done:
            if c.closed:
                print(f"closed {c.decision_id} (operation {shown(c.operation_id)}, {c.reason})")
            else:
                print(f"left open {c.decision_id} (operation {shown(c.operation_id)}): {shown(c.message)}")
        print(f"closed {closed} of {len(done)} decisions, each recorded in the audit log with --by {shown(args.by)}")
    return EXIT_OK if closed == len(done) else EXIT_ESCALATED


def cmd_decide(args: argparse.Namespace) -> int:
    if (args.option is None) is not args.refuse:
        raise UsageError("choose one: --option N (see `pollwarden decisions`) or --refuse")
    if (problem := person_problem(args.by, args.note)) is not None:
        which, wrong = problem
        raise UsageError(f"--{which} {wrong}; nothing changed")
    store = _open_store(args.home, keys="write")
    try:
        outcome = decide(store, args.decision, option=args.option, refuse=args.refuse, by=args.by, note=args.note)
    except (HomeError, DecisionError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        store.close()
    hint = resume_hint(args, outcome.resume) if outcome.resume else None
    if args.json:
        print(
            json.dumps({"status": outcome.status, "message": outcome.message, "action": outcome.action, "resume": hint})
        )
    else:
        print(shown(outcome.message))
        if hint:
            print(f"Resume with: {hint}  (or let a worker pick it up)")
    return EXIT_OK if not outcome.action or outcome.action.get("ok") else EXIT_ESCALATED


MAX_BODY_BYTES = 64 * 1024 * 1024
"""Far more than a job submission's JSON takes; a larger file (a device, a pipe that never ends) is refused
after reading this much, never read whole."""


def cmd_submit(args: argparse.Namespace) -> int:
    contract = _load_contract(args.contract, vars_of(args))
    try:
        if args.body == "-":
            body = read_stream_bounded(sys.stdin.buffer, MAX_BODY_BYTES, "standard input")
        else:
            body = read_bounded(args.body, MAX_BODY_BYTES)
    except OSError as exc:
        raise UsageError(f"--body {args.body}: {exc.strerror}") from None
    except TooLarge:
        raise UsageError(f"--body {args.body}: larger than {MAX_BODY_BYTES} bytes") from None
    try:
        json.loads(body)
    except (ValueError, RecursionError):  # json recurses once per nesting level
        sent = "a form of its fields" if contract.submit and contract.submit.encoding == "form" else "application/json"
        raise UsageError(f"--body {args.body}: not JSON; the submission body is sent as {sent}") from None
    operation_id = args.operation or new_operation_id(contract.name, utcnow(), secrets.token_hex(3))
    if problem := operation_id_problem(operation_id):
        raise UsageError(f"--operation {shown(operation_id)!r}: {problem}")
    limits = Limits(
        deadline=_duration(args.deadline, "--deadline"),
        max_requests=args.max_requests,
        useful_for=_duration(args.useful_for, "--useful-for"),
    )
    try:  # all that needs no store, before one is opened (or a credential read): exit 2 creates nothing
        admissible(contract, body, limits)
    except ActionRefused as exc:
        raise UsageError(str(exc)) from None
    store = _open_store(args.home, keys="write")
    try:
        now = store.db_now()
        # `submit` runs with its caller's own credential: the contract is installed as it starts (audited)
        install_as_caller(store, contract, via="submit", source=args.contract, now=now)
        with _client(contract, store) as client:
            try:
                submitted = submit(
                    store, contract, client, operation_id=operation_id, body=body, now=now, limits=limits
                )
            except ActionRefused as exc:
                raise UsageError(str(exc)) from None
            except ActionError as exc:
                print(f"pollwarden: {shown(exc)}", file=sys.stderr)
                return EXIT_ESCALATED
    finally:
        store.close()
    record = submitted.record
    print(
        f"submitted: operation {record.operation_id}, job {shown(record.job_id)}"
        + (f", status at {shown(record.status_location)}" if record.status_location else "")
    )
    if not args.watch:
        print(f"Watch it with: {resume_hint(args, record.operation_id)}")
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
        contract, record = _contract_of(store, args.operation, "fetch-result")
        out = Path(args.out)
        with _client(contract, store) as client, output_file(args.out, "--out") as temp:
            try:
                result = fetch_result(contract, client, record, temp)
            except ActionError as exc:
                raise UsageError(str(exc)) from None
        result = {**result, "out": str(out)}  # where it ends up, not the temporary file it was written to
        store.append(args.operation, ActionEvent.prepared(result), store.db_now())
    finally:
        store.close()
    if result["url"] is None:
        print(f"wrote the result ({result['bytes']} bytes of JSON, sha256 {result['sha256']}) to {shown(out)}")
    else:
        print(f"fetched {result['bytes']} bytes (sha256 {result['sha256']}) to {shown(out)}")
    if (part := part_words(record)) is not None:
        print(shown(part))
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancelling is new authority: it runs only as the option a person chose in a decision."""
    store = _open_store(args.home, keys="write")
    try:
        contract, record = _contract_of(store, args.operation, "cancel")
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
        with _client(contract, store) as client:
            result = cancel(contract, client, record)
        decided = approved[-1].request.decision_id
        store.append(args.operation, ActionEvent.prepared({**result, "decision_id": decided}), store.db_now())
    finally:
        store.close()
    print("cancel sent" if result["ok"] else f"cancel failed: {shown(result)}")
    return EXIT_OK if result["ok"] else EXIT_ESCALATED
