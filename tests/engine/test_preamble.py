"""The one preamble every interface runs before a watch (`engine.preamble`, issue 25): what it refuses before a
store is opened, in which order, with which credential, and how each interface's words come from one refusal."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from pollwarden.core.admission import Limits, Refusal, WatchRequest
from pollwarden.core.contract.parse import Contract, parse_contract
from pollwarden.core.watchability import Refused, checked
from pollwarden.engine import Engine
from pollwarden.engine.preamble import Credentials, Installing, admit, ready
from pollwarden.store.owner import process_owner
from tests.core.support import contract_text
from tests.store.conftest import AnyStore

TOKEN = "tok-preamble-5f1e0c"


def _contract(auth: str, *, safe: bool = True) -> Contract:
    text = contract_text().replace("[states]", f"[auth]\n{auth}\n[states]", 1)
    if not safe:
        text = "safe_status = false\n" + text
    return parse_contract(text, source="t.toml")


def _token_command(tmp_path: Path) -> tuple[Path, Path]:
    """A token command that leaves a mark when it runs: (the script, the mark)."""
    mark = tmp_path / "ran"
    script = tmp_path / "print-token"
    script.write_text(f"#!/bin/sh\ntouch {mark}\necho {TOKEN}\n", encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, mark


def test_a_contract_that_may_not_be_watched_is_refused_before_its_credential_is_read(tmp_path: Path) -> None:
    script, mark = _token_command(tmp_path)
    contract = _contract(f'token_command = ["{script}"]\ntoken_ttl = "50m"', safe=False)
    for credentials in Credentials:
        with pytest.raises(Refused, match="safe_status = false") as refused:
            ready(WatchRequest(contract, "job-1"), credentials)
        assert refused.value.refusal is None  # said as it is, by every interface
        assert refused.value.said({}, "watch") == str(refused.value)
    assert not mark.exists(), "a token command ran for a contract no watch may poll"


def test_the_credential_read_is_the_one_polled_with_and_a_job_id_holding_it_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PREAMBLE_TOKEN", TOKEN)
    contract = _contract('secret_env = "PREAMBLE_TOKEN"')
    fine = ready(WatchRequest(contract, "job-1"))
    assert fine.secret is not None and fine.request.credential is fine.secret
    with pytest.raises(Refused) as refused:
        ready(WatchRequest(contract, f"job-{TOKEN}"))
    assert refused.value.refusal is not None and refused.value.refusal.kind is Refusal.INVALID
    assert refused.value.said({"job_id": "--job"}, "enqueue") == (
        "cannot enqueue: --job contains the credential; give the provider's job id"
    )
    assert TOKEN not in str(refused.value)


def test_a_missing_credential_refuses_a_watch_that_polls_and_not_one_a_worker_polls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PREAMBLE_TOKEN", raising=False)
    contract = _contract('secret_env = "PREAMBLE_TOKEN"')
    with pytest.raises(Refused, match="PREAMBLE_TOKEN") as refused:
        ready(WatchRequest(contract, "job-1"))
    assert refused.value.refusal is None
    held = ready(WatchRequest(contract, "job-1"), Credentials.HELD)  # the worker holds it, not this shell
    assert held.secret is None and held.request.credential is None


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_a_held_credential_never_runs_a_token_command(tmp_path: Path) -> None:
    script, mark = _token_command(tmp_path)
    contract = _contract(f'token_command = ["{script}"]\ntoken_ttl = "50m"')
    held = ready(WatchRequest(contract, "job-1"), Credentials.HELD)
    assert held.secret is None and not mark.exists()
    read = ready(WatchRequest(contract, "job-1"), Credentials.READ)
    assert read.secret is not None and mark.exists()  # read now: this process polls with it


def test_the_core_half_refuses_as_the_preamble_does_without_a_credential() -> None:
    """`checked` is what the Python API asks as a Watch is built, with the core alone: the same refusals."""
    unsafe = _contract('secret_env = "PREAMBLE_TOKEN"', safe=False)
    with pytest.raises(Refused, match="safe_status = false"):
        checked(WatchRequest(unsafe, "job-1"))
    with pytest.raises(Refused) as refused:
        checked(WatchRequest(_contract('secret_env = "PREAMBLE_TOKEN"'), "job-1", "bad id with spaces"))
    assert refused.value.said({"operation_id": "operation_id"}, "watch").startswith("cannot watch: operation_id")


def test_admit_installs_for_a_caller_who_runs_it_then_admits_and_refuses_in_admissions_words(
    store: AnyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREAMBLE_TOKEN", TOKEN)
    contract = _contract('secret_env = "PREAMBLE_TOKEN"')
    engine = Engine(store, owner=process_owner("watch"))
    first = ready(WatchRequest(contract, "job-1", "op-preamble-1", Limits(max_requests=5)))
    assert store.installed_contract(contract.digest) is None
    admitted = admit(first, engine, Installing("watch --contract", "t.toml"))
    assert admitted.created and store.installed_contract(contract.digest) is not None
    wider = ready(WatchRequest(contract, "job-1", "op-preamble-1", Limits(max_requests=9)))
    with pytest.raises(Refused) as refused:  # a resume may narrow a limit, never widen one
        admit(wider, engine)
    assert refused.value.refusal is not None
    assert refused.value.said({"max_requests": "--max-requests"}, "watch").startswith("cannot watch: ")
    assert "--max-requests" in refused.value.said({"max_requests": "--max-requests"}, "watch")
