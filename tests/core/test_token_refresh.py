"""A 401 to a token a command or a file can give again (spec part 8, [auth]): fetched again, polled again at once,
once; the second 401 in a row stops `authorization_denied`. Pure core, so every driver gets the same rule."""

from __future__ import annotations

from datetime import timedelta

from pollwarden.core import Action, DelaySource, StopReason, parse_contract
from pollwarden.core.codec import record_from_json, record_to_json
from pollwarden.core.observe import Kind, observe

from .support import T0, body, contract_text, make_contract, make_record, poll, response

S = timedelta(seconds=1)


def _with_auth(auth: str) -> str:
    return contract_text().replace("[states]", f"[auth]\n{auth}\n[states]", 1)


COMMAND = parse_contract(_with_auth('token_command = ["print-token"]\ntoken_ttl = "50m"'), source="t.toml")
ENV = parse_contract(_with_auth('secret_env = "TOKEN"'), source="t.toml")


def test_a_401_to_a_command_token_is_a_refused_token_and_to_an_env_secret_a_denial() -> None:
    assert observe(COMMAND, response(status=401)).kind is Kind.TOKEN_REFUSED
    assert observe(ENV, response(status=401)).kind is Kind.AUTH_DENIED
    assert observe(COMMAND, response(status=403)).kind is Kind.AUTH_DENIED  # 403 is a refusal, not an expiry


def test_the_first_401_polls_again_at_once_and_the_second_in_a_row_stops() -> None:
    record = make_record(COMMAND)
    first = poll(COMMAND, record, response(status=401))
    assert first.rule == "credential_refreshed"
    assert first.action is Action.WAIT
    assert first.next_poll_at == T0 and first.delay_source is DelaySource.LOCAL_BACKOFF
    assert first.record.token_refused_consecutive == 1
    second = poll(COMMAND, first.record, response(status=401))
    assert second.action is Action.STOP
    assert second.reason is StopReason.AUTHORIZATION_DENIED
    assert second.rule == "authorization_denied"
    assert "fetched again" in second.detail


def test_an_answer_between_two_401s_resets_the_count() -> None:
    record = make_record(COMMAND)
    first = poll(COMMAND, record, response(status=401))
    ok = poll(COMMAND, first.record, response(body("running")))
    assert ok.record.token_refused_consecutive == 0
    again = poll(COMMAND, ok.record, response(status=401, at=ok.record.next_poll_at))
    assert again.action is Action.WAIT and again.rule == "credential_refreshed"


def test_an_env_secret_401_stops_at_once_as_before() -> None:
    decision = poll(ENV, make_record(ENV), response(status=401))
    assert decision.reason is StopReason.AUTHORIZATION_DENIED and decision.rule == "authorization_denied"


def test_the_refresh_never_outlives_the_budget() -> None:
    contract = parse_contract(
        _with_auth('token_file = "/run/token"').replace("max_requests = 12", "max_requests = 1"), source="t.toml"
    )
    decision = poll(contract, make_record(contract), response(status=401))
    assert decision.action is Action.STOP and decision.reason is StopReason.REQUEST_BUDGET_EXHAUSTED


def test_the_counter_survives_the_codec_and_old_records_read_as_zero() -> None:
    first = poll(COMMAND, make_record(COMMAND), response(status=401))
    data = record_to_json(first.record)
    assert data["token_refused_consecutive"] == 1
    assert record_from_json(data) == first.record
    plain = record_to_json(make_record(make_contract()))
    assert "token_refused_consecutive" not in plain  # pinned golden records stay byte for byte
    assert record_from_json(plain).token_refused_consecutive == 0
