"""What a learnt schedule reads from outside, parsed hostile (issue 26): `[schedule] learn_key` and the provider's
own `[fields] estimated_completion_at`; a bad one is refused with the field named, never kept, never a crash."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from pollwarden.core.codec import observation_from_json
from pollwarden.core.contract.parse import Contract, ContractError, parse_contract
from pollwarden.core.decide import Decision, decide
from pollwarden.core.learnt_inputs import MAX_KEY, key_value, near_estimate
from pollwarden.core.observe import Response, observe
from pollwarden.core.reasons import DelaySource
from pollwarden.core.scrub import Scrubber
from tests.core.support import T0, contract_text, make_record

SECRET = "sk-live-0123456789abcdef"


def _contract(extra_fields: str = "", schedule: str = "", timestamps: str = "") -> Contract:
    text = contract_text(max_delay="120s")
    text = text.replace("[fields]\n", "[fields]\n" + extra_fields).replace("[schedule]\n", "[schedule]\n" + schedule)
    return parse_contract(text + timestamps, source="test.toml")


@pytest.mark.parametrize(
    ("value", "key"),
    [("gpt-4o", "gpt-4o"), (4, "4"), (2.5, "2.5"), (True, "true"), ("  batch ", "  batch ")],
)
def test_a_scalar_key_is_kept_as_text(value: object, key: str) -> None:
    assert key_value("model", {"model": value}) == (key, None)


def test_an_absent_or_null_key_is_no_key_and_no_complaint() -> None:
    assert key_value("model", {}) == (None, None)
    assert key_value("model", {"model": None}) == (None, None)


@pytest.mark.parametrize(
    ("value", "why", "shown"),
    [
        ({"name": "gpt-4o"}, "a JSON object, not a string or number", ""),
        (["a", "b"], "a JSON array, not a string or number", ""),
        ("x" * 10_240, f"longer than {MAX_KEY} characters", "x" * 77 + "..."),
        ("", "empty", ""),
        ("a\nb", "holds control characters", "a\\nb"),
        ("a\u2028b", "holds control characters", "a\\u2028b"),
        (f"Bearer {Scrubber.MARK}", "holds the credential", "[secret]"),
    ],
)
def test_a_hostile_key_is_refused_and_the_trail_says_why(value: object, why: str, shown: str) -> None:
    key, rejection = key_value("model", {"model": value})
    assert key is None and rejection is not None
    assert rejection.source == "learn_key model" and why in rejection.why and rejection.value == shown


def test_a_key_holding_the_credential_is_never_kept_nor_shown() -> None:
    held = Scrubber([SECRET], scheme="Bearer")
    key, rejection = key_value("meta.tag", {"meta": {"tag": f"team-{SECRET}"}}, held)
    assert key is None and rejection is not None and SECRET not in json.dumps(rejection.to_json())


def test_a_bad_learn_key_expression_is_a_contract_error_naming_the_field() -> None:
    with pytest.raises(ContractError, match=r"\[schedule\]\.learn_key") as caught:
        _contract(schedule='learn_key = "model[?"\n')
    assert "model[?" in str(caught.value)
    with pytest.raises(ContractError, match=r"\[fields\]\.estimated_completion_at"):
        _contract(extra_fields='estimated_completion_at = "eta || ("\n')


def test_the_new_keys_leave_a_contract_fingerprint_as_it_was() -> None:
    plain = _contract()
    keyed = _contract(schedule='learn_key = "model"\n')
    assert keyed.fingerprint() == plain.fingerprint()
    estimated = _contract(extra_fields='estimated_completion_at = "eta"\n')
    assert estimated.fingerprint() != plain.fingerprint()


def _answer(body: dict[str, object], at_seconds: float = 60.0) -> Response:
    at = T0 + timedelta(seconds=at_seconds)
    return Response(status=200, headers={}, body=json.dumps(body).encode(), sent_at=at, received_at=at)


def _decide(contract: Contract, body: dict[str, object], u: float = 0.5) -> Decision:
    record = make_record(contract).reserved()
    obs = observe(contract, _answer(body))
    return decide(record, obs, obs.observed_at, u)


ESTIMATED = 'estimated_completion_at = "eta"\n'


def test_a_check_long_before_the_estimate_moves_onto_it_within_max_delay() -> None:
    contract = _contract(extra_fields=ESTIMATED)
    now = T0 + timedelta(seconds=60)
    eta = now + timedelta(seconds=90)
    decision = _decide(contract, {"state": "running", "eta": eta.isoformat()})
    assert decision.next_poll_at == eta
    assert decision.delay_source is DelaySource.PROVIDER_ESTIMATE
    assert "placed by the provider's estimated completion" in decision.detail
    far = now + timedelta(hours=3)
    capped = _decide(contract, {"state": "running", "eta": far.isoformat()})
    assert capped.next_poll_at == now + timedelta(seconds=120)  # max_delay holds


def test_a_check_near_the_estimate_stays_where_the_schedule_put_it() -> None:
    now = T0
    assert near_estimate(now + timedelta(seconds=5), now + timedelta(seconds=20), now, timedelta(seconds=30),
                         timedelta(seconds=120)) == now + timedelta(seconds=5)  # fmt: skip
    late = near_estimate(now + timedelta(seconds=100), now + timedelta(seconds=20), now, timedelta(seconds=30),
                         timedelta(seconds=120))  # fmt: skip
    assert late == now + timedelta(seconds=20)  # long after: onto the estimate


@pytest.mark.parametrize(
    ("value", "form", "why"),
    [
        ("2025-04-18T10:00:00Z", "rfc3339", "in the past"),
        ("garbage", "rfc3339", "not a time"),
        ({"at": 1}, "rfc3339", "not a time"),
        ("2400-01-01T00:00:00Z", "rfc3339", "absurdly far away"),
        (1e12, "epoch_seconds", "not a time"),
        (1e12, "epoch_millis", "in the past"),
        (2e13, "epoch_millis", "absurdly far away"),
    ],
)
def test_a_hostile_estimate_is_ignored_and_counted_as_a_rejected_hint(value: object, form: str, why: str) -> None:
    timestamps = f'[timestamps]\nestimated_completion_at = "{form}"\n'
    contract = _contract(extra_fields=ESTIMATED, timestamps=timestamps)
    decision = _decide(contract, {"state": "running", "eta": value})
    assert decision.delay_source is DelaySource.LOCAL_BACKOFF
    (rejection,) = decision.rejections
    assert rejection.source == "eta" and why in rejection.why


def test_a_valid_hint_wins_over_the_estimate() -> None:
    contract = _contract(extra_fields=ESTIMATED)
    now = T0 + timedelta(seconds=60)
    decision = _decide(contract, {"state": "running", "eta": (now + timedelta(seconds=90)).isoformat(),
                                  "poll_after_seconds": 7})  # fmt: skip
    assert decision.delay_source is DelaySource.PROVIDER_POLL_HINT
    assert decision.next_poll_at == now + timedelta(seconds=7)


def test_the_key_and_the_estimate_are_recorded_so_a_decision_replays() -> None:
    contract = _contract(extra_fields=ESTIMATED, schedule='learn_key = "model"\n')
    now = T0 + timedelta(seconds=60)
    obs = observe(
        contract, _answer({"state": "running", "model": "m-1", "eta": (now + timedelta(minutes=1)).isoformat()})
    )
    assert obs.learn_key == "m-1" and obs.estimate_at == now + timedelta(minutes=1)
    again = observation_from_json(json.loads(json.dumps(obs.to_json())))
    assert again == obs
    record = make_record(contract).reserved()
    decision = decide(record, obs, now, 0.5)
    assert decision.record.sample_key == "m-1"
    assert decide(record, again, now, 0.5) == decision
    other = observe(contract, _answer({"state": "running", "model": "m-2"}))
    assert decide(decision.record.reserved(), other, now, 0.5).record.sample_key == "m-1"  # the first key stays
