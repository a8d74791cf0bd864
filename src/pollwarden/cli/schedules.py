"""`pollwarden schedules`: each contract's learnt schedule (issue 26), read from the store's samples.

For every contract with ended operations: how many samples (and how many censored), the quantiles of its jobs'
durations, the checks the learnt plan places for its lag target, and the requests per job that plan expects
against the plain backoff's, both from the same estimate. A contract with a `[schedule] learn_key` shows each key's
own distribution after its whole history's.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..core.learnt import Summary
from ..engine.learning import said, summaries
from .common import _open_store
from .terminal import WrappedOut


def cmd_schedules(args: argparse.Namespace) -> int:
    store = _open_store(args.home, keys="none")
    try:
        found = summaries(store)
    finally:
        store.close()
    if args.json:
        print(json.dumps({"contracts": [one.to_json() for one in found]}, sort_keys=True))
        return 0
    out = WrappedOut(sys.stdout)  # on a terminal (or with COLUMNS) word-wrapped; piped, as written
    if not found:
        print("no operation has ended yet: every contract polls with its plain backoff", file=out)
    for one in found:
        print(_text(one), file=out)
    out.flush()
    return 0


def _text(one: Summary) -> str:
    name = one.contract if one.key is None else f"{one.contract} key {one.key!r}"
    words = said(one)
    if words.fallback is not None:
        return f"{name}: {words.samples}; {words.fallback}"
    return (
        f"{name}: {words.samples}\n"
        f"  durations  {words.durations}\n"
        f"  checks at  {words.checks}\n"
        f"  requests per job expected: {words.learnt} learnt, {words.plain} with the plain backoff"
    )
