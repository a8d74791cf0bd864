"""A lane whose claim took nothing does not claim again at once for what another claimer holds mid-transaction.

On PostgreSQL the fleet's claim skips the rows another claim has locked, and the lane then asked when the next
operation is due: the locked one, due already, so it waited 0 s and claimed again, round after round, until the
other claimer committed (2,584 of 4,013 empty claims with four workers came straight after one). A lock held open
by the test stands for that other claimer: no timing, the claim and the wait it leads to are read directly.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from pollwarden.audit import load_or_create_keys
from pollwarden.core.admission import WatchRequest
from pollwarden.core.contract.parse import parse_contract
from pollwarden.engine import Engine
from pollwarden.fleet.worker import CONTENDED_WAIT, JsonLog, Worker
from pollwarden.simulator import contract_text
from pollwarden.store.base import Store
from pollwarden.store.open import open_store
from tests.conftest import install
from tests.store.conftest import create_database, drop_database


@pytest.fixture
def url() -> Iterator[str]:
    made = create_database(upgraded=True)
    try:
        yield made
    finally:
        drop_database(made)


def test_what_another_claimer_holds_is_not_claimed_again_at_once(url: str, tmp_path: Path) -> None:
    keys = load_or_create_keys(tmp_path)

    def store_factory() -> Store:
        return open_store(url, keys=keys, trusted_checkpoint_path=None)

    store = store_factory()
    contract = parse_contract(contract_text("http://127.0.0.1:9", name="exports"), source="c.toml")
    engine = Engine(store, owner="enqueue")
    install(store, contract)
    engine.admit(WatchRequest(contract, "j-1", "op-1", by="enqueue"))
    worker = Worker(store_factory, owner="worker-1", concurrency=2, log=JsonLog(io.StringIO(), worker="worker-1"))
    try:
        with ThreadPoolExecutor(2) as pool:
            with psycopg.connect(url) as other:  # another claimer, its transaction open on the due row
                other.execute("SELECT 1 FROM operations WHERE operation_id = 'op-1' FOR UPDATE")
                assert worker.run_once(pool) == 0
                # Due, free of any lease, and passed over only because it is locked: waited for, not claimed at once.
                assert store.next_due(free_at=store.db_now()) is not None
                assert worker._idle_for() == CONTENDED_WAIT
                other.rollback()
            assert worker.run_once(pool) == 1  # once the other claimer lets go, the next claim takes it
    finally:
        worker.close()
        store.close()
