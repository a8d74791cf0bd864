"""`pollwarden contracts check NAME|FILE --answer FILE`: one recorded answer through a contract, sending nothing.

The replay is the core's (`core.replay`: `observe` and `decide`, as a poll runs them); this module reads the
file and words the outcome: the meaning, the fields the contract reads (the result among them), and the next wait
with its source. Exit 0 when the watch would act on the answer (wait, succeed, or end with the job's own end), 4
when it would stop for a person (`unknown` for a state or an HTTP status the contract does not document), 2 for a
file that cannot be read as an answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timedelta

from ..clock import utcnow
from ..core.bounded import TooLarge, read_bounded, read_stream_bounded
from ..core.decide import Action
from ..core.durations import format_duration, format_rfc3339
from ..core.observe import Kind
from ..core.reasons import Category, DelaySource, StopReason
from ..core.record import provider_error_value
from ..core.replay import MAX_ANSWER_FILE_BYTES, Replay, ReplayError, read_answer, replay
from ..core.words import delay_words
from ..shown import shown
from .common import EXIT_ESCALATED, EXIT_OK, UsageError, _load_contract, vars_of


def cmd_contracts_check(args: argparse.Namespace) -> int:
    contract = _load_contract(args.contract, vars_of(args))
    name = "standard input" if args.answer == "-" else args.answer
    try:
        if args.answer == "-":
            data = read_stream_bounded(sys.stdin.buffer, MAX_ANSWER_FILE_BYTES, name)
        else:
            data = read_bounded(args.answer, MAX_ANSWER_FILE_BYTES)
        answer = read_answer(data, f"--answer {name}", cap=contract.max_body_bytes)
    except OSError as exc:
        raise UsageError(f"--answer {shown(name)}: {exc.strerror or type(exc).__name__}") from None
    except TooLarge:
        raise UsageError(f"--answer {shown(name)}: larger than {MAX_ANSWER_FILE_BYTES} bytes") from None
    except ReplayError as exc:
        raise UsageError(shown(str(exc))) from None
    result = replay(contract, answer, utcnow())
    if args.json:
        head = {"contract": contract.name, "answer": {"status": answer.status, "bytes": len(answer.body)}}
        shown_json = result.to_json()
        seen = shown_json.get("observation")
        if isinstance(seen, dict) and "provider_error" in seen:  # a JSON value, as `watch --json` gives it
            shown_json["observation"] = {**seen, "provider_error": provider_error_value(seen["provider_error"])}
        print(json.dumps({**head, **shown_json}, sort_keys=True, ensure_ascii=False))
    else:
        print(f"contract {shown(contract.name)}: HTTP {answer.status}, {len(answer.body)} bytes of body")
        for line in _lines(result):
            print(shown(line))
    return EXIT_ESCALATED if result.stops_the_watch else EXIT_OK


def _lines(result: Replay) -> list[str]:
    obs = result.observation
    meaning = result.meaning
    if obs.kind is Kind.JOB_STATE and obs.category is Category.UNKNOWN:
        meaning += f": state {obs.state!r} is not in the contract's [states]"
    elif obs.kind is Kind.JOB_STATE:
        meaning += f" (state {obs.state!r})"
    else:
        meaning += f": {obs.detail}"
    lines = [f"meaning: {meaning}", "fields:"]
    fields = {
        "state": obs.state,
        "result": None if obs.result is None else json.dumps(obs.result, ensure_ascii=False),
        "result problem": obs.result_problem,
        "error": obs.provider_error,
        "expires_at": _moment(obs.expires_at, result.now),
        "hint": None if obs.hint_at is None else f"{obs.hint_field}: {_moment(obs.hint_at, result.now)}",
        "retry-after": None
        if obs.retry_after is None
        else f"{obs.retry_after_header} ({_moment(obs.retry_after, result.now)})",
        "request id": obs.request_id,
    }
    lines.extend(f"  {label:<15}{value}" for label, value in fields.items() if value is not None)
    if len(lines) == 2:
        lines.append("  (none read)")
    lines.extend(f"rejected: {r.source} {r.value!r}: {r.why}" for r in result.earliest.rejections)
    lines.append(f"next: {_next(result)}")
    return lines


def _next(result: Replay) -> str:
    decision = result.earliest
    if decision.action is Action.SUCCEED:
        return "the watch succeeds (exit 0)"
    if decision.action is Action.STOP:
        reason = decision.reason.value if decision.reason else "stopped"
        if decision.reason is not None and decision.reason.job_ended:
            return f"the watch ends: {reason}, the job's own end (exit 3)"
        why = "" if decision.reason is StopReason.UNKNOWN_STATE else f" ({decision.detail})"
        return f"the watch stops for a person: {reason}{why} (exit 4)"
    wait = result.next_wait
    assert wait is not None
    shortest, longest, first, last = wait
    if shortest == longest:
        span = f"wait {format_duration(shortest)} ({_source(first)})"
    elif first is last:
        jittered = "" if decision.raw_delay is None else f": {format_duration(decision.raw_delay)}, jittered"
        span = f"wait {format_duration(shortest)} to {format_duration(longest)} ({_source(first)}{jittered})"
    else:
        span = (
            f"wait {format_duration(shortest)} ({_source(first)}) to {format_duration(longest)} ({_source(last)}),"
            " by the jitter draw"
        )
    return f"{span}, then check again" + (f"; {decision.detail}" if "deadline" in decision.detail else "")


def _source(source: DelaySource) -> str:
    return delay_words(source)


def _moment(moment: datetime | None, now: datetime) -> str | None:
    """A time the answer names, and how far it is from the replay's moment."""
    if moment is None:
        return None
    away = moment - now
    words = f"in {format_duration(away)}" if away >= timedelta(0) else f"{format_duration(-away)} ago"
    return f"{format_rfc3339(moment)}, {words}"
