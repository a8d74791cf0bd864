"""`pollwarden schedules`: each contract's learnt distribution, from the store a home holds."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path

from pollwarden.audit import load_or_create_keys
from pollwarden.core.learnt import MIN_ENDED
from pollwarden.engine import Engine
from pollwarden.store.open import open_store
from tests.conftest import install, run_cli
from tests.engine.test_learning import Clock, Jobs, _contract, _run
from tests.engine.test_learning_keys import learnt_home


def test_schedules_lists_what_each_contract_learnt(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    empty = run_cli("schedules", home=home)
    assert empty.code == 0 and "every contract polls with its plain backoff" in empty.stdout
    store = open_store(home / "pollwarden.db", keys=load_or_create_keys(home), trusted_checkpoint_path=None)
    try:
        clock = Clock()
        clock.now = datetime.now(UTC)  # samples older than the window (30 days) are not read
        contract = _contract()
        install(store, contract)
        jobs = Jobs(clock)
        _run(Engine(store, owner="tests", clock=clock), contract, jobs, clock, random.Random(4), MIN_ENDED + 5)
    finally:
        store.close()
    ran = run_cli("schedules", "--json", home=home)
    assert ran.code == 0, ran.stderr
    (one,) = json.loads(ran.stdout)["contracts"]
    assert one["contract"] == "exports" and one["samples"] == MIN_ENDED + 5 and one["censored"] == 0
    assert one["learnt"]["lag_target"] == 30.0 and one["learnt"]["checks"]
    assert one["requests_per_job_learnt"] < one["requests_per_job_plain"]
    text = run_cli("schedules", home=home)
    assert text.code == 0
    assert f"exports: {MIN_ENDED + 5} samples (0 censored)" in text.stdout
    assert "for a p95 lag of 30s" in text.stdout and "with the plain backoff" in text.stdout


def test_schedules_shows_each_learn_keys_own_distribution(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    learnt_home(home)
    ran = run_cli("schedules", "--json", home=home)
    assert ran.code == 0, ran.stderr
    by_key = {one["key"]: one for one in json.loads(ran.stdout)["contracts"]}
    assert set(by_key) == {None, "fast", "<slow>"}
    assert by_key[None]["samples"] == MIN_ENDED + 5 and by_key[None]["learnt"] is not None
    assert by_key["fast"]["samples"] == MIN_ENDED and by_key["fast"]["learnt"]["p95"] < 60
    assert by_key["<slow>"]["samples"] == 5 and by_key["<slow>"]["learnt"] is None
    text = run_cli("schedules", home=home).stdout
    assert f"exports key 'fast': {MIN_ENDED} samples (0 censored)" in text
    assert f"exports key '<slow>': 5 samples (0 censored); fewer than {MIN_ENDED} ended: the contract's whole" in text
