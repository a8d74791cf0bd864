"""The broker behind the MCP tools, in process: the decision order's audit step and the scrubber."""

from __future__ import annotations

import base64
import logging
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from pollwarden import events as ev
from pollwarden.mcp_server import Broker, CallContext, Scrubber, ScrubLogs, load_contracts, secret_values
from pollwarden.mcp_server.base import ANSWER_MARGIN_SECONDS
from pollwarden.simulator import Simulator, Step
from pollwarden.store.base import StoreError
from pollwarden.store.sqlite import SQLiteStore
from tests.conftest import token_command_auth

from .support import agent_contract


def _call() -> CallContext:
    return CallContext(cancelled=threading.Event())


def test_no_intent_record_means_no_provider_call(
    sim: Simulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent_contract(tmp_path / "contracts", sim.url)
    contracts, problems = load_contracts(tmp_path / "contracts")
    assert problems == []
    broker = Broker(contracts, tmp_path / "home", environ={})
    ok, started = broker.dispatch("start_watch", _call(), None, contract="exports", job_id="happy-1")
    assert ok, started
    real_append = SQLiteStore.append

    def failing(self: SQLiteStore, log_id: str, event: ev.NewEvent, at: datetime) -> None:
        if event.KIND == "call_intent":
            raise StoreError("disk full")
        real_append(self, log_id, event, at)

    monkeypatch.setattr(SQLiteStore, "append", failing)
    ok, reply = broker.dispatch("check_operation", _call(), None, operation_id=started["operation_id"])
    assert not ok and reply["error"] == "audit_unavailable", reply
    assert sim.request_count("happy-1") == 0  # the intent could not be recorded, so nothing was sent

    monkeypatch.setattr(SQLiteStore, "append", real_append)
    ok, reply = broker.dispatch("check_operation", _call(), None, operation_id=started["operation_id"])
    assert ok and reply["status"] == "polled" and sim.request_count("happy-1") == 1


def test_unknown_tools_and_crashes_come_back_as_scrubbed_errors(sim: Simulator, tmp_path: Path) -> None:
    agent_contract(tmp_path / "contracts", sim.url, secret_env="PW_BROKER_SECRET")
    contracts, _ = load_contracts(tmp_path / "contracts")
    broker = Broker(contracts, tmp_path / "home", environ={"PW_BROKER_SECRET": "hunter2-very-secret"})

    def boom(broker: Broker, call: CallContext) -> dict[str, Any]:
        raise RuntimeError("token hunter2-very-secret rejected")

    broker.tools["list_operations"] = boom
    ok, reply = broker.dispatch("list_operations", _call(), None)
    assert not ok and reply["error"] == "internal_error"
    assert "hunter2-very-secret" not in str(reply) and "[secret]" in reply["message"]


def test_scrubber_removes_secrets_and_their_encodings() -> None:
    secret = "s3cr3t/with+chars"
    scrub = Scrubber([secret, ""])
    text = f"a {secret} b {quote(secret, safe='')} c {base64.b64encode(secret.encode()).decode()}"
    cleaned = scrub.text(text)
    assert secret not in cleaned and quote(secret, safe="") not in cleaned
    assert base64.b64encode(secret.encode()).decode().rstrip("=") not in cleaned
    assert scrub.value({"k": [secret, 1, {secret: None}]}) == {"k": ["[secret]", 1, {"[secret]": None}]}
    assert not Scrubber([]) and Scrubber([]).text("unchanged") == "unchanged"

    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "sent %s", (secret,), None)
    try:
        raise ValueError(secret)
    except ValueError:
        record.exc_info = sys.exc_info()
    assert ScrubLogs(scrub).filter(record)
    assert record.getMessage() == "sent [secret]" and record.exc_text and secret not in record.exc_text


def test_the_served_credentials_are_read_as_they_are_sent(sim: Simulator, tmp_path: Path) -> None:
    """One trailing newline is not part of the credential (`resolve_secret`); the scheme it is sent with is."""
    agent_contract(tmp_path / "contracts", sim.url, secret_env="PW_TOKEN")
    agent_contract(tmp_path / "contracts", sim.url, name="other", secret_env="PW_OTHER")
    contracts, _ = load_contracts(tmp_path / "contracts")
    environ = {"PW_TOKEN": "tok-123456789\n", "PW_OTHER": "bad\x00value-1"}
    assert secret_values(contracts.values(), environ) == [("bad\x00value-1", "Bearer"), ("tok-123456789", "Bearer")]
    broker = Broker(contracts, tmp_path / "home", environ=environ)
    assert "other" in broker.not_ready  # never sent, and still scrubbed
    cleaned = broker.scrubber.text("Bearer tok-123456789 and bad\x00value-1")
    assert "tok-123456789" not in cleaned and "bad\x00value-1" not in cleaned, cleaned


def test_a_call_waiting_for_approval_stops_waiting_once_another_call_made_that_request(
    sim: Simulator, tmp_path: Path
) -> None:
    """CI saw it: a host cut a call the server had not yet heard was cut, a person approved, and that first call
    made the request; the next call asked the person about request 2 of a finished operation and waited 45 s."""
    agent_contract(tmp_path / "contracts", sim.url, approval="per_call", agent='[agent]\napproval_timeout = "10m"\n')
    contracts, _ = load_contracts(tmp_path / "contracts")
    broker = Broker(contracts, tmp_path / "home", environ={})
    sim.add_job("moot-1", [Step(body={"state": "succeeded", "result_url": "/results/moot-1"})])
    ok, started = broker.dispatch("start_watch", _call(), None, contract="exports", job_id="moot-1")
    assert ok, started
    op = started["operation_id"]
    # Without the fix the call answers approval_pending at this bound (rather than waiting the 10 minutes).
    waiting = CallContext(cancelled=threading.Event(), answer_by=time.monotonic() + 20 + ANSWER_MARGIN_SECONDS)
    answers: list[tuple[bool, dict[str, Any]]] = []
    thread = threading.Thread(
        target=lambda: answers.append(broker.dispatch("check_operation", waiting, None, operation_id=op))
    )
    thread.start()
    grant = _pending_grant(broker)
    contract = contracts["exports"]
    with broker.store() as store, broker.client(contract) as client:
        broker.engine(store).step(contract, client, op)  # the request, made by the call that asked for it
    thread.join()
    ok, reply = answers[0]
    assert ok and reply["status"] == "succeeded", reply
    assert sim.request_count("moot-1") == 1
    with broker.store() as store:
        withdrawn = store.get_grant(grant)
        assert withdrawn is not None and withdrawn.status == "expired" and withdrawn.decided_by == "pollwarden"
        assert store.grants(status="pending") == []  # nobody is asked about it any more


def _pending_grant(broker: Broker) -> str:
    for _ in range(1200):  # until the call has asked (it is the other thread's first step): at most a minute
        with broker.store() as store:
            pending = store.grants(kind="call", status="pending")
        if pending:
            return pending[0].grant_id
        time.sleep(0.05)
    raise AssertionError("the call never asked for an approval")


def test_the_log_filter_asks_each_sessions_scrubber_at_each_line_until_its_session_ends() -> None:
    """Issue 23: a token is read when a call first needs it, so the log filter asks a broker's scrubber at each
    line; a broker process serves session after session, each adding its own to the one filter."""
    read: list[str] = []
    first = ScrubLogs(Scrubber(["env-secret-1234"]))
    first.add(lambda: Scrubber(read))
    gone: list[Scrubber | None] = [Scrubber(["old-session-tok"])]
    first.add(lambda: gone[0])

    def line(text: str) -> str:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, text, None, None)
        assert first.filter(record)
        return record.getMessage()

    assert line("a env-secret-1234 b old-session-tok lazy-token-5678") == "a [secret] b [secret] lazy-token-5678"
    read.append("lazy-token-5678")  # the first call of a session read its token
    assert line("lazy-token-5678") == "[secret]"
    gone[0] = None  # that session ended: its source is dropped
    assert line("old-session-tok") == "old-session-tok" and len(first._sources) == 2


def test_start_watch_takes_a_lag_target_and_refuses_a_bad_one_naming_it(sim: Simulator, tmp_path: Path) -> None:
    agent_contract(tmp_path / "contracts", sim.url)
    contracts, _ = load_contracts(tmp_path / "contracts")
    broker = Broker(contracts, tmp_path / "home", environ={})
    ok, started = broker.dispatch("start_watch", _call(), None, contract="exports", job_id="happy-1", lag_target="45s")
    assert ok, started
    store = SQLiteStore(tmp_path / "home" / "pollwarden.db")
    try:
        stored = store.get(started["operation_id"])
        assert stored is not None and stored.record.plan.schedule.lag_target.total_seconds() == 45
    finally:
        store.close()
    for bad, words in (("-3s", "lag_target: "), (0, "lag_target must be longer than zero"), (True, "lag_target")):
        ok, reply = broker.dispatch("start_watch", _call(), None, contract="exports", job_id="happy-2", lag_target=bad)
        assert not ok and reply["error"] == "invalid_argument" and words in reply["message"], reply


def test_a_contract_that_may_not_be_watched_is_not_ready_before_its_token_command_runs(
    sim: Simulator, tmp_path: Path
) -> None:
    """As every interface's preamble (`engine.preamble`): no credential is read, no token command run, for a
    contract no watch may poll (`safe_status = false`)."""
    mark = tmp_path / "ran"
    script = tmp_path / "token.py"  # run by this interpreter (`token_command_auth`)
    script.write_text(f"open({str(mark)!r}, 'w').close()\nprint('tok-unsafe-3c1d')\n", encoding="utf-8")
    path = agent_contract(tmp_path / "contracts", sim.url, agent=token_command_auth(script))
    path.write_text(path.read_text(encoding="utf-8").replace("safe_status = true", "safe_status = false", 1))
    contracts, _ = load_contracts(tmp_path / "contracts")
    broker = Broker(contracts, tmp_path / "home", environ={})
    ok, reply = broker.dispatch("start_watch", _call(), None, contract="exports", job_id="happy-1")
    assert not ok and reply["error"] == "not_ready", reply
    assert not mark.exists(), "the token command ran for a contract no watch may poll"
    assert sim.request_count("happy-1") == 0
