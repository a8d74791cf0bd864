"""The worker asks admission whether an operation's stored contract may be polled at all: an operation of a
contract whose status request is an action (`safe_status = false`), enqueued by something that did not ask, is
stopped with a recorded stop and a decision when claimed, never polled and never claimed again."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from pollwarden import events as ev
from pollwarden.core.admission import UNSAFE_STATUS_RULE, WatchRequest, check
from pollwarden.core.contract.parse import parse_contract
from pollwarden.core.reasons import Phase, StopReason
from pollwarden.core.record import new_record
from pollwarden.fleet.worker import JsonLog, Worker
from pollwarden.simulator import contract_text
from tests.conftest import install
from tests.store.conftest import AnyStore, Backend, backend, pg_url, store
from tests.transport.test_http_keepalive import holding

__all__ = ["backend", "pg_url", "store"]  # the store suite's fixtures: both backends


def test_an_enqueued_operation_of_an_unsafe_status_contract_is_stopped_not_polled(
    store: AnyStore, backend: Backend
) -> None:
    with holding(None, guard=60.0) as provider:
        text = contract_text(provider.url, name="unsafe").replace("safe_status = true", "safe_status = false")
        if "safe_status" not in text:
            text = "safe_status = false\n" + text
        contract = parse_contract(text, source="unsafe.toml")
        assert not contract.safe_status
        refused = check(WatchRequest(contract, "j-1", "op-unsafe", by="enqueue"))
        assert refused is not None and "safe_status = false" in refused.message  # admission refuses it itself
        install(store, contract)
        store.create(
            new_record(contract, operation_id="op-unsafe", job_id="j-1", now=datetime.now(UTC)),
            text,
            ev.Created.prepared({}),
        )
        log = io.StringIO()
        worker = Worker(backend.open, owner="worker-1", concurrency=2, log=JsonLog(log, worker="w"))
        try:
            with ThreadPoolExecutor(2) as pool:
                assert worker.run_once(pool) == 1
        finally:
            worker.close()  # waits for the operation stepped alone
        assert provider.requests == []
    stored = store.get("op-unsafe")
    assert stored is not None and stored.lease_owner is None
    record = stored.record
    assert (record.phase, record.reason) == (Phase.STOPPED, StopReason.INTEGRATION_FAILURE)
    assert record.detail is not None and "safe_status = false" in record.detail and record.polls_completed == 0
    rules = [e.data.get("rule") for e in store.events("op-unsafe") if e.kind == "decision"]
    assert rules == [UNSAFE_STATUS_RULE]
    assert [d.status for d in store.decisions("op-unsafe")] == ["open"]
    events = [json.loads(line)["event"] for line in log.getvalue().splitlines()]
    assert "contract_unwatchable" in events and "stopped" in events
