"""Reading what happened: `status`, `story` and `why`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ..core.contract.result import counts_text, result_text
from ..core.durations import DurationError, moment_end
from ..core.record import provider_error_text
from ..core.result_part import part_words
from ..core.words import delay_words
from ..home.directory import resolve_home, unknown_operation
from ..home.operating import operation_known
from ..report.story import story_json, story_lines
from ..report.why import WhyError, explain, pick
from ..shown import shown
from ..store.base import INSPECT_UNREADABLE, UnreadableRow
from ..store.roles import Contracts
from .common import (
    EXIT_OK,
    UsageError,
    _open_store,
    shown_json,
)
from .terminal import Column, FittedOut, WrappedOut, table, table_width

STATUS_COLUMNS = (
    Column("OPERATION", limit=32, middle=True),
    Column("PHASE"),
    Column("REASON", drop=2, limit=24),
    Column("STATE", drop=3, limit=16),
    Column("CHECKS", drop=2),
    Column("FLAGS"),
    Column("JOB", drop=4, limit=24, middle=True),
    Column("OWNER", drop=5, limit=48),
)
"""The status table's columns: on a narrow terminal the owner goes first, then the job, the state, the reason and
the checks; the operation, its phase and its flags (overdue, orphaned) always show, an id cut in the middle on a
very narrow one."""

# -- status and story ---------------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    from ..report.followup import follow_up_lines
    from ..report.ownership import ownership_of

    store = _open_store(args.home, keys="none")
    try:
        now = store.db_now()
        if args.operation:
            if args.overdue or args.orphaned:
                raise UsageError("--overdue and --orphaned filter the table: give them without an operation id")
            stored = store.get(args.operation)
            if stored is None:
                raise UsageError(unknown_operation(store.path, args.operation))
            owned = ownership_of(stored, now)
            summary = {**stored.record.summary(), **owned.to_json(), **_version(store, stored.contract_text)}
            if args.json:
                print(json.dumps(summary, sort_keys=True))
            else:
                out = FittedOut(sys.stdout)  # on a terminal each line is cut to its width; piped, every word
                summary["owner"] = owned.describe(now) if stored.record.phase.value == "active" else None
                summary["flags"] = " ".join(owned.flags) or None
                for key, value in summary.items():
                    if key in {"owner_since", "polling_now", "overdue", "orphaned"}:
                        continue  # said by `owner` and `flags` in words
                    # A result may be any JSON value: one line of compact JSON, never a Python repr.
                    if key == "result":
                        value = result_text(value)
                    elif key == "provider_error":
                        value = provider_error_text(value)  # its JSON, as the provider wrote it
                    elif key == "counts":
                        value = counts_text(tuple(value.items()))
                    print(f"{key:26} {shown(value)}", file=out)
                if stored.record.partial:  # a stop that kept the finished part of the job: say what part
                    print(f"{'partial result':26} {shown(part_words(stored.record))}", file=out)
                for line in follow_up_lines(store, stored, resolve_home(args.home)):
                    print(f"{'follow-up':26} {shown(line)}", file=out)  # what became of each decision (followup.py)
            return EXIT_OK
        listing = store.listing()
        rows = [(s, ownership_of(s, now)) for s in listing.operations]
        wanted = {flag for flag, on in (("overdue", args.overdue), ("orphaned", args.orphaned)) if on}
        if wanted:
            rows = [(s, o) for s, o in rows if wanted & set(o.flags)]
        unreadable = () if wanted else listing.unreadable
        if args.json:
            found = [{**s.record.summary(), **o.to_json()} for s, o in rows] + [u.to_json() for u in unreadable]
            print(json.dumps(found, sort_keys=True))
            return EXIT_OK
        if not rows:
            print(f"no {' or '.join(sorted(wanted))} operations" if wanted else "no operations yet")
            _print_unreadable(unreadable)
            return EXIT_OK
        cells = []
        for stored, owned in rows:
            r = stored.record
            active = r.phase.value == "active"
            cells.append(
                (
                    shown(r.operation_id),
                    r.phase.value,
                    r.reason.value if r.reason else "-",
                    shown(r.last_state),
                    f"{r.status_requests_used}/{r.plan.max_status_requests}",
                    " ".join(owned.flags) or "-",
                    shown(r.job_id),
                    shown(owned.describe(now)) if active else "-",
                )
            )
        table(STATUS_COLUMNS, cells, table_width(sys.stdout)).print(sys.stdout, more="`status OPERATION` or --json")
        _print_unreadable(unreadable)
        return EXIT_OK
    finally:
        store.close()


def _version(store: Contracts, text: str) -> dict[str, object]:
    """Which contract version the operation carries, and whether it is installed (nothing runs it otherwise)."""
    from ..core.contract.vars import text_digest

    digest = text_digest(text)
    found = store.installed_contract(digest)
    return {
        "contract_version": digest,
        "contract_installed_by": found.installed_by if found is not None else None,
        "contract_installed": found is not None,
    }


def _print_unreadable(rows: Sequence[UnreadableRow]) -> None:
    """Rows skipped because their record cannot be read: named, with why and how to look at them."""
    if not rows:
        return
    print(f"{len(rows)} operation{'s' if len(rows) != 1 else ''} could not be read, and no worker polls them:")
    for row in rows:
        print(f"  {shown(row.operation_id)}: {shown(row.why)}")
    print(f"  {INSPECT_UNREADABLE}")


def cmd_story(args: argparse.Namespace) -> int:
    store = _open_store(args.home, keys="read")
    try:
        events = store.events(args.operation)  # a submission whose outcome is unknown has a log but no record
        if not events and not operation_known(store, args.operation):
            raise UsageError(unknown_operation(store.path, args.operation))
        if args.json:
            print(json.dumps(story_json(events), sort_keys=True))
        else:
            out = WrappedOut(sys.stdout)  # on a terminal (or with COLUMNS) word-wrapped; piped, as written
            for line in story_lines(events):
                print(shown(line), file=out)
            out.flush()
        return EXIT_OK
    finally:
        store.close()


def cmd_why(args: argparse.Namespace) -> int:
    at = None
    if args.at:
        try:
            at = moment_end(args.at)  # `2026-12-06T18:40:00Z` as `story` prints it: that whole second
        except DurationError as exc:
            raise UsageError(f"--at: {exc}") from None
    store = _open_store(args.home, keys="read")
    try:
        if not operation_known(store, args.operation):
            raise UsageError(unknown_operation(store.path, args.operation))
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
    out = WrappedOut(sys.stdout)  # on a terminal (or with COLUMNS) word-wrapped; piped, as written

    def say(text: str) -> None:
        print(text, file=out)

    data = shown_json(explanation.to_json())
    decision = data["decision"]
    inputs = data["inputs"] or {}
    record = inputs.get("record", {})
    say(f"decision at record {data['seq']} ({data['at']}): rule {data['rule']!r} -> {decision['action']}")
    if decision.get("reason"):
        say(f"  reason: {decision['reason']}")
    if decision.get("next_poll_at"):
        say(
            f"  next check: {decision['next_poll_at']} ({delay_words(decision['delay_source'])}; raw delay"
            f" {decision['raw_delay']}, jitter draw {decision['jitter_u']})"
        )
    say(f"  detail: {decision['detail']}")
    for rejection in decision.get("rejections") or []:
        say(f"  rejected {rejection['source']} {shown(repr(rejection['value']))}: {rejection['why']}")
    say("inputs:")
    say(f"  now: {inputs.get('now')}")
    if record:
        say(
            f"  record: checks {record['status_requests_used']} of {record['plan']['max_status_requests']},"
            f" transport failures {record['transport_failures_used']} of {record['plan']['max_transport_failures']},"
            f" deadline {record['plan']['deadline_at']}, last state {record.get('last_state')}"
        )
    observation = inputs.get("observation")
    if observation:
        say(
            f"  observation: {observation['kind']}, HTTP {observation['http_status']}, state {observation['state']},"
            f" Retry-After {observation['retry_after_header']}, hint {observation['hint_at']}"
        )
    if explanation.replayed is None:
        say("replay: not possible (this record carries no inputs)")
    elif explanation.same:
        say("replay: today's core decides the same")
    else:
        say("replay: today's core decides DIFFERENTLY:")
        for difference in explanation.differences:
            say(f"  {shown(difference)}")
    out.flush()
    return EXIT_OK
