"""The learnt first check through the Python API (issue 26), on SQLite (the home's store) and PostgreSQL (a store
handed in): a contract that learns, with `MIN_ENDED` ended jobs in the store, gets a `Watch`'s first check placed by
that history; the creating event records it, `pollwarden why` replays it as made and `pollwarden story` tells it,
and the watch sends its first request no sooner than the recorded placement."""

from __future__ import annotations

from pathlib import Path

from pollwarden import Succeeded, Watch
from pollwarden.core.durations import parse_rfc3339
from pollwarden.simulator import Simulator
from tests.e2e.conftest import db as db  # each test that takes it runs on SQLite and on PostgreSQL
from tests.e2e.conftest import store_of
from tests.learnt_history import ENDS_AT_ONCE, first_sent, learn_history, learnt_contract, told


def test_a_watchs_first_request_goes_out_at_its_recorded_learnt_first_check(
    db: str, sim: Simulator, tmp_path: Path, home: Path
) -> None:
    path = tmp_path / "exports.toml"
    store = store_of(db, home)
    try:
        learn_history(store, learnt_contract(path, sim.url))
        sim.add_job("j-api", ENDS_AT_ONCE)
        outcome = Watch(path, "j-api", store=store, operation_id="op-api").run()
    finally:
        store.close()
    assert isinstance(outcome, Succeeded), outcome
    assert sim.request_count("j-api") == 1
    placed, events = told("op-api", home, "--db", db)
    assert first_sent(events) >= parse_rfc3339(placed["next_poll_at"])
