"""One exchange, classified: every branch of `observe`, its parsers for hints and results, and a fuzz property."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pollwarden.core import Category, FailureKind, Response, observe
from pollwarden.core.observe import MAX_RESULT_LENGTH, Kind, Observation, dig

from .support import T0, body, failure, make_contract, response

C = make_contract()


def look(payload: bytes | None = None, **kwargs: Any) -> Observation:
    return observe(C, response(payload, **kwargs))


# --- 2xx with a JSON body: the state table decides -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "category"),
    [
        ("queued", Category.PENDING),
        ("running", Category.PENDING),
        ("failed", Category.FAILURE),
        ("cancelled", Category.CANCELLED),
        ("expired", Category.EXPIRED),
        ("paused", Category.UNKNOWN),
        ("manual_review", Category.UNKNOWN),
        ("RUNNING", Category.UNKNOWN),
        ("", Category.UNKNOWN),
    ],
)
def test_state_categories(state: str, category: Category) -> None:
    obs = look(body(state))
    assert obs.kind is Kind.JOB_STATE
    assert obs.state == state
    assert obs.category is category
    assert obs.http_status == 200
    assert obs.observed_at == T0
    assert obs.result is None and obs.result_problem is None


def test_success_with_result() -> None:
    obs = look(body("succeeded", result_url="https://files.example/exp_71c.csv"))
    assert obs.kind is Kind.JOB_STATE
    assert obs.category is Category.SUCCESS
    assert obs.result == "https://files.example/exp_71c.csv"
    assert obs.result_problem is None
    assert obs.provider_error is None


def test_any_2xx_is_read_as_a_body() -> None:
    obs = look(body("succeeded", result_url="r"), status=203)
    assert (obs.kind, obs.category, obs.result) == (Kind.JOB_STATE, Category.SUCCESS, "r")


def test_long_state_is_cut_to_200_characters() -> None:
    obs = look(body("x" * 1000))
    assert obs.state == "x" * 200
    assert obs.category is Category.UNKNOWN


def test_dotted_state_path() -> None:
    c = make_contract(state_field="job.state")
    obs = observe(c, response(json.dumps({"job": {"state": "running"}}).encode()))
    assert (obs.kind, obs.state, obs.category) == (Kind.JOB_STATE, "running", Category.PENDING)
    flat = observe(c, response(json.dumps({"job": "running", "job.state": "running"}).encode()))
    assert flat.kind is Kind.INVALID_RESPONSE
    assert "'job.state' is missing" in flat.detail


def test_dig() -> None:
    doc = {"a": {"b": {"c": None}}, "l": [1]}
    assert dig(doc, "a.b.c") == (True, None)
    assert dig(doc, "a.b") == (True, {"c": None})
    assert dig(doc, "a.x") == (False, None)
    assert dig(doc, "l.0") == (False, None)
    assert dig([doc], "a") == (False, None)


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        (json.dumps({"status": "running"}).encode(), "'state' is missing"),
        (json.dumps({"state": None}).encode(), "is null"),
        (json.dumps({"state": 5}).encode(), "is a number, not a string"),
        (json.dumps({"state": ["running"]}).encode(), "is an array, not a string"),
        (json.dumps({"state": True}).encode(), "is a boolean, not a string"),
        (json.dumps(["running"]).encode(), "body is a JSON array, not an object"),
        (b'"running"', "body is a JSON string, not an object"),
        (b"<html>Service Unavailable</html>", "not JSON"),
        (b"", "not JSON"),
        (b'{"state": "running"', "not JSON"),
        (b'{"state": "running", "x": NaN}', "body holds NaN, which is not JSON"),
        (b'{"state": "running", "x": Infinity}', "body holds Infinity, which is not JSON"),
        (b'{"state": "running", "x": -Infinity}', "body holds -Infinity, which is not JSON"),
        (b'{"state": "running"}\xff', "not UTF-8"),
        ('{"state": "running"}'.encode("utf-16"), "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nests deeper than 64 levels"),
        (b'{"state": "running", "n": ' + b"9" * 5000 + b"}", "integer of 5000 digits"),
    ],
)
def test_invalid_bodies(payload: bytes, needle: str) -> None:
    obs = look(payload)
    assert obs.kind is Kind.INVALID_RESPONSE
    assert needle in obs.detail
    assert obs.state is None and obs.category is None
    assert obs.http_status == 200


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        # Item 6: a lone surrogate is not Unicode text; it crashed audit sealing downstream.
        (b'{"state": "\\ud800"}', "lone surrogate"),
        (b'{"state": "running", "error": {"m": ["\\udfff"]}}', "lone surrogate"),
        (b'{"state": "running", "\\udc80": 1}', "lone surrogate"),
        # Item 7: nesting past 64 levels, wherever it is.
        (b'{"state": "running", "poll_after_seconds": ' + b"[" * 990 + b"1" + b"]" * 990 + b"}", "nests deeper"),
        (b'{"state": "failed", "error": ' + b'{"a": ' * 65 + b"1" + b"}" * 65 + b"}", "nests deeper than 64"),
        # Item 8: a repeated key means whatever the last parser to read it decides.
        (b'{"state":"running","state":"succeeded","result_url":"/x"}', "repeats the key 'state'"),
        (b'{"state": "running", "error": {"code": 1, "code": 2}}', "repeats the key 'code'"),
        (b'{"state": "running", "poll_after_seconds": 1e999}', "too large for a float"),
        (b'{"state": "running", "poll_after_seconds": -1e999}', "too large for a float"),
        (b'{"state": "running", "n": -' + b"9" * 1001 + b"}", "integer of 1001 digits"),
        (b'\xef\xbb\xbf{"state": "running"}', "byte-order mark"),
        (b'[{"state": "running"}]', "body is a JSON array, not an object"),
        (b"null", "body is a JSON null, not an object"),
        (b"5", "body is a JSON number, not an object"),
        (b'{"state": "run\xc3\x28ning"}', "not UTF-8 (invalid byte at offset 14)"),
        (b'{"state": "running"} {"state": "succeeded"}', "not JSON (Extra data at offset 21)"),
    ],
)
def test_hostile_bodies_are_invalid_with_a_clear_detail(payload: bytes, needle: str) -> None:
    obs = look(payload)
    assert obs.kind is Kind.INVALID_RESPONSE, obs
    assert needle in obs.detail
    assert obs.state is None and obs.category is None
    obs.detail.encode("utf-8")  # the detail itself is storable text


def test_what_strict_parsing_still_accepts() -> None:
    pair = look(b'{"state": "\\ud83d\\ude00"}')  # a surrogate PAIR is one real character
    assert (pair.kind, pair.state) == (Kind.JOB_STATE, "\U0001f600")
    deep = b'{"state": "failed", "error": ' + b"[" * 62 + b"1" + b"]" * 62 + b"}"
    assert look(deep).kind is Kind.JOB_STATE
    big = look(b'{"state": "running", "n": ' + b"9" * 1000 + b', "f": 1.5e300}')
    assert (big.kind, big.state) == (Kind.JOB_STATE, "running")
    same_key_elsewhere = look(b'{"state": "running", "a": {"state": 1}, "b": {"state": 2}}')
    assert same_key_elsewhere.kind is Kind.JOB_STATE


@pytest.mark.parametrize("encoding", ["br", "zstd", "gzip, gzip", "compress"])
def test_a_body_still_encoded_is_invalid(encoding: str) -> None:
    # Item 9: the client decodes gzip and deflate and drops the header; any other coding arrives still encoded.
    obs = look(body("running"), headers={"content-encoding": encoding})
    assert obs.kind is Kind.INVALID_RESPONSE
    assert "Content-Encoding" in obs.detail
    assert look(body("running"), headers={"content-encoding": "identity"}).kind is Kind.JOB_STATE


def test_a_local_failure_is_not_a_transport_failure() -> None:
    # Item 17: nothing left the machine, so delivery is known (not delivered) and the kind is its own.
    obs = observe(C, failure(FailureKind.LOCAL))
    assert obs.kind is Kind.LOCAL_ERROR
    assert obs.delivery_unknown is False
    assert obs.detail.startswith("not sent, a local error")


def test_truncated_body_is_invalid_even_if_it_parses() -> None:
    obs = look(body("succeeded", result_url="r"), truncated=True)
    assert obs.kind is Kind.INVALID_RESPONSE
    assert f"{C.max_body_bytes}-byte cap" in obs.detail
    assert obs.result is None


def test_deep_but_parseable_error_never_raises() -> None:
    for depth in range(900, 1001):
        payload = b'{"state": "failed", "error": ' + b"[" * depth + b"]" * depth + b"}"
        obs = look(payload)
        assert obs.kind in (Kind.JOB_STATE, Kind.INVALID_RESPONSE)


# --- status codes -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (401, Kind.AUTH_DENIED),
        (403, Kind.AUTH_DENIED),
        (404, Kind.NOT_FOUND),
        (301, Kind.REDIRECT),
        (302, Kind.REDIRECT),
        (307, Kind.REDIRECT),
        (304, Kind.REDIRECT),
        (418, Kind.UNEXPECTED_STATUS),
        (400, Kind.UNEXPECTED_STATUS),
        (409, Kind.UNEXPECTED_STATUS),
        (100, Kind.UNEXPECTED_STATUS),
        (0, Kind.UNEXPECTED_STATUS),
        (429, Kind.RATE_LIMITED),
        (500, Kind.SERVER_ERROR),
        (502, Kind.SERVER_ERROR),
        (503, Kind.SERVER_ERROR),
        (599, Kind.SERVER_ERROR),
    ],
)
def test_status_codes(status: int, kind: Kind) -> None:
    # a body that would read as success must not matter for any non-2xx answer
    obs = look(body("succeeded", result_url="r"), status=status)
    assert obs.kind is kind
    assert obs.http_status == status
    assert obs.state is None and obs.category is None and obs.result is None
    assert str(status) in obs.detail


def test_redirect_detail_says_it_was_not_followed() -> None:
    obs = look(status=302, headers={"location": "https://evil.example/"})
    assert "not followed" in obs.detail
    assert "evil.example" not in obs.detail


def test_429_without_retry_after() -> None:
    obs = look(status=429)
    assert obs.kind is Kind.RATE_LIMITED
    assert obs.retry_after is None and obs.retry_after_header is None and obs.rejections == ()


def test_429_with_retry_after() -> None:
    obs = look(status=429, headers={"retry-after": "30"})
    assert obs.retry_after == T0 + timedelta(seconds=30)
    assert obs.retry_after_header == "30"


@pytest.mark.parametrize("status", [500, 503])
def test_5xx_retry_after_seconds_and_date(status: int) -> None:
    obs = look(status=status, headers={"retry-after": "120"})
    assert obs.kind is Kind.SERVER_ERROR
    assert obs.retry_after == T0 + timedelta(seconds=120)
    date = look(status=status, headers={"retry-after": "Fri, 18 Apr 2025 10:22:00 GMT"})
    assert date.retry_after == T0 + timedelta(seconds=120)
    assert date.retry_after_header == "Fri, 18 Apr 2025 10:22:00 GMT"


def test_5xx_garbage_retry_after_is_rejected_and_recorded() -> None:
    obs = look(status=503, headers={"retry-after": "later, maybe"})
    assert obs.kind is Kind.SERVER_ERROR
    assert obs.retry_after is None
    assert len(obs.rejections) == 1
    assert obs.rejections[0].source == "Retry-After"
    assert obs.rejections[0].value == "later, maybe"
    assert obs.retry_after_header == "later, maybe"


def test_long_retry_after_header_is_shortened_for_display() -> None:
    obs = look(status=503, headers={"retry-after": "x" * 500})
    assert obs.retry_after_header is not None and len(obs.retry_after_header) == 80
    assert obs.retry_after is None


def test_retry_after_on_200_is_not_a_floor() -> None:
    obs = look(body("running"), headers={"retry-after": "600"})
    assert obs.kind is Kind.JOB_STATE
    assert obs.retry_after is None


# --- transport failures -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "unknown"),
    [
        (FailureKind.CONNECT, False),
        (FailureKind.TIMEOUT, True),
        (FailureKind.RESET, True),
        (FailureKind.PROTOCOL, True),
    ],
)
def test_transport_failures(kind: FailureKind, unknown: bool) -> None:
    at = T0 + timedelta(seconds=5)
    obs = observe(C, failure(kind, at=at))
    assert obs.kind is Kind.TRANSPORT
    assert obs.delivery_unknown is unknown
    assert obs.observed_at == at
    assert obs.http_status is None and obs.state is None
    assert obs.detail == f"{kind.value}: simulated {kind.value}"


# --- provider hints (R9) ------------------------------------------------------------------------------------------


def test_poll_after_seconds_valid() -> None:
    obs = look(body(poll_after_seconds=30))
    assert obs.hint_at == T0 + timedelta(seconds=30)
    assert obs.hint_field == "poll_after_seconds"
    assert obs.rejections == ()
    fractional = look(body(poll_after_seconds=1.5))
    assert fractional.hint_at == T0 + timedelta(seconds=1.5)
    zero = look(body(poll_after_seconds=0))
    assert zero.hint_at == T0


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"-5", "negative"),
        (b"-0.5", "negative"),
        (b"true", "not a number"),
        (b"false", "not a number"),
        (b'"30"', "not a number"),
        (b"[30]", "not a number"),
        (b"{}", "not a number"),
        # 1e999 is no longer a rejected hint: a number too large for its type refuses the whole body (item 8).
        (str(366 * 86400 + 1).encode(), "absurdly far"),
        (b"1" + b"0" * 30, "absurdly far"),
    ],
)
def test_poll_after_seconds_rejected(raw: bytes, why: str) -> None:
    obs = look(b'{"state": "running", "poll_after_seconds": ' + raw + b"}")
    assert obs.kind is Kind.JOB_STATE
    assert obs.hint_at is None
    assert len(obs.rejections) == 1
    assert obs.rejections[0].source == "poll_after_seconds"
    assert why in obs.rejections[0].why


def test_poll_after_seconds_null_is_absent() -> None:
    obs = look(body(poll_after_seconds=None))
    assert obs.hint_at is None and obs.rejections == ()


def test_next_check_at_valid() -> None:
    obs = look(body(next_check_at="2025-04-18T10:25:00Z"))
    assert obs.hint_at == T0 + timedelta(minutes=5)
    assert obs.hint_field == "next_check_at"
    offset = look(body(next_check_at="2025-04-18T12:25:00+02:00"))
    assert offset.hint_at == T0 + timedelta(minutes=5)


@pytest.mark.parametrize(
    "raw",
    ["tomorrow", "2025-04-18T10:25:00", "", 1745000000, True, "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"],
)
def test_next_check_at_rejected(raw: Any) -> None:
    obs = look(body(next_check_at=raw))
    assert obs.kind is Kind.JOB_STATE
    assert obs.hint_at is None
    assert [r.source for r in obs.rejections] == ["next_check_at"]
    assert "RFC 3339" in obs.rejections[0].why


def test_poll_after_seconds_wins_over_next_check_at() -> None:
    obs = look(body(poll_after_seconds=10, next_check_at="2025-04-18T10:25:00Z"))
    assert obs.hint_at == T0 + timedelta(seconds=10)
    assert obs.hint_field == "poll_after_seconds"


def test_a_rejected_poll_after_falls_back_to_next_check_at_and_keeps_the_rejection() -> None:
    obs = look(body(poll_after_seconds=-1, next_check_at="2025-04-18T10:25:00Z"))
    assert obs.hint_at == T0 + timedelta(minutes=5)
    assert obs.hint_field == "next_check_at"
    assert [r.why for r in obs.rejections] == ["negative"]


def test_expires_at() -> None:
    obs = look(body(expires_at="2025-04-18T11:00:00Z"))
    assert obs.expires_at == T0 + timedelta(minutes=40)
    bad = look(body(expires_at="never"))
    assert bad.expires_at is None
    assert [(r.source, r.value) for r in bad.rejections] == [("expires_at", "never")]
    not_string = look(body(expires_at=12))
    assert not_string.expires_at is None
    assert [(r.source, r.value) for r in not_string.rejections] == [("expires_at", "12")]
    null = look(body(expires_at=None))
    assert null.expires_at is None and null.rejections == ()


# --- result validation (R17) --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({}, "is missing"),
        ({"result_url": None}, "is null"),
        ({"result_url": ""}, "is empty"),
        ({"result_url": "   "}, "is empty"),
        ({"result_url": 5}, "is a JSON number, not a string"),
        ({"result_url": {"href": "x"}}, "is a JSON object, not a string"),
        ({"result_url": "https://files.example/a\nb"}, "control characters"),
        ({"result_url": "https://files.example/a\x7f"}, "control characters"),
        ({"result_url": "https://files.example/\x00"}, "control characters"),
        ({"result_url": "h" * (MAX_RESULT_LENGTH + 1)}, "too long"),
    ],
)
def test_success_result_problems(fields: dict[str, Any], problem: str) -> None:
    obs = look(body("succeeded", **fields))
    assert obs.kind is Kind.JOB_STATE
    assert obs.category is Category.SUCCESS
    assert obs.result is None
    assert obs.result_problem is not None and problem in obs.result_problem
    assert "'result_url'" in obs.result_problem


def test_result_at_the_length_limit_is_accepted() -> None:
    obs = look(body("succeeded", result_url="h" * MAX_RESULT_LENGTH))
    assert obs.result == "h" * MAX_RESULT_LENGTH


def test_result_is_not_read_for_a_pending_state() -> None:
    obs = look(body("running", result_url="https://files.example/early.csv"))
    assert obs.result is None and obs.result_problem is None


def test_contract_without_result_field_needs_no_result() -> None:
    obs = observe(make_contract(result=None), response(body("succeeded")))
    assert obs.category is Category.SUCCESS
    assert obs.result is None and obs.result_problem is None


# --- provider error and request id (R28) --------------------------------------------------------------------------


def test_provider_error_kept_on_failure() -> None:
    obs = look(body("failed", error={"code": "E42", "message": "disk full"}))
    assert obs.provider_error == '{"code": "E42", "message": "disk full"}'
    text = look(body("failed", error="quota exceeded"))
    assert text.provider_error == "quota exceeded"
    long = look(body("failed", error="x" * 5000))
    assert long.provider_error is not None and len(long.provider_error) == 2000
    unknown = look(body("needs_payment", error="card declined"))
    assert unknown.provider_error == "card declined"


def test_provider_error_not_taken_on_success() -> None:
    obs = look(body("succeeded", result_url="r", error="stale"))
    assert obs.provider_error is None


def test_request_id_from_the_default_header() -> None:
    obs = look(status=503, headers={"x-request-id": "req-123"})
    assert obs.request_id == "req-123"
    assert look(body()).request_id is None


def test_request_id_from_the_contracts_header() -> None:
    c = make_contract(request_id_header="X-Correlation-Id")
    obs = observe(c, response(status=503, headers={"x-correlation-id": "corr-9", "x-request-id": "other"}))
    assert obs.request_id == "corr-9"
    ok = observe(c, response(body(), headers={"x-correlation-id": "corr-10"}))
    assert ok.request_id == "corr-10"


def test_request_id_is_cleaned() -> None:
    obs = look(headers={"x-request-id": "req\r\n-1\x00é"})
    assert obs.request_id == "req-1"
    assert look(headers={"x-request-id": "\x00\x01"}).request_id is None
    long = look(headers={"x-request-id": "r" * 1000}).request_id
    assert long is not None and len(long) == 200


def test_observation_to_json() -> None:
    obs = look(body(expires_at="2025-04-18T11:00:00Z", poll_after_seconds=-1), headers={"x-request-id": "q"})
    data = obs.to_json()
    assert data["kind"] == "job_state"
    assert data["observed_at"] == "2025-04-18T10:20:00Z"
    assert data["http_status"] == 200
    assert data["request_id"] == "q"
    assert data["state"] == "running"
    assert data["category"] == "pending"
    assert data["expires_at"] == "2025-04-18T11:00:00Z"
    assert data["hint_at"] is None
    assert data["rejections"] == [{"source": "poll_after_seconds", "value": "-1", "why": "negative"}]
    assert data["delivery_unknown"] is False
    json.dumps(data)


# --- property: nothing a provider sends can crash the classification ---------------------------------------------

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**25), max_value=10**25)
    | st.floats(allow_nan=False)
    | st.text(max_size=30)
    | st.sampled_from(["running", "succeeded", "failed", "2025-04-18T10:25:00Z", "0001-01-01T00:00:00+01:00"])
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
field_names = st.sampled_from(
    ["state", "result_url", "error", "expires_at", "poll_after_seconds", "next_check_at", "job", "x"]
)
documents = st.dictionaries(field_names, json_values, max_size=6)


def _encode(document: dict[str, Any]) -> bytes:
    return json.dumps(document, allow_nan=True).encode()


bodies = st.one_of(st.binary(max_size=200), documents.map(_encode))
header_values = st.text(max_size=40) | st.sampled_from(["120", "-1", "Fri, 18 Apr 2025 10:22:00 GMT", "²", "9" * 30])
headers = st.dictionaries(st.sampled_from(["retry-after", "x-request-id", "location", "content-type"]), header_values)


@settings(max_examples=400, deadline=None)
@given(
    status=st.integers(min_value=-1, max_value=1000),
    payload=bodies,
    hdrs=headers,
    truncated=st.booleans(),
    latency_ms=st.integers(min_value=0, max_value=60_000),
)
def test_observe_never_raises(
    status: int, payload: bytes, hdrs: dict[str, str], truncated: bool, latency_ms: int
) -> None:
    exchange = Response(
        status=status,
        headers=hdrs,
        body=payload,
        sent_at=T0,
        received_at=T0 + timedelta(milliseconds=latency_ms),
        truncated=truncated,
    )
    obs = observe(C, exchange)
    assert obs.http_status == status
    assert obs.observed_at == exchange.received_at
    assert (obs.kind is Kind.JOB_STATE) == (obs.category is not None)
    if obs.kind is Kind.JOB_STATE:
        assert 200 <= status < 300 and not truncated
    if obs.retry_after is not None:
        assert obs.retry_after >= exchange.received_at
    if obs.result is not None:
        assert obs.category is Category.SUCCESS
    json.dumps(obs.to_json())
