"""`[submit]` variants against a loopback provider: form bodies, integer job ids, the job in `Location` of a 204,
the idempotency token in the body; and the malformed keys and hostile answers around them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qs

import pytest

from pollwarden.actions.provider import ActionError, ActionRefused, submit
from pollwarden.audit import load_or_create_keys
from pollwarden.core.admission import Limits
from pollwarden.core.contract.parse import Contract, ContractError, parse_contract
from pollwarden.store.sqlite import SQLiteStore
from pollwarden.transport.http import StatusClient
from tests.conftest import install
from tests.loopback import Answer, Loopback, serving

NOW = datetime(2025, 4, 18, 10, 0, tzinfo=UTC)


def contract(base: str, submit_keys: str) -> Contract:
    text = f"""\
name = "jobs"
status_url = "{base}/jobs/{{job_id}}"

[states]
pending = ["running"]
success = ["done"]
failure = ["failed"]

[fields]
state = "state"

[submit]
url = "{base}/jobs"
{submit_keys}
"""
    return parse_contract(text, source="jobs.toml")


@pytest.fixture
def provider() -> Iterator[Loopback]:
    with serving() as server:
        yield server


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    home = tmp_path / "home"
    home.mkdir()
    opened = SQLiteStore(home / "pollwarden.db", keys=load_or_create_keys(home))
    try:
        yield opened
    finally:
        opened.close()


def send(c: Contract, store: SQLiteStore, body: bytes, operation_id: str = "op") -> str:
    """`pollwarden submit`, which installs its contract as it starts (it runs with its caller's credential)."""
    install(store, c)
    with StatusClient(c, None, clock=lambda: NOW) as client:
        return submit(store, c, client, operation_id=operation_id, body=body, now=NOW).record.job_id


def test_a_form_body_with_an_integer_job_id(provider: Loopback, store: SQLiteStore) -> None:
    provider.routes[("POST", "/jobs")] = Answer(201, b'{"id": 4711, "state": "running"}')
    c = contract(provider.url, 'encoding = "form"\njob_id = "id"')
    assert send(c, store, b'{"ref": "main", "n": 2, "debug": true, "name": "a b&c"}') == "4711"
    [seen] = provider.seen
    assert seen.headers["content-type"] == "application/x-www-form-urlencoded"
    assert parse_qs(seen.body.decode()) == {"ref": ["main"], "n": ["2"], "debug": ["true"], "name": ["a b&c"]}


@pytest.mark.parametrize("status", [201, 202, 204])
def test_the_job_in_location(provider: Loopback, store: SQLiteStore, status: int) -> None:
    # R25: the job id and status location come from the answer, as [submit] says.
    location = f"{provider.url}/v1/jobs/run%2042/"
    provider.routes[("POST", "/jobs")] = Answer(status, b"", {"Location": location})
    c = contract(provider.url, 'job_id = "header:Location"\nstatus_location = "header:Location"')
    assert send(c, store, b"{}") == "run 42"
    stored = store.get("op")
    assert stored is not None and stored.record.status_location == location


def test_the_idempotency_token_in_the_body_is_durable_across_a_resend(provider: Loopback, store: SQLiteStore) -> None:
    # R34: resent only with the idempotency token stored before sending.
    answers = iter([Answer(503, b"{}"), Answer(202, b'{"job_id": "j1"}')])
    provider.routes[("POST", "/jobs")] = lambda seen: next(answers)
    c = contract(provider.url, 'idempotency_field = "idempotency_key"')
    with pytest.raises(ActionError, match="HTTP 503"):
        send(c, store, b'{"scenario": "x"}')
    first = json.loads(provider.seen[0].body)
    token = first["idempotency_key"]
    assert first["scenario"] == "x" and len(token) >= 20
    stored = store.get_submission("op")
    assert stored is not None and stored.idempotency_token == token  # recorded before it was sent
    # A rejected submission is final; the same body under a new operation gets a new token.
    assert send(c, store, b'{"scenario": "x"}', operation_id="op2") == "j1"
    second = json.loads(provider.seen[1].body)
    assert second["idempotency_key"] != token


def test_a_lost_answer_is_resent_with_the_same_token_in_the_body(provider: Loopback, store: SQLiteStore) -> None:
    answers = iter([Answer(drop=True), Answer(202, b'{"job_id": "j9"}')])
    provider.routes[("POST", "/jobs")] = lambda seen: next(answers)
    c = contract(provider.url, 'idempotency_field = "idempotency_key"')
    assert send(c, store, b'{"a": 1}') == "j9"
    first, second = (json.loads(seen.body) for seen in provider.seen)
    assert first == second and first["a"] == 1 and first["idempotency_key"]


@pytest.mark.parametrize(
    ("keys", "body", "message"),
    [
        ('encoding = "form"', b'{"a": {"b": 1}}', "the form field 'a' is a JSON object"),
        ('encoding = "form"', b'{"a": null}', "the form field 'a' is a JSON null"),
        ('encoding = "form"', b"[1]", "is a JSON array; the contract's [submit] needs an object"),
        ('idempotency_field = "key"', b'{"key": "mine"}', "already has 'key'"),
        ('idempotency_field = "key"', b'"text"', "is a JSON string"),
        # json.loads recurses once per level: a RecursionError here was a traceback, not a refusal.
        ('encoding = "form"', b"[" * 100_000 + b"]" * 100_000, "is not JSON"),
    ],
)
def test_bodies_the_contract_cannot_send_are_refused_before_anything(
    provider: Loopback, store: SQLiteStore, keys: str, body: bytes, message: str
) -> None:
    c = contract(provider.url, keys)
    with pytest.raises(ActionRefused) as caught:
        send(c, store, body)
    assert message in str(caught.value)
    assert provider.seen == [] and store.get_submission("op") is None


@pytest.mark.parametrize(
    ("keys", "answer", "message"),
    [
        ('job_id = "id"', Answer(201, b'{"id": true}'), "no job id at 'id' (a JSON boolean)"),
        ('job_id = "id"', Answer(201, b'{"id": 1.5}'), "(a JSON number)"),
        ('job_id = "id"', Answer(201, b'{"id": null}'), "(null)"),
        ('job_id = "id"', Answer(201, b"{}"), "(missing)"),
        ('job_id = "id"', Answer(201, b'["x"]'), "cannot be read"),
        ('job_id = "header:Location"', Answer(204, b""), "no Location header"),
        ('job_id = "header:Location"', Answer(204, b"", {"Location": "https://x.example/"}), "names no job"),
        ('job_id = "header:Location"', Answer(204, b"", {"Location": "/jobs/.."}), "names no job"),
        ('job_id = "header:Location"', Answer(201, b"<html>", {"Location": "/jobs/%1b"}), "control character"),
    ],
)
def test_hostile_answers_are_clear_errors(
    provider: Loopback, store: SQLiteStore, keys: str, answer: Answer, message: str
) -> None:
    provider.routes[("POST", "/jobs")] = answer
    c = contract(provider.url, keys)
    with pytest.raises(ActionError) as caught:
        send(c, store, b"{}")
    assert message in str(caught.value) and "NoneType" not in str(caught.value)
    assert store.get("op") is None


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("http://evil.example/ops/1", "is not on"),
        ("{base}/ops/1#frag", "must not carry a fragment"),
        ("http://user:pw@{host}/ops/1", "must not carry userinfo"),
    ],
)
def test_a_status_location_off_the_origin_is_refused_by_admissions_one_rule(
    provider: Loopback, store: SQLiteStore, location: str, message: str
) -> None:
    host = provider.url.partition("//")[2]
    where = location.format(base=provider.url, host=host)
    provider.routes[("POST", "/jobs")] = Answer(202, b'{"id": "j1"}', {"Operation-Location": where})
    c = contract(provider.url, 'job_id = "id"\nstatus_location = "header:Operation-Location"')
    with pytest.raises(ActionError) as caught:
        send(c, store, b"{}")
    assert "refusing to poll it" in str(caught.value) and message in str(caught.value), str(caught.value)
    assert store.get("op") is None


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ('encoding = "xml"', "[submit].encoding: must be 'json' or 'form', got 'xml'"),
        ("encoding = 1", "[submit].encoding: must be a string, got int"),
        ('idempotency_field = "a b"', "[submit].idempotency_field: 'a b' may only use letters"),
        ('idempotency_field = ""', "[submit].idempotency_field: must not be empty"),
        ('job_id = "header:"', "[submit].job_id: '' may only use letters"),
        ('job_id = "header:Lo cation"', "[submit].job_id: 'Lo cation' may only use letters"),
        ('job_id = "a..b"', "[submit].job_id: 'a..b' is not a JMESPath expression"),
    ],
)
def test_malformed_submit_keys(keys: str, message: str) -> None:
    with pytest.raises(ContractError) as caught:
        contract("https://api.example", keys)
    assert str(caught.value).startswith("jobs.toml: ") and message in str(caught.value)


def test_a_job_id_already_watched_gets_no_second_operation(provider: Loopback, store: SQLiteStore) -> None:
    """A provider that deduplicates submissions hands back a job another operation watches: a second operation
    would give that one job a second budget. The submission is marked, the first operation keeps the job."""
    provider.routes[("POST", "/jobs")] = Answer(202, b'{"job_id": "same"}')
    c = contract(provider.url, 'idempotency_header = "Idempotency-Key"')
    assert send(c, store, b'{"a": 1}', operation_id="first") == "same"
    with pytest.raises(ActionError, match="operation first already watches"):
        send(c, store, b'{"a": 1}', operation_id="second")
    assert store.get("second") is None
    stored = store.get_submission("second")
    assert stored is not None and stored.state == "duplicate"
    kinds = [entry.kind for entry in store.events("second")]
    assert kinds == ["submission_intent", "submission_duplicate"]
    # Asking again sends nothing: the provider's answer is known.
    with pytest.raises(ActionRefused, match="operation first"):
        send(c, store, b'{"a": 1}', operation_id="second")
    assert len(provider.seen) == 2


def test_a_contract_nobody_installed_submits_nothing(provider: Loopback, store: SQLiteStore) -> None:
    """The one submit path (the CLI's and an agent's) creates an operation only for an installed version."""
    provider.routes[("POST", "/jobs")] = Answer(201, b'{"id": "j1", "state": "running"}')
    c = contract(provider.url, 'job_id = "id"')
    with StatusClient(c, None, clock=lambda: NOW) as client, pytest.raises(ActionRefused, match="not installed"):
        submit(store, c, client, operation_id="op", body=b"{}", now=NOW)
    assert provider.seen == [] and store.get_submission("op") is None and store.all() == []


@pytest.mark.parametrize(
    ("unsafe", "limits", "message"),
    [
        (True, Limits(), "safe_status = false"),
        (False, Limits(max_requests=0), "--max-requests must be a whole number"),
    ],
)
def test_a_submission_is_admitted_by_admissions_check_before_anything(
    provider: Loopback, store: SQLiteStore, unsafe: bool, limits: Limits, message: str
) -> None:
    """A submission creates an operation: the contract must be one that may be watched, the limits ones a watch
    may ask for (`admission.check`), or nothing is recorded or sent, as for every watch."""
    provider.routes[("POST", "/jobs")] = Answer(201, b'{"id": "j1", "state": "running"}')
    c = contract(provider.url, 'job_id = "id"')
    if unsafe:
        c = parse_contract("safe_status = false\n" + c.source_text, source="jobs.toml")
    install(store, c)
    with StatusClient(c, None, clock=lambda: NOW) as client, pytest.raises(ActionRefused, match=message):
        submit(store, c, client, operation_id="op", body=b"{}", now=NOW, limits=limits)
    assert provider.seen == [] and store.get_submission("op") is None and store.all() == []
