"""One check with the credential configured now, sent by a watcher that held the old one all along (a worker, an
MCP server, in-process code): the flow asks its driver to forget the credential first (`Renew`), so the check
reads the one configured now instead of the value read once when the watch began."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pollwarden.actions.decisions import Answer, apply_decision, open_decision
from pollwarden.clock import utcnow
from pollwarden.core.admission import WatchRequest
from pollwarden.core.contract.parse import Contract, parse_contract
from pollwarden.core.escalation import OptionKind
from pollwarden.core.reasons import Phase, StopReason
from pollwarden.engine import Engine
from pollwarden.simulator import Simulator, Step, contract_text
from pollwarden.store.base import Store
from pollwarden.transport.credentials import Credential
from pollwarden.transport.http import StatusClient
from tests.conftest import install

KEY = "RECHECK_TOKEN"
RIGHT = "pw-right-key-5b1e"


@pytest.fixture
def guarded() -> Iterator[Simulator]:
    with Simulator(token=RIGHT) as simulator:
        yield simulator


def _contract(sim: Simulator) -> Contract:
    return parse_contract(contract_text(sim.url, secret_env=KEY, base_delay="10ms", max_delay="20ms"), source="t")


def test_a_long_lived_client_sends_the_check_with_the_credential_configured_now(
    store: Store, guarded: Simulator
) -> None:
    guarded.add_job("j1", [Step(body={"state": "succeeded", "result_url": "/r/1"})])
    contract = _contract(guarded)
    install(store, contract)
    environ = {KEY: "pw-wrong-key-77"}
    assert contract.auth is not None
    credential = Credential(contract.name, contract.auth, environ)
    credential.prime()  # read once for the watch, as every driver does when it starts
    engine = Engine(store, owner="watcher")
    with StatusClient(contract, credential, clock=utcnow) as client:
        admitted = engine.admit(WatchRequest(contract, "j1", "op"))
        stopped = engine.run(contract, client, "op", record=admitted.record)
        assert stopped.reason is StopReason.AUTHORIZATION_DENIED
        environ[KEY] = RIGHT  # the key is fixed where this watcher reads it
        opened = open_decision(store, stopped)
        assert opened is not None and opened.request.option(1).kind is OptionKind.RECHECK
        # A person chooses the check somewhere without the credential: it is left to the watcher.
        outcome = apply_decision(store, contract, Answer(opened.request.decision_id, 1, "alice", None, utcnow()))
        assert outcome.resume == "op" and outcome.action == {"action": "recheck", "ok": True, "sent": False}
        final = engine.run(contract, client, "op")
    assert final.phase is Phase.SUCCEEDED and final.result == "/r/1"
    assert [r.auth_ok for r in guarded.requests("j1")] == [False, True]
    assert RIGHT not in str(final.summary())
