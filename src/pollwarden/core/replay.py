"""One recorded answer replayed through a contract (`pollwarden contracts check`), sending nothing.

The answer goes through the poll's own path: `observe` reads it as the status client's answer, and `decide`
judges it as the first check of a new operation, so what `check` prints is what a watch would do. A recorded
answer is a file a person gives, hostile until parsed: either the JSON body alone (its bytes are the body, read
exactly as a poll reads one), or an envelope `{"status": 200, "headers": {...}, "body": ...}` (`body_text` for a
body that is not JSON); anything else is a `ReplayError` naming the file and what is wrong.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..errors import PollwardenError
from .contract.parse import Contract
from .decide import Action, Decision, decide, reserve
from .durations import format_duration
from .expr import json_type
from .observe import BodyError, Kind, Observation, Response, observe, parse_document
from .reasons import Category, DelaySource
from .record import new_record

ENVELOPE_KEYS = frozenset({"status", "headers", "body", "body_text"})
MAX_ANSWER_FILE_BYTES = 64 * 1024 * 1024
"""A recorded answer's file is read up to this much; a larger one (a device, a pipe) is refused."""
DECODED_ENCODINGS = frozenset({"gzip", "deflate"})
"""What the status client decodes and then drops from the headers: a recorded body is the decoded one."""
HIGHEST_DRAW = math.nextafter(1.0, 0.0)


class ReplayError(PollwardenError, ValueError):
    """A recorded answer that cannot be replayed: the message names the file and what is wrong with it."""


def read_answer(data: bytes, source: str, *, cap: int) -> Response:
    """The status response a recorded answer file describes, as the client would hand it over (`cap`: the
    contract's body cap, past which the body is cut and marked, as on the wire)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReplayError(f"{source}: not UTF-8 text (invalid byte at offset {exc.start})") from None
    try:
        loose = json.loads(text)
    except RecursionError:
        raise ReplayError(f"{source}: nests too deeply to be read") from None
    except ValueError as exc:
        why = f"{exc.msg} at offset {exc.pos}" if isinstance(exc, json.JSONDecodeError) else "not JSON"
        raise ReplayError(
            f"{source}: not JSON ({why}); give the status body as JSON, or an answer like"
            ' {"status": 200, "headers": {...}, "body_text": "..."} for a body that is not JSON'
        ) from None
    if not _is_envelope(loose):
        return _response(200, {}, data, cap)  # the file is the body: its bytes, exactly as a poll reads them
    try:
        envelope = parse_document(data)  # the envelope itself as strictly as an answer: no repeated key, no NaN
    except BodyError as exc:
        raise ReplayError(f"{source}: {str(exc).replace('body', 'the answer file', 1)}") from None
    status = envelope["status"]
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        raise ReplayError(f"{source}: status must be an HTTP status from 100 to 599, got {_short(status)}")
    headers = _headers(envelope.get("headers", {}), source)
    if "body" in envelope and "body_text" in envelope:
        raise ReplayError(f"{source}: give body (any JSON) or body_text (a string), not both")
    if "body_text" in envelope:
        if not isinstance(envelope["body_text"], str):
            raise ReplayError(f"{source}: body_text must be a string, got a JSON {json_type(envelope['body_text'])}")
        body = envelope["body_text"].encode("utf-8")
    elif "body" in envelope:
        body = json.dumps(envelope["body"], ensure_ascii=False).encode("utf-8")
    else:
        body = b""
    return _response(status, headers, body, cap)


def _is_envelope(value: Any) -> bool:
    """An object of envelope keys only, with a status, that says it is one: an integer status or another
    envelope key. `{"status": "running"}` is a body; a body that is exactly `{"status": <integer>}` must be wrapped."""
    if not isinstance(value, dict) or "status" not in value or not set(value) <= ENVELOPE_KEYS:
        return False
    status = value["status"]
    return len(value) > 1 or (isinstance(status, int) and not isinstance(status, bool))


def _headers(value: Any, source: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ReplayError(f"{source}: headers must be an object of names to strings, got a JSON {json_type(value)}")
    headers: dict[str, str] = {}
    for name, text in value.items():
        if not name or any(not ("!" <= ch <= "~") or ch in '"(),/:;<=>?@[\\]{}' for ch in name):
            raise ReplayError(f"{source}: header name {_short(name)} is not an HTTP header name")
        if not isinstance(text, str) or any(ch in text for ch in "\r\n\x00"):
            raise ReplayError(f"{source}: header {name}: the value must be a string on one line")
        key = name.lower()
        if key == "content-encoding" and text.strip().lower() in DECODED_ENCODINGS:
            continue  # the client decodes these and drops the header: the recorded body is the decoded one
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


def _response(status: int, headers: Mapping[str, str], body: bytes, cap: int) -> Response:
    # The status client's side of it: times are the replay's own (`replay` sets them), the body cut at the cap.
    epoch = datetime.min
    return Response(status, dict(headers), body[:cap], sent_at=epoch, received_at=epoch, truncated=len(body) > cap)


@dataclass(frozen=True)
class Replay:
    """What a watch would make of the answer as its first check: the observation, and the decision at both ends
    of the jitter draw (the next wait is a range unless the provider's word fixes it)."""

    observation: Observation
    earliest: Decision
    latest: Decision
    now: datetime

    @property
    def meaning(self) -> str:
        """The answer's meaning in one word: the state's category, `unknown` for what the contract does not
        document (a state not in [states], an HTTP status not in the contract), else the kind of answer."""
        obs = self.observation
        if obs.kind is Kind.JOB_STATE:
            return (obs.category or Category.UNKNOWN).value
        return "unknown" if obs.kind is Kind.UNEXPECTED_STATUS else obs.kind.value

    @property
    def stops_the_watch(self) -> bool:
        """The watch would stop for a person (exit 4): not a wait, a success or the job's own end."""
        decision = self.earliest
        return decision.action is Action.STOP and not (decision.reason is not None and decision.reason.job_ended)

    @property
    def next_wait(self) -> tuple[timedelta, timedelta, DelaySource, DelaySource] | None:
        """(shortest, longest, source of each) when the watch would wait; None when it would not."""
        low, high = self.earliest, self.latest
        if low.action is not Action.WAIT or low.next_poll_at is None or high.next_poll_at is None:
            return None
        assert low.delay_source is not None and high.delay_source is not None
        return low.next_poll_at - self.now, high.next_poll_at - self.now, low.delay_source, high.delay_source

    def to_json(self) -> dict[str, Any]:
        wait = self.next_wait
        decision = self.earliest
        return {
            "meaning": self.meaning,
            "stops_the_watch": self.stops_the_watch,
            "observation": self.observation.to_json(),
            "decision": {
                "action": decision.action.value,
                "rule": decision.rule,
                "reason": decision.reason.value if decision.reason else None,
                "detail": decision.detail,
            },
            "next_wait": None
            if wait is None
            else {
                "shortest": format_duration(wait[0]),
                "longest": format_duration(wait[1]),
                "shortest_seconds": wait[0].total_seconds(),
                "longest_seconds": wait[1].total_seconds(),
                "shortest_source": wait[2].value,
                "longest_source": wait[3].value,
                "raw_delay": format_duration(decision.raw_delay) if decision.raw_delay is not None else None,
            },
            "rejections": [r.to_json() for r in decision.rejections],
        }


def replay(contract: Contract, answer: Response, now: datetime) -> Replay:
    """`answer` observed and decided as the first check of a new operation under `contract`, made at `now`."""
    record = new_record(
        contract, operation_id="contracts-check", job_id="check", now=now - contract.schedule.first_check
    )
    reserved = reserve(record, now)
    timed = Response(
        answer.status, answer.headers, answer.body, sent_at=now, received_at=now, truncated=answer.truncated
    )
    observation = observe(contract, timed)
    earliest = decide(reserved, observation, now, 0.0)
    latest = decide(reserved, observation, now, HIGHEST_DRAW)
    return Replay(observation, earliest, latest, now)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
