"""The worker's batch claim: its claims and reservations share one transaction, and nothing slow happens inside it.

What is not stepped in the batch (a paced provider's poll, an operation to give back) is sorted as soon as the
claims are committed, not after the batch's last answer, and the batch does not wait for it; a contract seen for
the first time (whose credential may come from a token command) has its command run in the background, outside
the transaction and off the lane: its operation is given back until the credential is in, so no other write of
the process, and no batch, waits for it.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pollwarden import events as ev
from pollwarden.audit import load_or_create_keys
from pollwarden.core.admission import WatchRequest
from pollwarden.core.contract.parse import parse_contract
from pollwarden.core.reasons import StopReason
from pollwarden.engine import Engine
from pollwarden.fleet.worker import JsonLog, Worker
from pollwarden.simulator import contract_text
from pollwarden.store.base import Store
from pollwarden.store.open import open_store
from tests.conftest import install, token_command_auth
from tests.transport.test_http_keepalive import KeepAliveServer, holding

GUARD = 60.0
"""How long the test waits for what must happen before failing it as stalled: a guard, never the assertion."""


def provider(hold: threading.Event | None = None) -> AbstractContextManager[KeepAliveServer]:
    """A loopback provider that answers `running`; with `hold`, only once it is set."""
    return holding(hold, guard=GUARD)


def _store(home: Path) -> Store:
    return open_store(home / "pollwarden.db", keys=load_or_create_keys(home), trusted_checkpoint_path=None)


def _until(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + GUARD
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def _polled(store: Store, operation_id: str) -> bool:
    stored = store.get(operation_id)
    return stored is not None and stored.record.polls_completed > 0


def _run_until(worker: Worker, pool: ThreadPoolExecutor, condition: Callable[[], bool], what: str) -> None:
    """The worker's batches, one after another, until `condition` holds (a credential it waits for comes in while
    its contract is passed over, so the first batches may claim nothing of it)."""
    _until(lambda: worker.run_once(pool) >= 0 and condition(), what)


def _held_token(tmp_path: Path, token: str) -> tuple[str, Path, Path]:
    """[auth] with a token command that says it started (touches `started`) and prints `token` only once the
    test touches `go`: the table, `started` and `go`."""
    started, go = tmp_path / "started", tmp_path / "go"
    command = tmp_path / "token.py"
    command.write_text(
        "import pathlib, time\n"
        f"pathlib.Path({str(started)!r}).touch()\n"
        f"while not pathlib.Path({str(go)!r}).exists():\n"
        "    time.sleep(0.005)\n"
        f"print({token!r})\n"
    )
    return token_command_auth(command), started, go


def _admit(engine: Engine, request: WatchRequest) -> None:
    """What `enqueue` does, once an operator installed the contract (workers run installed versions only)."""
    install(engine.store, request.contract)
    engine.admit(request)


def test_a_paced_providers_poll_starts_while_the_batch_waits_for_a_slow_answer(tmp_path: Path) -> None:
    hold = threading.Event()
    with provider(hold) as slow_provider, provider() as paced_provider:
        slow = parse_contract(contract_text(slow_provider.url, name="slow", timeout="120s"), source="s.toml")
        paced = parse_contract(contract_text(paced_provider.url, name="paced", timeout="120s"), source="p.toml")
        store = _store(tmp_path)
        engine = Engine(store, owner="enqueue")
        _admit(engine, WatchRequest(slow, "j-slow", "op-slow", by="enqueue"))
        _admit(engine, WatchRequest(paced, "j-paced", "op-paced", by="enqueue"))
        worker = Worker(
            lambda: _store(tmp_path), owner="worker-1", concurrency=4, provider_rates={"paced": 100.0},
            log=JsonLog(io.StringIO(), worker="worker-1"),
        )  # fmt: skip
        with ThreadPoolExecutor(4) as pool:
            batch = pool.submit(worker.run_once, pool)
            _until(lambda: slow_provider.requests, "the slow provider was never asked")
            # Its answer is held: the paced poll must not wait for it.
            _until(lambda: paced_provider.requests, "the paced provider's poll waited for the batch's slow answer")
            assert not hold.is_set()
            assert batch.result(GUARD) == 2  # the slow answer is waited for aside, not by the lane
            hold.set()
        worker.close()  # waits for what went aside
    for op in ("op-slow", "op-paced"):
        stored = store.get(op)
        assert stored is not None and stored.record.polls_completed == 1 and stored.lease_owner is None
    store.close()


def test_a_token_command_of_a_new_contract_runs_outside_the_claims_transaction(tmp_path: Path) -> None:
    """A contract first seen in a batch has its credential read by its token command, which waits here until
    the test lets it go: meanwhile another write of the same process goes through (the claim's transaction,
    which holds the process's SQLite writer, has committed), and the batch still polls it once it is ready."""
    extra, started, go = _held_token(tmp_path, "tok-WORKER-123")
    with provider() as server:
        contract = parse_contract(contract_text(server.url, name="tok", extra=extra), source="t.toml")
        store = _store(tmp_path)
        _admit(Engine(store, owner="enqueue"), WatchRequest(contract, "j1", "op-1", by="enqueue"))
        worker = Worker(
            lambda: _store(tmp_path), owner="worker-1", concurrency=2, log=JsonLog(io.StringIO(), worker="w")
        )
        with ThreadPoolExecutor(2) as pool:
            batch = pool.submit(worker.run_once, pool)
            _until(started.exists, "the token command never started")
            store.append("op-1", ev.Paced.prepared({"by": "test"}), store.db_now())  # would wait for the whole command
            assert batch.result(GUARD) == 1  # the batch did not wait for it either: the operation was given back
            assert not go.exists()  # the command is still waiting
            assert not _polled(store, "op-1")
            go.touch()
            _run_until(worker, pool, lambda: _polled(store, "op-1"), "never polled once its credential was in")
        worker.close()
    assert [head.split(b" ", 2)[1] for head in server.requests] == [b"/jobs/j1"]
    stored = store.get("op-1")
    assert stored is not None and stored.record.polls_completed == 1 and stored.lease_owner is None
    store.close()


def test_a_token_command_of_a_new_contract_holds_up_no_request_of_the_batch(tmp_path: Path) -> None:
    """The batch's reserved requests go out while a new contract's token command is still running: their leases
    are counting from the reservation, and a slow credential must not make the flow withhold them."""
    extra, started, go = _held_token(tmp_path, "tok-WORKER-456")
    with provider() as fast_provider, provider() as token_provider:
        fast = parse_contract(contract_text(fast_provider.url, name="fast", timeout="1s"), source="f.toml")
        token = parse_contract(contract_text(token_provider.url, name="tok", extra=extra), source="t.toml")
        store = _store(tmp_path)
        engine = Engine(store, owner="enqueue")
        _admit(engine, WatchRequest(fast, "j0", "op-0", by="enqueue"))
        worker = Worker(
            lambda: _store(tmp_path), owner="worker-1", concurrency=4, log=JsonLog(io.StringIO(), worker="w")
        )
        with ThreadPoolExecutor(4) as pool:
            assert worker.run_once(pool) == 1  # "fast" has its client now
            _admit(engine, WatchRequest(fast, "j1", "op-1", by="enqueue"))
            _admit(engine, WatchRequest(token, "t1", "op-t", by="enqueue"))
            batch = pool.submit(worker.run_once, pool)
            _until(started.exists, "the token command never started")
            _until(lambda: len(fast_provider.requests) == 2, "the batch's request waited for the token command")
            assert not go.exists()  # it went out while the command was still waiting
            go.touch()
            assert batch.result(GUARD) >= 2
        worker.close()
    stored = store.get("op-1")
    assert stored is not None and stored.record.polls_completed == 1 and stored.lease_owner is None
    assert [e.kind for e in store.events("op-1")][-1] != "request_withheld"
    store.close()


def test_an_operation_stepped_alone_that_fails_where_no_store_opens_stays_its_own_failure(tmp_path: Path) -> None:
    """The failure path of an operation stepped on the pool opened this thread's store again to give its lease
    back; where that could not open either (no file descriptor left), the error escaped to the lane, which then
    stopped the whole worker. Now it is that operation's failure, counted and logged; its lease expires."""

    def open_it() -> Store:
        return open_store(tmp_path / "pollwarden.db", keys=load_or_create_keys(tmp_path), trusted_checkpoint_path=None)

    log = io.StringIO()

    class Broken(Worker):
        def _poll_claimed(self, claimed: Any, clock: Callable[[], Any]) -> None:
            raise OSError("Too many open files")

        def _store(self) -> Store:
            raise OSError("Too many open files")

    worker = Broken(open_it, owner="worker-1", concurrency=2, log=JsonLog(log, worker="worker-1"))
    try:
        claimed = SimpleNamespace(lease=SimpleNamespace(operation_id="op-1"))
        worker._poll_one(claimed, lambda: datetime.now(UTC))  # type: ignore[arg-type]
    finally:
        worker.close()
    [line] = [json.loads(text) for text in log.getvalue().splitlines()]
    assert (line["event"], line["operation"], line["error"]) == ("poll_failed", "op-1", "OSError")
    assert worker.metrics.registry.get_sample_value("pollwarden_step_failures_total") == 1


def test_two_new_contracts_read_their_credentials_at_once(tmp_path: Path) -> None:
    """Clients were made under one lock of the process, held while a token command ran: a second new contract's
    first poll waited for the first's whole command (up to its timeout), its claim's lease running. Each token
    command here waits (10 s at most) for the other's to have started, and says whether it saw it."""

    def command(mine: str, other: str) -> str:
        script = tmp_path / f"token-{mine}.py"
        script.write_text(
            "import pathlib, time\n"
            f"pathlib.Path({str(tmp_path / mine)!r}).touch()\n"
            "deadline = time.monotonic() + 10\n"
            f"while not pathlib.Path({str(tmp_path / other)!r}).exists() and time.monotonic() < deadline:\n"
            "    time.sleep(0.005)\n"
            f"if pathlib.Path({str(tmp_path / other)!r}).exists():\n"
            f"    pathlib.Path({str(tmp_path / (mine + '-saw'))!r}).touch()\n"
            f"print('tok-{mine}-WORKER')\n"
        )
        return token_command_auth(script)

    with provider() as server:
        store = _store(tmp_path)
        engine = Engine(store, owner="enqueue")
        for mine, other in (("a", "b"), ("b", "a")):
            text = contract_text(server.url, name=f"tok{mine}", timeout="30s", extra=command(mine, other))
            _admit(engine, WatchRequest(parse_contract(text, source=f"{mine}.toml"), f"j{mine}", f"op-{mine}", by="e"))
        worker = Worker(
            lambda: _store(tmp_path), owner="worker-1", concurrency=4, log=JsonLog(io.StringIO(), worker="w")
        )
        with ThreadPoolExecutor(4) as pool:
            assert worker.run_once(pool) == 2  # both given back: their commands run in the background
            _run_until(worker, pool, lambda: _polled(store, "op-a") and _polled(store, "op-b"), "never polled")
        worker.close()
    assert (tmp_path / "a-saw").exists() and (tmp_path / "b-saw").exists(), "one token command waited for the other"
    for op in ("op-a", "op-b"):
        stored = store.get(op)
        assert stored is not None and stored.record.polls_completed == 1 and stored.lease_owner is None
    store.close()


class _Ahead:
    """The store's clock, moved on by the test: a deadline passes when the test says so, not after a wait that a
    loaded machine could outrun or the test must sit through."""

    def __init__(self) -> None:
        self.by = timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.by


def _store_ahead(home: Path, ahead: _Ahead) -> Store:
    """`_store` whose `db_now` (every time a worker's batch and engine use) is `ahead`'s."""
    store = _store(home)
    store.db_now = ahead.now  # type: ignore[method-assign]
    return store


@pytest.mark.parametrize("paced", [False, True], ids=["batch", "alone"])
def test_a_token_refresh_that_runs_past_the_deadline_is_not_the_providers_timeout(tmp_path: Path, paced: bool) -> None:
    """A poll's time limit was checked before its credential was read, and the request's own time bound ran from
    before it too: an expired token whose command ran longer than the contract's timeout ended the poll as a
    transport failure, "connect timed out", recorded against a provider that was never asked (a shorter refresh
    ate into the request's time). The worker refreshes a token in the background now, and passes its contract
    over while it has none to use, whichever of its drivers steps the operation (the batch's, or one operation's,
    as a paced provider's): the operation is claimed once the slow refresh is in, past its deadline, and that is
    what is recorded, with no request sent.

    The refresh is held until the test lets it go, and the worker's clock (the store's) is moved past the deadline
    while it is held: the refresh ends past the deadline by events, not by a sleep longer than the deadline."""
    runs, go = tmp_path / "runs", tmp_path / "go"
    script = tmp_path / "token.py"
    script.write_text(
        "import pathlib, time\n"
        f"runs, go = pathlib.Path({str(runs)!r}), pathlib.Path({str(go)!r})\n"
        "n = int(runs.read_text()) if runs.exists() else 0\n"
        "runs.write_text(str(n + 1))\n"
        "deadline = time.monotonic() + 120\n"
        "while n and not go.exists() and time.monotonic() < deadline:  # a refresh: held until the test says\n"
        "    time.sleep(0.01)\n"
        "print('tok-REFRESHED-789')\n"
    )
    extra = token_command_auth(script, ttl="100ms")
    # The deadline only has to leave time for the first poll, which waits for the command's first run in the
    # background: beside two busy cores and a loaded suite that came after 6 s (2 s before that).
    ahead = _Ahead()
    with provider() as server:
        text = contract_text(server.url, name="tok", timeout="3s", deadline="15s", base_delay="300ms",
                             max_delay="300ms", extra=extra)  # fmt: skip
        store = _store_ahead(tmp_path, ahead)
        _admit(
            Engine(store, owner="enqueue", clock=store.db_now),
            WatchRequest(parse_contract(text, source="t.toml"), "j1", "op-1", by="e"),
        )
        worker = Worker(
            lambda: _store_ahead(tmp_path, ahead), owner="worker-1", concurrency=2,
            log=JsonLog(io.StringIO(), worker="w"), provider_rates={"tok": 100.0} if paced else None,
        )  # fmt: skip
        with ThreadPoolExecutor(2) as pool:
            # The first poll, once its client is made and the command's quick first run is in.
            _run_until(worker, pool, lambda: _polled(store, "op-1"), "the first poll never went out")
            assert len(server.requests) == 1
            # The token expires (100 ms) and its refresh starts, held: the deadline passes while it runs.
            _run_until(worker, pool, lambda: runs.exists() and runs.read_text() == "2", "the refresh never started")
            ahead.by = timedelta(seconds=20)
            go.touch()
            final = lambda: (found := store.get("op-1")) is not None and found.record.is_final  # noqa: E731
            # The second, once due: its token expired, the refresh is slow, and the contract waits for it.
            _run_until(worker, pool, final, "the operation never ended")
        worker.close()
    assert runs.read_text() == "2"
    assert len(server.requests) == 1
    stored = store.get("op-1")
    assert stored is not None and stored.record.is_final and stored.lease_owner is None, stored
    assert stored.record.reason is StopReason.DEADLINE_EXCEEDED, stored.record
    events = store.events("op-1")
    assert [e.data["kind"] for e in events if e.kind == "observed"] == ["job_state"]  # the first poll's, no other
    store.close()


def test_a_request_a_provider_never_answers_waits_aside_and_the_lane_claims_again(tmp_path: Path) -> None:
    """A lane waited for its batch's slowest request before it claimed again: a provider that accepts and never
    answers held it for the request's whole timeout (two of them halved every contract's polls). Now what is still
    in flight `batch.ASIDE` after it went out waits aside, holding its own slot, and the lane goes on polling."""
    hold = threading.Event()
    with provider(hold) as silent_provider, provider() as fast_provider:
        silent = parse_contract(contract_text(silent_provider.url, name="silent", timeout="120s"), source="s.toml")
        fast = parse_contract(
            contract_text(fast_provider.url, name="fast", base_delay="50ms", max_delay="50ms"), source="f.toml"
        )
        store = _store(tmp_path)
        engine = Engine(store, owner="enqueue")
        _admit(engine, WatchRequest(silent, "j-silent", "op-silent", by="enqueue"))
        _admit(engine, WatchRequest(fast, "j-fast", "op-fast", by="enqueue"))
        worker = Worker(
            lambda: _store(tmp_path), owner="worker-1", concurrency=4, log=JsonLog(io.StringIO(), worker="worker-1")
        )
        with ThreadPoolExecutor(4) as pool:
            assert pool.submit(worker.run_once, pool).result(GUARD) == 2  # it did not wait for the silent answer
            _run_until(worker, pool, lambda: len(fast_provider.requests) >= 3, "the lane stopped polling")
            assert len(silent_provider.requests) == 1 and not hold.is_set()
            waiting = store.get("op-silent")
            assert waiting is not None and waiting.record.polls_completed == 0 and waiting.lease_owner == "worker-1"
            hold.set()
        worker.close()  # waits for what went aside: the silent provider's answer, now given
    stored = store.get("op-silent")
    assert stored is not None and stored.record.polls_completed == 1 and stored.lease_owner is None
    store.close()
