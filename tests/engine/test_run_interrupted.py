"""`Engine.run` keeps the promise of a watch that ends early, for every driver: it stops between requests when
its `stop` is set, and whatever ends it before the operation is final leaves one `interrupted` event, the lease
given back, the deadline and budget kept."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pollwarden.audit import load_or_create_keys
from pollwarden.cli.interrupts import Interrupted
from pollwarden.core.admission import WatchRequest
from pollwarden.core.contract.parse import Contract, parse_contract
from pollwarden.engine import Cancelled, Engine, StepResult, Watching
from pollwarden.simulator import contract_text
from pollwarden.store.base import Store
from pollwarden.store.open import open_store
from pollwarden.transport.fake import FakeTransport, Reply
from pollwarden.transport.http import StatusClient
from tests.conftest import install

RUNNING = b'{"state": "running"}'
DONE = b'{"state": "succeeded", "result_url": "/r"}'


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    home = tmp_path / "home"
    home.mkdir()
    opened = open_store(home / "pollwarden.db", keys=load_or_create_keys(home), trusted_checkpoint_path=None)
    try:
        yield opened
    finally:
        opened.close()


def _contract(**options: Any) -> Contract:
    return parse_contract(contract_text("https://provider.test", max_requests=5, **options), source="t.toml")


def _interrupted(store: Store, operation_id: str) -> list[dict[str, Any]]:
    return [dict(e.data) for e in store.events(operation_id) if e.kind == "interrupted"]


def _run(
    store: Store, answers: list[Any], contract: Contract | None = None, **run: Any
) -> tuple[Engine, str, FakeTransport]:
    """Admit an operation, then run it on a transport that answers (or raises) from `answers` in order."""
    contract = contract or _contract()
    install(store, contract)
    engine = Engine(store, owner="test", clock=store.db_now)
    op = engine.admit(WatchRequest(contract, "job-1", "op-1")).record.operation_id
    replies = iter(answers)

    def answer(request: object) -> Reply:
        got = next(replies)
        if isinstance(got, BaseException):
            raise got
        return Reply(body=got)

    transport = FakeTransport(answer)
    with StatusClient(contract, None, clock=store.db_now, transport=transport) as client:
        engine.run(contract, client, op, Watching(**run))
    return engine, op, transport


def test_a_stop_set_before_the_run_sends_nothing_and_records_the_cancel(store: Store) -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled, match="op-1 was cancelled"):
        _run(store, [RUNNING], stop=stop, by="python api")
    (event,) = _interrupted(store, "op-1")
    assert (event["by"], event["why"], event["resumable"], event["status_requests_used"]) == (
        "python api",
        "cancelled",
        True,
        0,
    )
    stored = store.get("op-1")
    assert stored is not None and stored.lease_owner is None and stored.record.status_requests_used == 0


def test_a_stop_set_while_asleep_wakes_the_run_at_once(store: Store) -> None:
    stop = threading.Event()
    timer = threading.Timer(0.2, stop.set)
    timer.start()
    with pytest.raises(Cancelled):
        _run(store, [RUNNING] * 5, _contract(base_delay="60s", max_delay="60s"), stop=stop)
    returned_at = store.db_now()
    timer.join()
    stored = store.get("op-1")
    assert stored is not None and stored.record.phase.value == "active" and stored.lease_owner is None
    assert returned_at < stored.record.next_poll_at  # the stop woke the sleep: the next poll is still to come
    (event,) = _interrupted(store, "op-1")
    assert event["by"] == "cli" and event["status_requests_used"] == stored.record.status_requests_used >= 1


@pytest.mark.parametrize(
    ("raised", "why"),
    [(KeyboardInterrupt(), "KeyboardInterrupt"), (Interrupted(signal.SIGTERM), "SIGTERM")],
)
def test_an_interrupt_during_a_request_gives_the_lease_back_and_is_recorded(
    raised: BaseException, why: str, store: Store
) -> None:
    with pytest.raises(type(raised)):
        _run(store, [RUNNING, raised], sleep=lambda _: None)
    stored = store.get("op-1")
    assert stored is not None and stored.lease_owner is None  # the flow gave it back on the way out
    assert stored.record.status_requests_used == 2  # the second request was reserved, its answer never came
    (event,) = _interrupted(store, "op-1")
    assert event["why"] == why and event["status_requests_used"] == 2 and event["operation"] == "op-1"


def test_a_callback_that_raises_on_the_last_step_records_nothing(store: Store) -> None:
    def on_progress(result: StepResult) -> None:
        stored = store.get("op-1")
        if stored is not None and stored.record.is_final:
            raise RuntimeError("the caller's bug")

    with pytest.raises(RuntimeError):
        _run(store, [RUNNING, DONE], sleep=lambda _: None, on_progress=on_progress)
    assert _interrupted(store, "op-1") == []  # nothing to resume: the operation succeeded


def test_a_store_that_cannot_take_the_event_does_not_hide_what_stopped_the_run(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(store, "append", broken)
    with pytest.raises(KeyboardInterrupt):
        _run(store, [KeyboardInterrupt()])
