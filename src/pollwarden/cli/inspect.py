"""Reading what happened: `status`, `story` and `why`."""

from __future__ import annotations

import argparse
import json

from ..core.contract_result import result_text
from ..core.durations import DurationError, parse_rfc3339
from ..home import unknown_operation
from ..shown import shown
from ..story import story_json, story_lines
from ..why import WhyError, explain, pick
from .common import (
    EXIT_OK,
    UsageError,
    _open_store,
    shown_json,
)

# -- status and story ---------------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    store = _open_store(args.home, keys="none")
    try:
        if args.operation:
            stored = store.get(args.operation)
            if stored is None:
                raise UsageError(unknown_operation(store.path, args.operation))
            summary = stored.record.summary()
            if args.json:
                print(json.dumps(summary, sort_keys=True))
            else:
                for key, value in summary.items():
                    # A result may be any JSON value: one line of compact JSON, never a Python repr.
                    print(f"{key:26} {shown(result_text(value) if key == 'result' else value)}")
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
                f"{shown(r.operation_id):40} {shown(r.job_id):20} {r.phase.value:10}"
                f" {(r.reason.value if r.reason else '-'):26} {shown(r.last_state):16}"
                f" {r.status_requests_used}/{r.plan.max_status_requests}"
            )
        return EXIT_OK
    finally:
        store.close()


def cmd_story(args: argparse.Namespace) -> int:
    store = _open_store(args.home, keys="read")
    try:
        events = store.events(args.operation)  # a submission whose outcome is unknown has a log but no record
        if not events and store.get(args.operation) is None:
            raise UsageError(unknown_operation(store.path, args.operation))
        if args.json:
            print(json.dumps(story_json(events), sort_keys=True))
        else:
            for line in story_lines(events):
                print(shown(line))
        return EXIT_OK
    finally:
        store.close()


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
    data = shown_json(explanation.to_json())
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
        print(f"  rejected {rejection['source']} {shown(repr(rejection['value']))}: {rejection['why']}")
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
            print(f"  {shown(difference)}")
    return EXIT_OK
