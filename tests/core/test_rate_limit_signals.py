"""`[[rate_limit]]` signals and `[schedule] retry_after_on_success` (spec part 8): the provider's way of saying
"slow down" besides a bare 429, read in order before the status-code table, and bounded like Retry-After.

Bodies and headers are the providers' own: GitHub's primary rate limit (docs.github.com, "Rate limits for the
REST API", quoted in docs/plans/part8-providers.md 4.5), AWS's `ThrottlingException` (7.5) and OpenAI's
`insufficient_quota` (1.5)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pollwarden.core import Action, Contract, DelaySource, StopReason, parse_contract
from pollwarden.core.contract.parse import ContractError
from pollwarden.core.observe import Kind, observe

from .support import T0, body, contract_text, make_record, poll, response

GITHUB = """
[[rate_limit]]
status = [403, 429]
header = "x-ratelimit-remaining"
equals = "0"
reset_header = "x-ratelimit-reset"
reset = "epoch_seconds"

[[rate_limit]]
status = [400]
body = "__type == 'ThrottlingException'"

[[rate_limit]]
status = [429]
body = "error.code == 'insufficient_quota'"
means = "authorization_denied"
"""


def _contract(extra: str = GITHUB, schedule: str = "") -> Contract:
    text = contract_text() + extra
    if schedule:
        text = text.replace("[limits]", f"{schedule}\n[limits]", 1)
    return parse_contract(text, source="signals.toml")


CONTRACT = _contract()


def test_github_403_with_no_requests_left_waits_until_the_epoch_reset() -> None:
    reset = int((T0 + timedelta(minutes=7)).timestamp())
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)}
    obs = observe(CONTRACT, response(b'{"message": "API rate limit exceeded"}', status=403, headers=headers))
    assert obs.kind is Kind.RATE_LIMITED
    assert obs.retry_after == T0 + timedelta(minutes=7)
    assert "[[rate_limit]] 1" in obs.detail
    decision = poll(CONTRACT, make_record(CONTRACT), response(status=403, headers=headers))
    assert decision.action is Action.WAIT
    assert decision.next_poll_at == T0 + timedelta(minutes=7)
    assert decision.delay_source is DelaySource.PROVIDER_RETRY_AFTER


def test_a_403_with_requests_left_is_still_a_denial() -> None:
    obs = observe(CONTRACT, response(status=403, headers={"x-ratelimit-remaining": "12"}))
    assert obs.kind is Kind.AUTH_DENIED
    assert observe(CONTRACT, response(status=403)).kind is Kind.AUTH_DENIED


def test_aws_throttling_is_a_400_body_predicate() -> None:
    throttled = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"}).encode()
    assert observe(CONTRACT, response(throttled, status=400)).kind is Kind.RATE_LIMITED
    other = json.dumps({"__type": "InvalidJobIdException"}).encode()
    assert observe(CONTRACT, response(other, status=400)).kind is Kind.UNEXPECTED_STATUS


def test_a_quota_answer_means_a_person_must_act() -> None:
    quota = json.dumps({"error": {"code": "insufficient_quota", "message": "You exceeded your quota"}}).encode()
    obs = observe(CONTRACT, response(quota, status=429))
    assert obs.kind is Kind.AUTH_DENIED and "authorization_denied" in obs.detail
    decision = poll(CONTRACT, make_record(CONTRACT), response(quota, status=429))
    assert decision.reason is StopReason.AUTHORIZATION_DENIED
    # an ordinary 429 is still a rate limit
    assert (
        observe(CONTRACT, response(b'{"error": {"code": "rate_limit_exceeded"}}', status=429)).kind is Kind.RATE_LIMITED
    )


@pytest.mark.parametrize(
    "payload",
    [b"<html>throttled</html>", b"[1, 2]", b'{"__type": 5}', b'{"error": null}', b"\xff\xfe", b""],
)
def test_a_body_that_is_not_the_expected_json_does_not_match(payload: bytes) -> None:
    assert observe(CONTRACT, response(payload, status=400)).kind is Kind.UNEXPECTED_STATUS


def test_an_expression_that_raises_on_this_body_does_not_match() -> None:
    # jmespath 1.1 raises TypeError for an ordering comparison of a string with a number (research notes)
    contract = _contract('[[rate_limit]]\nstatus = [400]\nbody = "retry < `3`"\n')
    obs = observe(contract, response(b'{"retry": "soon"}', status=400))
    assert obs.kind is Kind.UNEXPECTED_STATUS
    assert observe(contract, response(b'{"retry": 1}', status=400)).kind is Kind.RATE_LIMITED


@pytest.mark.parametrize(
    ("value", "why"),
    [("soon", "not a number"), ("-5", "negative"), (str(10**14), "absurdly far"), ("1e9", "not a number")],
)
def test_a_bad_reset_header_is_rejected_and_recorded(value: str, why: str) -> None:
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": value}
    obs = observe(CONTRACT, response(status=403, headers=headers))
    assert obs.kind is Kind.RATE_LIMITED and obs.retry_after is None
    assert [r.source for r in obs.rejections] == ["x-ratelimit-reset"]
    assert why in obs.rejections[0].why


def test_a_reset_in_the_past_means_now_and_seconds_and_milliseconds_are_relative() -> None:
    past = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(T0.timestamp()) - 60)}
    assert observe(CONTRACT, response(status=429, headers=past)).retry_after == T0
    for unit, value, seconds in (("seconds", "90", 90), ("milliseconds", "1500", 1.5)):
        contract = _contract(f'[[rate_limit]]\nstatus = [503]\nreset_header = "x-reset"\nreset = "{unit}"\n')
        obs = observe(contract, response(status=503, headers={"x-reset": value}))
        assert obs.kind is Kind.RATE_LIMITED
        assert obs.retry_after == T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("unit", "value"),
    [("seconds", "9" * 15), ("seconds", "999999999999999.5"), ("duration", "9" * 15 + "s"), ("milliseconds", "9" * 15)],
)
def test_a_reset_past_what_a_timedelta_holds_is_rejected_not_raised(unit: str, value: str) -> None:
    """15 digits of seconds is past timedelta's 999,999,999 days: it raised OverflowError out of `observe`."""
    contract = _contract(f'[[rate_limit]]\nstatus = [503]\nreset_header = "x-reset"\nreset = "{unit}"\n')
    obs = observe(contract, response(status=503, headers={"x-reset": value}))
    assert obs.kind is Kind.RATE_LIMITED and obs.retry_after is None
    assert [r.why for r in obs.rejections] == ["absurdly far in the future"]


@given(st.text(max_size=40))
def test_any_reset_header_text_is_a_time_or_a_rejection(value: str) -> None:
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": value}
    obs = observe(CONTRACT, response(status=403, headers=headers))
    assert obs.kind is Kind.RATE_LIMITED
    assert (obs.retry_after is None) == bool(obs.rejections)
    if obs.retry_after is not None:
        assert T0 <= obs.retry_after <= T0 + timedelta(days=366)


def test_retry_after_on_a_pending_2xx_is_a_floor_only_when_the_contract_says_so() -> None:
    headers = {"retry-after": "45"}
    plain = parse_contract(contract_text(), source="t.toml")
    ignored = poll(plain, make_record(plain), response(body("running"), headers=headers), u=0.0)
    assert ignored.next_poll_at == T0 + timedelta(seconds=5)  # the local backoff: 5 s * 2 after one poll, * 50 %
    azure = _contract("", schedule="retry_after_on_success = true")
    honoured = poll(azure, make_record(azure), response(body("running"), headers=headers), u=0.0)
    assert honoured.next_poll_at == T0 + timedelta(seconds=45)
    assert honoured.delay_source is DelaySource.PROVIDER_RETRY_AFTER
    bad = poll(azure, make_record(azure), response(body("running"), headers={"retry-after": "never"}), u=0.0)
    assert bad.next_poll_at == T0 + timedelta(seconds=5)
    assert [r.source for r in bad.rejections] == ["Retry-After"]


GOOGLE = """
[[rate_limit]]
status = [429]
body = "error.status == 'RESOURCE_EXHAUSTED'"
reset_body = "error.details[?\\"@type\\" == 'type.googleapis.com/google.rpc.RetryInfo'].retryDelay | [0]"
reset = "duration"
"""


def _google(delay: object) -> bytes:
    details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo"}]
    if delay is not None:
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay})  # type: ignore[dict-item]
    return json.dumps({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": details}}).encode()


@pytest.mark.parametrize(
    ("delay", "wait", "why"),
    [
        ("30s", timedelta(seconds=30), None),
        ("1.5s", timedelta(seconds=1.5), None),
        (None, None, None),  # no RetryInfo: the ordinary 429 backoff
        ("30", None, "not a duration in seconds like '30s'"),
        ("-5s", None, "negative"),
        (5, None, "not a duration in seconds like '30s'"),
        ("99999999s", None, "absurdly far in the future"),
    ],
)
def test_a_reset_read_from_the_body_google_retry_info(delay: object, wait: timedelta | None, why: str | None) -> None:
    obs = observe(_contract(GOOGLE), response(_google(delay), status=429))
    assert obs.kind is Kind.RATE_LIMITED
    assert obs.retry_after == (None if wait is None else T0 + wait)
    assert [r.why for r in obs.rejections] == ([] if why is None else [why])


def test_old_contracts_keep_their_fingerprint_and_signals_change_it() -> None:
    plain = parse_contract(contract_text(), source="t.toml")
    assert plain.rate_limits == ()
    assert CONTRACT.fingerprint() != plain.fingerprint()


BAD = [
    ("[[rate_limit]]\nheader = 'x'\n", "[rate_limit 1].status", "required"),
    ("[[rate_limit]]\nstatus = []\n", "[rate_limit 1].status", "non-empty"),
    ("[[rate_limit]]\nstatus = [200]\n", "[rate_limit 1].status", "400 to 599"),
    ("[[rate_limit]]\nstatus = [true]\n", "[rate_limit 1].status", "400 to 599"),
    ("[[rate_limit]]\nstatus = [401]\n", "[rate_limit 1].status", "credential was refused"),
    ("[[rate_limit]]\nstatus = [429]\nequals = '0'\n", "[rate_limit 1].equals", "needs header"),
    ("[[rate_limit]]\nstatus = [429]\nheader = 'x y'\n", "[rate_limit 1].header", "letters"),
    ("[[rate_limit]]\nstatus = [429]\nbody = 'a ==='\n", "[rate_limit 1].body", "JMESPath"),
    ("[[rate_limit]]\nstatus = [429]\nreset_header = 'x-reset'\n", "[rate_limit 1].reset", "give reset with"),
    ("[[rate_limit]]\nstatus = [429]\nreset = 'seconds'\n", "[rate_limit 1].reset_header", "give reset with"),
    (
        "[[rate_limit]]\nstatus = [429]\nreset_body = 'a[='\nreset = 'duration'\n",
        "[rate_limit 1].reset_body",
        "JMESPath",
    ),
    ("[[rate_limit]]\nstatus = [429]\nreset_header = 'r'\nreset = 'minutes'\n", "[rate_limit 1].reset", "epoch"),
    ("[[rate_limit]]\nstatus = [429]\nmeans = 'later'\n", "[rate_limit 1].means", "rate_limited"),
    (
        "[[rate_limit]]\nstatus = [429]\nmeans = 'authorization_denied'\nreset_header = 'r'\nreset = 'seconds'\n",
        "[rate_limit 1].reset_header",
        "no reset time",
    ),
    ("[[rate_limit]]\nstatus = [429]\nwhen = 'x'\n", "[rate_limit 1].when", "unknown key"),
    ("rate_limit = 5\n", "rate_limit", "array of tables"),
    ("[[rate_limit]]\nstatus = [429]\n[[rate_limit]]\nstatus = 'x'\n", "[rate_limit 2].status", "non-empty"),
]


@pytest.mark.parametrize(("extra", "key", "complaint"), BAD, ids=[f"{k}:{c}" for _, k, c in BAD])
def test_malformed_signals_are_refused_naming_the_key(extra: str, key: str, complaint: str) -> None:
    text = contract_text() + extra if not extra.startswith("rate_limit =") else extra + contract_text()
    with pytest.raises(ContractError) as info:
        parse_contract(text, source="signals.toml")
    message = str(info.value)
    assert message.startswith("signals.toml: ") and key in message and complaint in message, message


def test_schedule_retry_after_on_success_must_be_a_boolean() -> None:
    with pytest.raises(ContractError, match=r"\[schedule\].retry_after_on_success"):
        _contract("", schedule='retry_after_on_success = "yes"')


SECONDARY = """
[[rate_limit]]
status = [403, 429]
body = "type(message) == 'string' && contains(message, 'secondary rate limit')"
min_wait = "60s"
"""
SECONDARY_BODY = b'{"message": "You have exceeded a secondary rate limit."}'


def test_a_signal_min_wait_is_a_floor_that_a_shorter_schedule_does_not_lower() -> None:
    """Issue 24: GitHub's secondary limit without Retry-After was retried after about 41 s; GitHub asks for at
    least a minute. The minute is the signal's, so a `max_delay` of 100 ms (a `use` file) still waits it."""
    contract = parse_contract(contract_text(base_delay="50ms", max_delay="100ms") + SECONDARY, source="use.toml")
    seen = observe(contract, response(SECONDARY_BODY, status=403))
    assert (seen.kind, seen.retry_after) == (Kind.RATE_LIMITED, T0 + timedelta(seconds=60))
    for u in (0.0, 0.5, 0.999):
        decision = poll(contract, make_record(contract), response(SECONDARY_BODY, status=403), u=u)
        assert decision.action is Action.WAIT
        assert decision.next_poll_at == T0 + timedelta(seconds=60)
        assert decision.delay_source is DelaySource.PROVIDER_RETRY_AFTER


def test_a_longer_reset_wins_over_min_wait_and_min_wait_over_a_shorter_one() -> None:
    signal = SECONDARY + 'reset_header = "retry-after"\nreset = "seconds"\n'
    contract = _contract(signal)
    for header, expected in (("90", 90), ("5", 60)):
        seen = observe(contract, response(SECONDARY_BODY, status=403, headers={"retry-after": header}))
        assert seen.retry_after == T0 + timedelta(seconds=expected), header


def test_a_min_wait_past_the_deadline_stops_rate_limited_at_once() -> None:
    contract = _contract(SECONDARY)
    record = make_record(contract, deadline=timedelta(seconds=30))
    decision = poll(contract, record, response(SECONDARY_BODY, status=403))
    assert (decision.action, decision.record.reason) == (Action.STOP, StopReason.RATE_LIMITED)


def test_min_wait_joins_the_fingerprint_only_when_used() -> None:
    without = _contract(SECONDARY.replace('min_wait = "60s"\n', ""))
    assert "min_wait" not in json.dumps([s.to_json() for s in without.rate_limits])
    assert _contract(SECONDARY).fingerprint() != without.fingerprint()


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ('"0s"', "must be longer than zero"),
        ('"2d"', "at most 24h"),
        ("60", "must be a duration string"),
    ],
)
def test_a_malformed_min_wait_is_refused_naming_it(value: str, words: str) -> None:
    with pytest.raises(ContractError, match=r"min_wait") as raised:
        _contract(SECONDARY.replace('"60s"', value))
    assert words in str(raised.value)


def test_a_min_wait_on_a_signal_that_stops_is_refused() -> None:
    text = '\n[[rate_limit]]\nstatus = [429]\nmeans = "authorization_denied"\nmin_wait = "60s"\n'
    with pytest.raises(ContractError, match="no next poll to delay"):
        _contract(text)
