"""A recorded answer replayed through a contract (`contracts check`): the file read as hostile input, then the
poll's own path (observe, decide) as a watch's first check; pure, on an explicit clock."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from pollwarden.core import parse_contract
from pollwarden.core.decide import Action
from pollwarden.core.reasons import DelaySource, StopReason
from pollwarden.core.replay import ReplayError, read_answer, replay

from .support import T0, contract_text, make_contract

S = timedelta(seconds=1)
CAP = 1024


def _answer(value: object) -> bytes:
    return json.dumps(value).encode()


def test_a_body_file_is_the_body_byte_for_byte() -> None:
    data = b'{"state": "running", "note": "caf\\u00e9"}'
    answer = read_answer(data, "a.json", cap=CAP)
    assert (answer.status, dict(answer.headers), answer.body, answer.truncated) == (200, {}, data, False)
    # a body a poll would refuse is still a body: the replay says what the poll would (invalid_response)
    repeated = b'{"state": "running", "state": "failed"}'
    assert read_answer(repeated, "a.json", cap=CAP).body == repeated
    assert read_answer(b'["running"]', "a.json", cap=CAP).body == b'["running"]'


@pytest.mark.parametrize(
    "body",
    [{"status": "running"}, {"status": 3, "id": "j"}, {"state": "running", "headers": {}}],
)
def test_a_provider_body_with_a_status_field_is_a_body(body: object) -> None:
    answer = read_answer(_answer(body), "a.json", cap=CAP)
    assert answer.status == 200 and json.loads(answer.body) == body


def test_an_envelope_gives_the_status_the_headers_and_the_body() -> None:
    data = _answer({"status": 429, "headers": {"Retry-After": "30", "X-Request-Id": "r1"}})
    answer = read_answer(data, "a.json", cap=CAP)
    assert (answer.status, dict(answer.headers), answer.body) == (429, {"retry-after": "30", "x-request-id": "r1"}, b"")
    wrapped = read_answer(_answer({"status": 200, "body": {"state": "succeeded"}}), "a.json", cap=CAP)
    assert json.loads(wrapped.body) == {"state": "succeeded"}
    text = read_answer(_answer({"status": 502, "body_text": "<html>bad gateway</html>"}), "a.json", cap=CAP)
    assert text.body == b"<html>bad gateway</html>"
    assert read_answer(_answer({"status": 404}), "a.json", cap=CAP).status == 404
    decoded = read_answer(_answer({"status": 200, "headers": {"Content-Encoding": "gzip"}, "body": {}}), "a", cap=CAP)
    assert "content-encoding" not in decoded.headers  # the client decodes gzip and drops the header, as here
    big = read_answer(_answer({"status": 200, "body_text": "x" * (CAP + 1)}), "a.json", cap=CAP)
    assert big.truncated and len(big.body) == CAP


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"nope", "not JSON (Expecting value at offset 0)"),
        (b"\xff{}", "not UTF-8 text"),
        (_answer({"status": "200", "body": {}}), "status must be an HTTP status from 100 to 599, got '200'"),
        (_answer({"status": 99, "body": {}}), "got 99"),
        (_answer({"status": True, "headers": {}}), "got true"),
        (b'{"status": 200, "body": {}, "body": {}}', "repeats the key 'body'"),
        (_answer({"status": 200, "body": {}, "body_text": ""}), "not both"),
        (_answer({"status": 200, "body_text": {}}), "body_text must be a string, got a JSON object"),
        (_answer({"status": 200, "headers": []}), "headers must be an object"),
        (_answer({"status": 200, "headers": {"Bad Name": "x"}}), "'Bad Name' is not an HTTP header name"),
        (_answer({"status": 200, "headers": {"X-A": "1\r\nX-B: 2"}}), "header X-A: the value must be a string on one"),
        (_answer({"status": 200, "headers": {"X-A": 1}}), "header X-A: the value must be a string"),
    ],
)
def test_a_bad_file_is_refused_naming_the_file_and_what_is_wrong(data: bytes, words: str) -> None:
    with pytest.raises(ReplayError) as raised:
        read_answer(data, "--answer a.json", cap=CAP)
    assert str(raised.value).startswith("--answer a.json: ") and words in str(raised.value), str(raised.value)


def test_pending_waits_the_first_backoff_whatever_the_draw() -> None:
    result = replay(make_contract(), read_answer(_answer({"state": "running"}), "a", cap=CAP), T0)
    assert (result.meaning, result.stops_the_watch) == ("pending", False)
    assert result.earliest.rule == "pending_wait"
    assert result.next_wait is not None
    shortest, longest, first, last = result.next_wait
    # raw = 5 s * 2^1 after the first check; bounded jitter keeps 50%..100% of it
    assert shortest == 5 * S and 9 * S < longest <= 10 * S and first is last is DelaySource.LOCAL_BACKOFF


def test_a_provider_hint_and_a_retry_after_are_the_wait_and_say_so() -> None:
    contract = make_contract()
    hinted = replay(contract, read_answer(_answer({"state": "running", "poll_after_seconds": 42}), "a", cap=CAP), T0)
    assert hinted.next_wait == (42 * S, 42 * S, DelaySource.PROVIDER_POLL_HINT, DelaySource.PROVIDER_POLL_HINT)
    assert hinted.observation.hint_field == "poll_after_seconds"
    limited = replay(
        contract, read_answer(_answer({"status": 429, "headers": {"Retry-After": "30"}}), "a", cap=CAP), T0
    )
    assert limited.meaning == "rate_limited" and not limited.stops_the_watch
    assert limited.next_wait == (30 * S, 30 * S, DelaySource.PROVIDER_RETRY_AFTER, DelaySource.PROVIDER_RETRY_AFTER)
    rejected = replay(contract, read_answer(_answer({"state": "running", "poll_after_seconds": -5}), "a", cap=CAP), T0)
    assert [r.why for r in rejected.earliest.rejections] == ["negative"]


def test_success_carries_the_result_and_a_missing_one_stops() -> None:
    contract = make_contract()
    done = replay(contract, read_answer(_answer({"state": "succeeded", "result_url": "/r/1"}), "a", cap=CAP), T0)
    assert (done.meaning, done.earliest.action, done.observation.result) == ("success", Action.SUCCEED, "/r/1")
    assert done.next_wait is None and not done.stops_the_watch
    empty = replay(contract, read_answer(_answer({"state": "succeeded"}), "a", cap=CAP), T0)
    assert empty.earliest.reason is StopReason.RESULT_INVALID and empty.stops_the_watch


def test_the_jobs_own_end_is_a_documented_meaning_and_unknown_stops() -> None:
    contract = make_contract()
    failed = replay(contract, read_answer(_answer({"state": "failed", "error": "quota"}), "a", cap=CAP), T0)
    assert (failed.meaning, failed.earliest.reason, failed.stops_the_watch) == ("failure", StopReason.JOB_FAILED, False)
    assert failed.observation.provider_error == "quota"
    paused = replay(contract, read_answer(_answer({"state": "paused"}), "a", cap=CAP), T0)
    assert (paused.meaning, paused.earliest.reason, paused.stops_the_watch) == (
        "unknown",
        StopReason.UNKNOWN_STATE,
        True,
    )
    teapot = replay(contract, read_answer(_answer({"status": 418, "body": {}}), "a", cap=CAP), T0)
    assert (teapot.meaning, teapot.stops_the_watch) == ("unknown", True)
    denied = replay(contract, read_answer(_answer({"status": 401}), "a", cap=CAP), T0)
    assert (denied.meaning, denied.earliest.reason) == ("auth_denied", StopReason.AUTHORIZATION_DENIED)


def test_a_contract_with_a_first_check_is_replayed_as_its_first_check() -> None:
    contract = parse_contract(contract_text(first_check="30s"), source="t")
    result = replay(contract, read_answer(_answer({"state": "queued"}), "a", cap=CAP), T0)
    assert result.earliest.action is Action.WAIT and result.earliest.record.status_requests_used == 1
    assert result.to_json()["next_wait"]["shortest_source"] == "local_backoff"
