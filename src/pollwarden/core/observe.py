"""One HTTP exchange, classified by the contract into what it says about the job (R1).

The HTTP result and the job result are two facts: a 200 proves the endpoint answered, and only the
contract's state table says what the body means. Nothing here reads a clock or a socket: the driver
hands over bytes, headers and the times it measured.
"""

from __future__ import annotations

import codecs
import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from ..errors import EXIT_ESCALATED, PollwardenError
from .contract.parse import Contract
from .contract.result import MAX_RESULT_LENGTH as MAX_RESULT_LENGTH
from .contract.result import Counts, JSONValue, check_result
from .contract.signals import Meaning
from .durations import DurationError, format_rfc3339, parse_timestamp
from .expr import absent_words, described, json_type, lookup
from .learnt_inputs import estimate_at, key_value
from .ratelimit import matching, reset_at
from .reasons import Category
from .schedule import Rejection, parse_retry_after, shorten


@dataclass(frozen=True)
class Response:
    """A status response as received; `headers` keys are lower-case, `body` at most the contract's cap."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    sent_at: datetime
    received_at: datetime
    truncated: bool = False


class FailureKind(StrEnum):
    CONNECT = "connect"  # refused, unreachable, DNS, TLS: the request never reached the provider
    TIMEOUT = "timeout"  # sent, no answer in time: delivery unknown
    RESET = "reset"  # connection dropped after sending: delivery unknown
    PROTOCOL = "protocol"  # the peer spoke broken HTTP
    LOCAL = "local"  # refused here before a byte was written (a URL or header that cannot be sent): not delivered


@dataclass(frozen=True)
class TransportFailure:
    kind: FailureKind
    message: str
    sent_at: datetime
    failed_at: datetime

    @property
    def delivery_unknown(self) -> bool:
        """Did the provider perhaps receive it? Only a failure before sending proves it did not."""
        return self.kind not in (FailureKind.CONNECT, FailureKind.LOCAL)


Exchange = Response | TransportFailure


class Kind(StrEnum):
    JOB_STATE = "job_state"
    INVALID_RESPONSE = "invalid_response"
    SERVER_ERROR = "server_error"
    TRANSPORT = "transport"
    RATE_LIMITED = "rate_limited"
    AUTH_DENIED = "auth_denied"
    TOKEN_REFUSED = "token_refused"  # a 401 to a token a command or file can give again: fetched again once
    NOT_FOUND = "not_found"
    REDIRECT = "redirect"
    UNEXPECTED_STATUS = "unexpected_status"
    LOCAL_ERROR = "local_error"  # our side could not send the request: an integration error, not a provider fact


@dataclass(frozen=True)
class Observation:
    """What one exchange proves, and nothing more; `detail` is safe to show a person."""

    kind: Kind
    observed_at: datetime
    http_status: int | None = None
    request_id: str | None = None
    state: str | None = None
    category: Category | None = None
    result: JSONValue = None
    """The validated result (any JSON value `[result]` allows); None when there is none."""
    result_problem: str | None = None
    provider_error: str | None = None
    expires_at: datetime | None = None
    retry_after: datetime | None = None
    retry_after_header: str | None = None
    hint_at: datetime | None = None
    hint_field: str | None = None
    rejections: tuple[Rejection, ...] = field(default=())
    delivery_unknown: bool = False
    detail: str = ""
    counts: Counts | None = None
    """What part of the job the answer says is done (`[fields].counts`): number members only; None when unread."""
    learn_key: str | None = None
    """The value `[schedule] learn_key` names in this answer, parsed hostile (`core.learnt_inputs.key_value`)."""
    estimate_at: datetime | None = None
    """When the provider says this pending job will end (`[fields] estimated_completion_at`), if believable."""

    def to_json(self) -> dict[str, Any]:
        seen = {
            "kind": self.kind.value,
            "observed_at": format_rfc3339(self.observed_at),
            "http_status": self.http_status,
            "request_id": self.request_id,
            "state": self.state,
            "category": self.category.value if self.category else None,
            "result": self.result,
            "result_problem": self.result_problem,
            "provider_error": self.provider_error,
            "expires_at": _t(self.expires_at),
            "retry_after": _t(self.retry_after),
            "retry_after_header": self.retry_after_header,
            "hint_at": _t(self.hint_at),
            "hint_field": self.hint_field,
            "rejections": [r.to_json() for r in self.rejections],
            "delivery_unknown": self.delivery_unknown,
            "detail": self.detail,
        }
        if self.counts is not None:  # only when read, so every older observation keeps its audited shape
            seen["counts"] = dict(self.counts)
        if self.learn_key is not None:  # the same: only when read
            seen["learn_key"] = self.learn_key
        if self.estimate_at is not None:
            seen["estimate_at"] = format_rfc3339(self.estimate_at)
        return seen


def _t(moment: datetime | None) -> str | None:
    return None if moment is None else format_rfc3339(moment)


def observe(contract: Contract, exchange: Exchange) -> Observation:
    if isinstance(exchange, TransportFailure):
        return Observation(
            kind=Kind.LOCAL_ERROR if exchange.kind is FailureKind.LOCAL else Kind.TRANSPORT,
            observed_at=exchange.failed_at,
            delivery_unknown=exchange.delivery_unknown,
            detail=(
                f"not sent, a local error: {exchange.message}"
                if exchange.kind is FailureKind.LOCAL
                else f"{exchange.kind.value}: {exchange.message}"
            ),
        )
    response = exchange
    at = response.received_at
    request_id = _clean_header(response.headers.get(contract.request_id_header.lower()))
    status = response.status

    raw_retry = response.headers.get("retry-after")
    shown_retry = None if raw_retry is None else _short(raw_retry.strip())

    def make(kind: Kind, detail: str, **extra: Any) -> Observation:
        return Observation(
            kind=kind,
            observed_at=at,
            http_status=status,
            request_id=request_id,
            retry_after_header=shown_retry,
            detail=detail,
            **extra,
        )

    document = functools.cache(lambda: _document_or_none(response))  # parsed once, and only if a signal asks
    signal = matching(contract.rate_limits, status, response.headers, document)
    success_retry = 200 <= status < 300 and contract.schedule.retry_after_on_success
    retry_after: datetime | None = None
    rejections: tuple[Rejection, ...] = ()
    if raw_retry is not None and (status == 429 or status >= 500 or signal is not None or success_retry):
        parsed = parse_retry_after(raw_retry, at)
        if isinstance(parsed, Rejection):
            rejections = (parsed,)
        else:
            retry_after = parsed
    if signal is not None:  # the contract's own signals come before the status-code table
        number, matched = signal
        if matched.means is Meaning.AUTHORIZATION_DENIED:
            return make(
                Kind.AUTH_DENIED,
                f"HTTP {status} matches [[rate_limit]] {number}, which means authorization_denied:"
                " a quota or billing limit a person must act on",
            )
        reset = reset_at(matched, response.headers, document, at)
        if isinstance(reset, Rejection):
            rejections += (reset,)
        elif reset is not None:
            retry_after = reset if retry_after is None else max(retry_after, reset)
        if matched.min_wait is not None:  # the signal's own minimum: a floor no reset or schedule lowers
            floor = at + matched.min_wait
            retry_after = floor if retry_after is None else max(retry_after, floor)
        return make(
            Kind.RATE_LIMITED,
            f"HTTP {status} matches [[rate_limit]] {number}",
            retry_after=retry_after,
            rejections=rejections,
        )
    if status == 401 and contract.auth is not None and contract.auth.refreshable:
        return make(Kind.TOKEN_REFUSED, "HTTP 401: the token was refused")
    if status in (401, 403):
        return make(Kind.AUTH_DENIED, f"HTTP {status}: the credential was refused")
    if status == 429:
        return make(Kind.RATE_LIMITED, "HTTP 429", retry_after=retry_after, rejections=rejections)
    if status >= 500:
        return make(
            Kind.SERVER_ERROR,
            f"HTTP {status} from the provider",
            retry_after=retry_after,
            rejections=rejections,
        )
    if status == 404:
        return make(Kind.NOT_FOUND, "HTTP 404: the provider does not know this job")
    if 300 <= status < 400:
        return make(
            Kind.REDIRECT,
            f"HTTP {status} redirect not followed: a credential must not travel to an unnamed host",
        )
    if not 200 <= status < 300:
        return make(Kind.UNEXPECTED_STATUS, f"HTTP {status} is not in the contract")
    return _classify_body(contract, response, make, rejections, retry_after)


def _document_or_none(response: Response) -> dict[str, Any] | None:
    """The body for a [[rate_limit]] body predicate: a body that is cut or not a JSON object matches nothing."""
    if response.truncated:
        return None
    try:
        return parse_document(response.body)
    except BodyError:
        return None


def _classify_body(
    contract: Contract,
    response: Response,
    make: Callable[..., Observation],
    rejections: tuple[Rejection, ...],
    retry_after: datetime | None = None,
) -> Observation:
    """A 2xx answer's body; `retry_after` is set only when the contract says its provider means one on a 2xx."""

    def invalid(detail: str) -> Observation:
        return make(Kind.INVALID_RESPONSE, detail, rejections=rejections)

    if response.truncated:
        return invalid(f"body larger than the {contract.max_body_bytes}-byte cap")
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        # The client decodes gzip and deflate and then drops the header, so one still here was not decoded.
        return invalid(f"body is sent with Content-Encoding {_short(encoding)!r}, which is not gzip or deflate")
    try:
        document = parse_document(response.body)
    except BodyError as exc:
        return invalid(str(exc))
    fields = contract.fields
    found = lookup(fields.state, document)
    if found.problem is not None or not found.present:
        return invalid(f"state field {fields.state!r} {absent_words(found)}")
    state = found.value
    if not isinstance(state, str):
        return invalid(f"state field {fields.state!r} is {described(state)}, not a string")
    category = contract.states.category(state)
    at = response.received_at
    result, result_problem = _result(contract, document) if category is Category.SUCCESS else (None, None)
    if category.value in contract.result.partial:
        result, kept = _partial_result(contract, document)
        rejections += kept
    counts = None
    if fields.counts and category is not Category.PENDING:
        counts, problem = read_counts(fields.counts, document)
        rejections += problem
    expires_at = None
    if fields.expires_at:
        expires_at, problem = _moment(document, fields.expires_at, contract.timestamps.expires_at)
        rejections += problem
    hint_at, hint_field, hint_rejections = _hint(document, contract, at)
    learn_key, estimate = None, None
    if contract.schedule.learn_key is not None:
        learn_key, key_problem = key_value(contract.schedule.learn_key, document)
        rejections += () if key_problem is None else (key_problem,)
    if category is Category.PENDING:
        estimate, estimate_problems = estimate_at(contract, document, at)
        rejections += estimate_problems
    provider_error = None
    if fields.error and category is not Category.SUCCESS:
        err = lookup(fields.error, document)
        if err.present:
            provider_error = _error_text(err.value)
    return make(
        Kind.JOB_STATE,
        f"state {state[:200]!r} ({category.value})",
        state=state[:200],
        category=category,
        result=result,
        result_problem=result_problem,
        provider_error=provider_error,
        expires_at=expires_at,
        retry_after=retry_after,
        hint_at=hint_at,
        hint_field=hint_field,
        rejections=rejections + hint_rejections,
        counts=counts,
        learn_key=learn_key,
        estimate_at=estimate,
    )


def _partial_result(contract: Contract, document: Any) -> tuple[JSONValue, tuple[Rejection, ...]]:
    """The finished part of a job the provider ended (`[result].partial`): kept when present and valid. Absent or
    null is no partial result, which is normal; a value `[result]` refuses is not kept, and the trail says why."""
    path = contract.fields.result
    assert path is not None, "a [result] table needs [fields].result"
    found = lookup(path, document)
    if found.problem is not None:
        return None, (Rejection(path, "", found.problem),)
    if not found.present:
        return None, ()
    result, problem = check_result(contract.result, path, True, found.value)
    if problem is not None:
        return None, (Rejection(path, _short(found.value), f"not kept as a partial result: {problem}"),)
    return result, ()


MAX_COUNTS = 32
"""More tallies than any provider reports; the rest of a larger object is left out, never stored."""


def read_counts(path: str, document: Any) -> tuple[Counts | None, tuple[Rejection, ...]]:
    """The provider's tallies of the job (`request_counts`, Translator's `summary`, Language's `tasks`): the number
    members of the object `path` names, at most MAX_COUNTS, names of at most 64 characters. Absent is none."""
    found = lookup(path, document)
    if found.problem is not None:
        return None, (Rejection(path, "", found.problem),)
    if not found.present:
        return None, ()
    value = found.value
    if isinstance(value, dict):
        numbers = {
            key: number
            for key, number in value.items()
            if len(key) <= 64 and not isinstance(number, bool) and isinstance(number, int | float)
        }
        if numbers:
            return tuple(numbers.items())[:MAX_COUNTS], ()
    return None, (Rejection(path, _short(value), "not an object with numbers (counts)"),)


def _error_text(value: Any) -> str:
    """A provider's message as a person reads it: a list of messages joined, anything else as compact JSON."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        text = "; ".join(value)
    else:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text[:2000]


def _moment(document: Any, path: str, form: str) -> tuple[datetime | None, tuple[Rejection, ...]]:
    """A time field in the contract's declared form; a value that is not one is a rejection, never a guess."""
    found = lookup(path, document)
    if found.problem is not None:
        return None, (Rejection(path, "", found.problem),)
    if not found.present:
        return None, ()
    try:
        return parse_timestamp(found.value, form), ()
    except DurationError:
        return None, (Rejection(path, _short(found.value), f"not {_FORM_WORDS[form]}"),)


_FORM_WORDS = {
    "rfc3339": "an RFC 3339 timestamp",
    "epoch_seconds": "a Unix time in seconds",
    "epoch_millis": "a Unix time in milliseconds",
}


def _result(contract: Contract, document: Any) -> tuple[JSONValue, str | None]:
    """An artifact reference is validated before success is declared (R17)."""
    path = contract.fields.result
    if path is None:
        return None, None
    found = lookup(path, document)
    if found.problem is not None or (not found.present and not found.plain):
        return None, f"result field {path!r} {absent_words(found)}"
    return check_result(contract.result, path, not found.missing, found.value)


def _hint(document: Any, contract: Contract, at: datetime) -> tuple[datetime | None, str | None, tuple[Rejection, ...]]:
    """Provider guidance is parsed here and judged against the deadline in the schedule (R9)."""
    fields = contract.fields
    rejections: list[Rejection] = []
    if fields.poll_after_seconds:
        found = lookup(fields.poll_after_seconds, document)
        raw = found.value
        if found.problem is not None:
            rejections.append(Rejection(fields.poll_after_seconds, "", found.problem))
        elif found.present:
            if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
                rejections.append(Rejection(fields.poll_after_seconds, _short(raw), "not a number of seconds"))
            elif raw < 0:
                rejections.append(Rejection(fields.poll_after_seconds, _short(raw), "negative"))
            elif raw > 366 * 86400:
                rejections.append(Rejection(fields.poll_after_seconds, _short(raw), "absurdly far away"))
            else:
                return at + timedelta(seconds=float(raw)), fields.poll_after_seconds, tuple(rejections)
    if fields.next_check_at:
        moment, problem = _moment(document, fields.next_check_at, contract.timestamps.next_check_at)
        if moment is not None:
            return moment, fields.next_check_at, tuple(rejections)
        rejections.extend(problem)
    return None, None, tuple(rejections)


MAX_DEPTH = 64
"""Deeper than any status document needs; past it, json, the audit encoder and `_short` would recurse for ever."""

MAX_INT_DIGITS = 1000
"""Below Python's own int-from-text limit (4300 digits), which raises a bare ValueError deep in the parser."""


class BodyError(PollwardenError, ValueError):
    """Why a body is not a JSON object this parser will read; the message is safe to show and to store.

    Caught inside the parser (it becomes `invalid_response`);
    it is about the provider's answer, so its exit code is a stop's (4)."""

    exit_code = EXIT_ESCALATED


def parse_document(body: bytes) -> dict[str, Any]:
    """Strict JSON: one object, UTF-8 without a BOM, no repeated keys, no NaN or infinities, no number too big for
    its type, no lone surrogate escapes (they are not Unicode text and cannot be stored), at most MAX_DEPTH deep.

    Each of these is read one way by one parser and another way by the next, so an answer that has any of them
    cannot be trusted to mean what the contract says; it is refused, never guessed at."""
    if body.startswith(codecs.BOM_UTF8):
        raise BodyError("body starts with a byte-order mark, which JSON does not allow")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(f"body is not UTF-8 (invalid byte at offset {exc.start})") from None
    try:
        document = json.loads(
            text,
            object_pairs_hook=_object,
            parse_constant=_refuse_constant,
            parse_float=_float,
            parse_int=_int,
        )
    except BodyError:
        raise
    except json.JSONDecodeError as exc:
        raise BodyError(f"body is not JSON ({exc.msg} at offset {exc.pos})") from None
    except RecursionError:
        raise BodyError(f"body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        raise BodyError("body is not JSON") from None
    if not isinstance(document, dict):
        raise BodyError(f"body is a JSON {json_type(document)}, not an object")
    _check_tree(document)
    return document


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_tree(document: dict[str, Any]) -> None:
    """Depth and text, walked without recursion so that the walk itself cannot overflow."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                raise BodyError("body holds a lone surrogate escape (like \\ud800), which is not Unicode text")
        elif isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise BodyError(f"body nests deeper than {MAX_DEPTH} levels")
            children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        repeated = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        shown = _short(repeated.encode("utf-8", "backslashreplace").decode("utf-8"))
        raise BodyError(f"body repeats the key {shown!r}: parsers disagree on which value counts")
    return document


def _refuse_constant(name: str) -> Any:
    raise BodyError(f"body holds {name}, which is not JSON")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BodyError(f"body holds the number {_short(text)}, too large for a float")
    return value


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise BodyError(f"body holds an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _short(value: Any) -> str:
    return shorten(value if isinstance(value, str) else json.dumps(value, default=str))


def _clean_header(value: str | None) -> str | None:
    if value is None:
        return None
    cleaned = "".join(ch for ch in value if 32 <= ord(ch) < 127)[:200]
    return cleaned or None
