"""A Python API watch woken by the provider (issue 27): asleep ten minutes for its next check, it checks at once
when a signed push reaches a receiver of the same home, and its cancel still ends the wait at once."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pollwarden import Succeeded, Watch, WatchCancelled
from pollwarden.fleet.hooks import HooksServer, Receiver
from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator, Step
from pollwarden.store.owner import process_owner
from tests.conftest import write_contract
from tests.e2e.test_push_cli import PUSH, SECRET, signed
from tests.loopback import post


def test_an_api_watch_is_woken_by_a_signed_push(sim: Simulator, home: Path, tmp_path: Path) -> None:
    sim.add_job("exp-4", [Step(body={"state": "running"}), Step(body={"state": "succeeded", "result_url": "/r/4"})])
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="10m", max_delay="10m", deadline="1h",
                              extra=PUSH)  # fmt: skip
    store = open_store(home, keys="write")
    server = HooksServer(Receiver(store, owner=process_owner("hooks"), environ={"EXPORTS_HOOK": SECRET})).start()
    answers: list[int] = []

    def pushed_after_first_answer(progress: object) -> None:
        if not answers:  # the first answer is recorded and the lease given back: push now, the watch sleeps next
            answers.append(post(f"{server.url}/hooks/exports", *signed("exp-4", "msg_api")))

    try:
        outcome = Watch(contract, "exp-4", home=home, on_progress=pushed_after_first_answer).run()
    finally:
        server.stop()
        store.close()
    assert answers == [202]
    assert isinstance(outcome, Succeeded) and outcome.record.status_requests_used == 2


def test_a_cancel_still_ends_a_wait_on_the_bell(sim: Simulator, home: Path, tmp_path: Path) -> None:
    sim.add_job("exp-5", [Step(body={"state": "running"})])
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="10m", max_delay="10m", deadline="1h",
                              extra=PUSH)  # fmt: skip
    first = threading.Event()
    watch = Watch(contract, "exp-5", home=home, on_progress=lambda progress: first.set())

    def cancel_once_asleep() -> None:
        first.wait(30)
        watch.cancel()

    canceller = threading.Thread(target=cancel_once_asleep)
    canceller.start()
    with pytest.raises(WatchCancelled):
        watch.run()
    canceller.join()
    assert sim.request_count("exp-5") == 1
