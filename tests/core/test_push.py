"""The `[push]` table read strictly, and what a verified push means (`core.push`): which job, whether its event
type wakes, and the record a wake leaves (never earlier than min_interval after the last woken check, never past the
deadline, never against the provider's own wait, never with no budget left)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pollwarden.core import ContractError, parse_contract
from pollwarden.core.contract.push import Push
from pollwarden.core.push import Ignore, Wake, read_event, woken
from pollwarden.core.reasons import DelaySource
from pollwarden.core.record import OperationRecord, new_record

from .test_contract import MINIMAL

T0 = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)


def _push(table: str) -> Push:
    push = parse_contract(MINIMAL + "[push]\n" + table).push
    assert push is not None
    return push


def test_a_contract_without_push_has_none_and_keeps_its_fingerprint() -> None:
    plain = parse_contract(MINIMAL)
    pushed = parse_contract(MINIMAL + '[push]\nkind = "github"\nsecret_env = "GH_HOOK"\njob_id = "workflow_run.id"\n')
    assert plain.push is None
    assert pushed.fingerprint() == plain.fingerprint()  # when a poll happens, not what it means
    assert pushed.digest != plain.digest  # a changed text is a new installed version


def test_each_kind_has_its_event_type_and_delivery_header() -> None:
    sw = _push('kind = "standard-webhooks"\nsecret_env = "H"\njob_id = "data.id"\nevents = ["batch.completed"]\n')
    assert (sw.event_type, sw.delivery_header, sw.events) == ("type", "webhook-id", ("batch.completed",))
    gh = _push('kind = "github"\nsecret_env = "H"\njob_id = "workflow_run.id"\nmin_interval = "5s"\n')
    assert (gh.event_type, gh.delivery_header, gh.min_interval) == (
        "header:X-GitHub-Event", "X-GitHub-Delivery", timedelta(seconds=5)
    )  # fmt: skip
    generic = _push('kind = "hmac-sha256"\nsecret_env = "H"\njob_id = "id"\nheader = "X-Sig"\n')
    assert (generic.header, generic.event_type, generic.delivery_header) == ("X-Sig", None, None)


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ('kind = "svix"\nsecret_env = "H"\njob_id = "id"\n', "[push].kind: must be one of"),
        ('kind = "github"\njob_id = "id"\n', "[push].secret_env: required"),
        ('kind = "github"\nsecret_env = "H"\n', "[push].job_id: required"),
        ('kind = "github"\nsecret_env = "H"\njob_id = "a[?"\n', "[push].job_id"),
        ('kind = "hmac-sha256"\nsecret_env = "H"\njob_id = "id"\n', "[push].header: required"),
        ('kind = "github"\nsecret_env = "H"\njob_id = "id"\nheader = "X"\n', "[push].header: only for"),
        ('kind = "github"\nsecret_env = "H"\njob_id = "id"\nmin_interval = "0s"\n', "[push].min_interval"),
        ('kind = "github"\nsecret_env = "H"\njob_id = "id"\nwake = true\n', "[push].wake: unknown key"),
        ('kind = "hmac-sha256"\nsecret_env = "H"\njob_id = "id"\nheader = "X"\nevents = ["a"]\n', "[push].events"),
    ],
)
def test_a_malformed_push_table_stops_the_load_naming_the_key(table: str, words: str) -> None:
    with pytest.raises(ContractError, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse_contract(MINIMAL + "[push]\n" + table)


def test_the_webhook_secret_is_never_the_api_credential() -> None:
    text = MINIMAL + '[auth]\nsecret_env = "API_KEY"\n[push]\nkind = "github"\nsecret_env = "API_KEY"\njob_id = "id"\n'
    with pytest.raises(ContractError, match="never the API credential"):
        parse_contract(text)


def test_an_event_names_its_job_and_only_listed_types_wake() -> None:
    sw = _push('kind = "standard-webhooks"\nsecret_env = "H"\njob_id = "data.id"\nevents = ["batch.completed"]\n')
    assert read_event(sw, {}, b'{"type": "batch.completed", "data": {"id": "batch_1"}}') == Wake(
        "batch_1", "batch.completed"
    )
    assert isinstance(read_event(sw, {}, b'{"type": "batch.created", "data": {"id": "batch_1"}}'), Ignore)
    assert isinstance(read_event(sw, {}, b'{"type": "batch.completed", "data": {}}'), Ignore)
    assert isinstance(read_event(sw, {}, b'{"type": "batch.completed", "data": {"id": true}}'), Ignore)
    assert isinstance(read_event(sw, {}, b"not json"), Ignore)
    gh = _push('kind = "github"\nsecret_env = "H"\njob_id = "workflow_run.id"\nevents = ["workflow_run"]\n')
    assert read_event(gh, {"x-github-event": "workflow_run"}, b'{"workflow_run": {"id": 42}}') == Wake(
        "42", "workflow_run"
    )
    assert isinstance(read_event(gh, {"x-github-event": "push"}, b'{"workflow_run": {"id": 42}}'), Ignore)


def _record(**changes: Any) -> OperationRecord:
    contract = parse_contract(MINIMAL)
    record = new_record(contract, operation_id="op-1", job_id="j1", now=T0)
    return record._with(**changes) if changes else record


PUSH = Push(kind="github", secret_env="H", job_id="id")


def test_a_wake_moves_the_next_check_to_now_and_says_who_chose_it() -> None:
    record = _record(next_poll_at=T0 + timedelta(minutes=2))
    change = woken(PUSH, record, T0 + timedelta(seconds=30))
    assert change is not None and change.due_at == T0 + timedelta(seconds=30)
    assert change.record.delay_source is DelaySource.PROVIDER_PUSH
    assert change.record.status_requests_used == record.status_requests_used  # the check itself reserves


def test_a_push_right_after_a_scheduled_check_wakes_at_once() -> None:
    """Issue 27: the check starts "within 1 s of the push"; the answer a scheduled check just got is no reason
    to wait (min_interval bounds woken checks, not checks)."""
    answered = T0 + timedelta(seconds=30)
    record = _record(next_poll_at=T0 + timedelta(minutes=2), last_observed_at=answered)
    change = woken(PUSH, record, answered + timedelta(milliseconds=100))
    assert change is not None and change.due_at == answered + timedelta(milliseconds=100)


def test_at_most_one_woken_check_per_min_interval_counted_from_the_last_woken_check() -> None:
    """A fake clock drives a push storm: each push after the first, until min_interval has passed since the
    woken check, moves nothing earlier than that check plus min_interval."""
    clock = T0 + timedelta(seconds=30)
    first = woken(PUSH, _record(next_poll_at=T0 + timedelta(minutes=2)), clock)
    assert first is not None and first.due_at == clock and first.record.woken_at == clock
    assert woken(PUSH, first.record, clock + timedelta(milliseconds=10)) is None  # due already: nothing
    # The woken check runs at once and answers "running": its next check is scheduled 2 minutes on.
    answered = first.record.waiting(clock + timedelta(minutes=2), DelaySource.LOCAL_BACKOFF)._with(
        last_observed_at=clock + timedelta(milliseconds=50)
    )
    second = woken(PUSH, answered, clock + timedelta(milliseconds=100))
    assert second is not None and second.due_at == clock + PUSH.min_interval  # not before: a second woken check
    assert second.record.woken_at == clock + PUSH.min_interval
    assert woken(PUSH, second.record, clock + timedelta(milliseconds=200)) is None  # the storm goes on: nothing
    # Long after, a push wakes at once again.
    later = second.record.waiting(clock + timedelta(minutes=2), DelaySource.LOCAL_BACKOFF)
    third = woken(PUSH, later, clock + timedelta(seconds=5))
    assert third is not None and third.due_at == clock + timedelta(seconds=5)


@pytest.mark.parametrize(
    "changes",
    [
        {"delay_source": DelaySource.PROVIDER_RETRY_AFTER},
        {"rate_limited_consecutive": 1},
        {"status_requests_used": 10**6},
        {"next_poll_at": T0},  # due already
    ],
)
def test_a_push_changes_nothing_the_provider_or_the_bounds_forbid(changes: dict[str, object]) -> None:
    record = _record(**{"next_poll_at": T0 + timedelta(minutes=2), **changes})
    assert woken(PUSH, record, T0 + timedelta(seconds=1)) is None


def test_a_final_operation_is_never_woken() -> None:
    from pollwarden.core.reasons import StopReason

    record = _record(next_poll_at=T0 + timedelta(minutes=2)).stopped(StopReason.DEADLINE_EXCEEDED, "late", T0)
    assert woken(PUSH, record, T0) is None


def test_a_use_file_tunes_a_shipped_push_table_key_by_key() -> None:
    tuned = parse_contract(
        'use = "openai-batch"\n[push]\nsecret_env = "MY_OPENAI_HOOK"\nmin_interval = "5s"\n', source="mine.toml"
    )
    assert tuned.push is not None
    assert (tuned.push.secret_env, tuned.push.min_interval) == ("MY_OPENAI_HOOK", timedelta(seconds=5))
    assert tuned.push.kind == "standard-webhooks" and tuned.push.job_id == "data.id"  # the rest is shipped


def test_the_last_woken_check_is_kept_in_the_stored_record_and_absent_until_a_push() -> None:
    from pollwarden.core.codec import record_from_json, record_to_json

    plain = _record(next_poll_at=T0 + timedelta(minutes=2))
    assert "woken_at" not in record_to_json(plain)  # records never woken stay byte for byte what they were
    change = woken(PUSH, plain, T0 + timedelta(seconds=30))
    assert change is not None
    assert record_from_json(record_to_json(change.record)).woken_at == T0 + timedelta(seconds=30)
