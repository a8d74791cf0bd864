"""A submitted job's first check is placed by its contract's learnt history, as a watch's is (issue 26), on both
backends: keyed by `[schedule] learn_key` in the submitted body when it names one there."""

from __future__ import annotations

import json
import math
import random
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import pytest

from pollwarden.actions.provider import submit
from pollwarden.audit import load_or_create_keys
from pollwarden.core.admission import WatchRequest
from pollwarden.core.contract.parse import Contract, parse_contract
from pollwarden.core.learnt import MIN_ENDED, Learnt, first_check
from pollwarden.core.reasons import DelaySource
from pollwarden.core.record import OperationRecord
from pollwarden.engine import Engine, learning
from pollwarden.store.base import Store
from pollwarden.store.open import open_store
from pollwarden.transport.http import StatusClient
from tests.conftest import install
from tests.engine.test_learning import Clock
from tests.engine.test_learning_keys import KindedJobs, _run
from tests.loopback import Answer, Loopback, serving
from tests.store.conftest import BACKENDS, create_database, drop_database


@pytest.fixture(scope="module")
def provider() -> Iterator[Loopback]:
    """One for the module: its URL is in the contract, which the shared history (`learnt`) installed."""
    with serving() as server:
        server.routes[("POST", "/jobs")] = Answer(201, b'{"id": "job-new", "state": "running"}')
        yield server


def _contract(base: str, learn: bool = True) -> Contract:
    from pollwarden.simulator import contract_text

    text = contract_text(base, base_delay="5s", max_delay="5m", deadline="1h", max_requests=80)
    schedule = 'max_delay = "5m"\nlag_target = "30s"\nlearn_key = "model"' + ("" if learn else "\nlearn = false")
    text = text.replace('max_delay = "5m"', schedule)
    return parse_contract(text + f'\n[submit]\nurl = "{base}/jobs"\njob_id = "id"\n', source="test.toml")


def _history(store: Store, contract: Contract, clock: Clock) -> None:
    install(store, contract)
    jobs = KindedJobs(clock)
    _run(Engine(store, owner="tests", clock=clock, rng=random.Random(2)), contract, jobs, "small", 20, MIN_ENDED)
    _run(Engine(store, owner="tests", clock=clock, rng=random.Random(2)), contract, jobs, "large", 400, MIN_ENDED)


@dataclass
class _Histories:
    """Per backend, a store holding `_history` of the learning contract, made once for the module: making it reads
    and plans the model again after each of its 40 jobs, most of these tests' time; each test gets a copy."""

    provider: Loopback
    where: Path
    built: dict[str, tuple[str | Path, datetime]] = field(default_factory=dict)
    """Backend -> (the built store: a SQLite file or a PostgreSQL URL, the clock when its history ended)."""
    databases: list[str] = field(default_factory=list)
    """Every database made, to drop at the end (one whose history failed too)."""

    def copy(self, kind: str, into: Path) -> tuple[str | Path, datetime]:
        source, now = self.built.get(kind) or self._build(kind)
        if isinstance(source, Path):
            # SQLite's own backup: a consistent copy with the WAL folded in.
            with sqlite3.connect(source) as src, sqlite3.connect(into / "state.db") as dst:
                src.backup(dst)
            src.close()
            dst.close()
            return into / "state.db", now
        return create_database(upgraded=True, copy_of=source), now

    def _build(self, kind: str) -> tuple[str | Path, datetime]:
        target: str | Path = self.where / f"{kind}.db" if kind == "sqlite" else create_database(upgraded=True)
        if isinstance(target, str):
            self.databases.append(target)
        store = open_store(target, keys=load_or_create_keys(self.where / "home"))
        clock = Clock()
        try:
            with pytest.MonkeyPatch.context() as patch:  # `models_read_at_once`, for the module's one history
                patch.setattr(learning, "SETTLE", 0.0)
                patch.setattr(learning, "SHARE", math.inf)
                _history(store, _contract(self.provider.url), clock)
        finally:
            store.close()  # no session left on the database: it is copied
        self.built[kind] = (target, clock())
        return self.built[kind]


@pytest.fixture(scope="module")
def histories(provider: Loopback, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Histories]:
    made = _Histories(provider, tmp_path_factory.mktemp("histories"))
    try:
        yield made
    finally:
        for url in made.databases:
            drop_database(url)


@dataclass
class History:
    store: Store
    clock: Clock


@pytest.fixture(params=BACKENDS)
def history(request: pytest.FixtureRequest, histories: _Histories, tmp_path: Path) -> Iterator[History]:
    """A store of each backend holding the learning contract's `_history` (its own copy), and a clock at its end."""
    target, now = histories.copy(request.param, tmp_path)
    try:
        store = open_store(target, keys=load_or_create_keys(histories.where / "home"))
        clock = Clock()
        clock.now = now
        try:
            yield History(store, clock)
        finally:
            store.close()
    finally:
        if isinstance(target, str):  # dropped even when the copy could not be opened
            drop_database(target)


def _submit(store: Store, contract: Contract, clock: Clock, body: object, operation_id: str) -> OperationRecord:
    with StatusClient(contract, None, clock=clock) as client:
        return submit(
            store, contract, client, operation_id=operation_id, body=json.dumps(body).encode(), now=clock()
        ).record


def _model(store: Store, contract: Contract, clock: Clock, key: str | None = None) -> Learnt | None:
    """The model a new operation of `contract` is placed by (`Models.for_new`: its lag target, and its `max_delay`
    as the widest gap, which the plan is made within), read now."""
    return learning.Models(store, clock).for_new(WatchRequest(contract, None, by="tests"), key)


def _jittered_range(record: OperationRecord, model: Learnt) -> tuple[datetime, datetime]:
    """The earliest and the latest first check `model` places for `record`, over its jitter draw: every draw on a
    fine grid, not the two ends alone, as a check planned past `max_delay` is drawn back from it (`next_check`), the
    later the draw the earlier the check."""
    base = replace(record, next_poll_at=record.created_at, delay_source=DelaySource.LOCAL_BACKOFF)
    placed = [first_check(base, model, n / 10_000).next_poll_at for n in range(10_000)]
    return min(placed), max(placed)


@pytest.mark.usefixtures("models_read_at_once")
def test_a_submitted_jobs_first_check_is_placed_by_its_keys_history(provider: Loopback, history: History) -> None:
    store, clock = history.store, history.clock
    contract = _contract(provider.url)
    record = _submit(store, contract, clock, {"model": "large", "input": "x"}, "op-large")
    assert record.delay_source is DelaySource.LEARNT and record.sample_key == "large"
    large, whole = _model(store, contract, clock, "large"), _model(store, contract, clock)
    assert large is not None and large.keyed and whole is not None
    earliest, latest = _jittered_range(record, large)
    assert earliest <= record.next_poll_at <= latest  # the key's plan: the large jobs' first check
    assert _jittered_range(record, whole)[1] < earliest  # not the whole contract's, which looks where small ones end
    stored = store.get("op-large")
    assert stored is not None and stored.record == record


@pytest.mark.usefixtures("models_read_at_once")
@pytest.mark.parametrize("model", [{"name": "large"}, "[secret]", "x" * 10_240, None])
def test_a_hostile_or_missing_key_in_the_body_learns_from_the_whole_contract(
    provider: Loopback, history: History, model: object
) -> None:
    store, clock = history.store, history.clock
    contract = _contract(provider.url)
    record = _submit(store, contract, clock, {"model": model}, "op-other")
    assert record.sample_key is None and record.delay_source is DelaySource.LEARNT
    whole = _model(store, contract, clock)
    assert whole is not None
    earliest, latest = _jittered_range(record, whole)
    assert record.created_at < earliest <= record.next_poll_at <= latest


def test_a_contract_that_does_not_learn_submits_with_its_first_check(provider: Loopback, history: History) -> None:
    store, clock = history.store, history.clock
    contract = _contract(provider.url, learn=False)
    install(store, contract)  # a version of the same contract that does not learn, beside the history it left
    record = _submit(store, contract, clock, {"model": "large"}, "op-plain")
    assert record.delay_source is DelaySource.LOCAL_BACKOFF
    assert record.next_poll_at == record.created_at  # first_check 0s


@pytest.mark.parametrize(
    ("model", "shown", "why"),
    [
        ({"name": "large"}, "", "a JSON object"),
        ("[secret]", "[secret]", "holds the credential"),
        ("x" * 10_240, "x" * 77 + "...", "longer than 64 characters"),
        ("gpu\x1b[2J\nlarge", "gpu\\x1b[2J\\nlarge", "holds control characters"),
        ("\x07" * 100, ("\\x07" * 20)[:77] + "...", "longer than 64 characters"),
    ],
)
def test_a_key_refused_in_the_body_leaves_one_event_saying_it_was_not_used(
    provider: Loopback, history: History, model: object, shown: str, why: str
) -> None:
    """The refusal is audited with the submission (as a refused key of an answer is), in the words hostile values
    get elsewhere: cut to 80 characters, control characters escaped, a credential never shown."""
    store, clock = history.store, history.clock
    contract = _contract(provider.url)
    record = _submit(store, contract, clock, {"model": model}, "op-refused")
    assert record.sample_key is None and record.delay_source is DelaySource.LEARNT  # the whole history places it
    refused = [e for e in store.events("op-refused") if e.kind == "guidance_rejected"]
    assert len(refused) == 1, refused
    data = refused[0].data
    assert data["source"] == "learn_key model" and data["value"] == shown
    assert why in data["why"] and "not used" in data["why"] and "whole history" in data["why"]
    assert all(ord(ch) >= 32 for text in data.values() if isinstance(text, str) for ch in text)
