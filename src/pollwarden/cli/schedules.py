"""`pollwarden schedules`: each contract's learnt schedule (issue 26), read from the store's samples.

For every contract with ended operations: how many samples (and how many censored), the quantiles of its jobs'
durations, the checks the learnt plan places for its lag target, and the requests per job that plan expects
against the plain backoff's, both from the same estimate. A contract with a `[schedule] learn_key` shows each key's
own distribution after its whole history's.
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta

from ..core.durations import format_duration
from ..core.learnt import MIN_ENDED, Summary
from ..engine.learning import summaries
from .common import _open_store


def cmd_schedules(args: argparse.Namespace) -> int:
    store = _open_store(args.home, keys="none")
    try:
        found = summaries(store)
    finally:
        store.close()
    if args.json:
        print(json.dumps({"contracts": [one.to_json() for one in found]}, sort_keys=True))
        return 0
    if not found:
        print("no operation has ended yet: every contract polls with its plain backoff")
    for one in found:
        print(_text(one))
    return 0


def _say(seconds: float) -> str:
    return format_duration(timedelta(seconds=round(seconds)))


def _text(one: Summary) -> str:
    name = one.contract if one.key is None else f"{one.contract} key {one.key!r}"
    head = f"{name}: {one.samples} samples ({one.censored} censored)"
    model = one.model
    if model is None:
        fallback = "the plain backoff" if one.key is None else "the contract's whole history"
        return f"{head}; fewer than {MIN_ENDED} ended: {fallback}"
    checks = ", ".join(_say(c) for c in model.checks[:12]) + (", ..." if len(model.checks) > 12 else "")
    plain = "?" if one.plain_expected is None else f"{one.plain_expected:.2f}"
    return (
        f"{head}\n"
        f"  durations  p5 {_say(model.p5)}, p50 {_say(model.p50)}, p95 {_say(model.p95)},"
        f" longest {_say(model.longest)}\n"
        f"  checks at  {checks} (then the plain backoff), for a p95 lag of {_say(model.lag_target)}\n"
        f"  requests per job expected: {model.expected:.2f} learnt, {plain} with the plain backoff"
    )
