"""The outbox's delivery loop (`pollwarden.home.outbox`) against real receivers on loopback and real stores:
retries
with backoff then a recorded give-up (SQLite and PostgreSQL), each attempt bounded, and the witness written by
the loop, never by the commit, with a witness that cannot be written made visible."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from pollwarden import events as ev
from pollwarden.audit import load_or_create_keys, read_kept_file
from pollwarden.core.contract.parse import parse_contract
from pollwarden.core.escalation import build_request
from pollwarden.home import outbox
from pollwarden.home.operating import witness_notes
from pollwarden.home.outbox import Courier, Delivered, Say
from pollwarden.store.base import Store
from pollwarden.store.open import open_store
from pollwarden.store.owner import process_owner
from pollwarden.store.witness import Witness
from tests.conftest import install
from tests.loopback import Answer, Seen, held_hook, serving
from tests.store import conftest as store_suite
from tests.store.test_store import CONTRACT, T0, TTL, _record, _stopped

# The store suite's fixtures: each test that takes `store` runs on SQLite and on PostgreSQL.
pg_url, store, backend = store_suite.pg_url, store_suite.store, store_suite.backend
Backend = store_suite.Backend

SECRET = "hook-secret-" + "7" * 20
TOKEN = "tok-in-the-url-" + "9" * 16


def _hooked(url: str) -> str:
    return CONTRACT + f'\n[escalation]\nwebhook_url = "{url}"\nwebhook_secret_env = "PW_HOOK_SECRET"\n'


def _stop(store: Store, contract: str, op: str = "op") -> str:
    install(store, parse_contract(contract))  # the outbox posts only to the webhook of an installed contract
    store.create(_record(op), contract, ev.Created.prepared({}))
    claimed = store.claim(op, "hostA:1:a", T0, TTL)
    assert claimed is not None
    request = build_request(_stopped(claimed[1]), parse_contract(contract), T0, decision_id=f"d-{op}")
    assert store.write(claimed[0], _stopped(claimed[1]), [], T0, release=True, decision=request)
    return request.decision_id


class Clock:
    """The courier's clock, moved by the test: backoff is waited out by moving it, never by sleeping."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


def _courier(store: Store, clock: Callable[[], datetime], say: Say | None = None) -> Courier:
    env = {"PW_HOOK_SECRET": SECRET}
    return Courier(store, owner=process_owner("outbox"), environ=env, clock=clock, say=say)


def _one(results: list[Delivered]) -> Delivered:
    (result,) = results
    assert result.attempted is not None, result.problem
    return result


def test_a_webhook_that_keeps_failing_is_retried_with_backoff_then_given_up_and_audited(store: Store) -> None:
    with serving({("POST", f"/hook?token={TOKEN}"): Answer(500)}) as hook:
        decision = _stop(store, _hooked(f"{hook.url}/hook?token={TOKEN}"))
        clock = Clock(store.db_now())
        courier = _courier(store, clock)
        pauses = []
        for attempt in range(1, 5):
            made = _one(courier.deliver_due()).attempted
            assert made is not None and made.attempts == attempt and made.status == 500 and not made.delivered
            if made.retry_at is None:
                break
            pauses.append((made.retry_at - clock.now).total_seconds())
            assert courier.deliver_due() == []  # not due before its backoff
            clock.now = made.retry_at
        assert courier.deliver_due(every=True) == []  # given up: no more attempts, even when asked
    # 0.5 s x 2^(n-1), each drawn between half and all of it
    assert [lo <= p <= hi for p, (lo, hi) in zip(pauses, ((0.25, 0.5), (0.5, 1), (1, 2)), strict=True)] == [True] * 3
    assert len(hook.seen) == 4
    for seen in hook.seen:
        assert seen.headers["idempotency-key"] == decision
        stamp = seen.headers["x-pollwarden-timestamp"]
        mac = hmac.new(SECRET.encode(), stamp.encode() + b"." + seen.body, hashlib.sha256).hexdigest()
        assert seen.headers["x-pollwarden-signature"] == "sha256=" + mac
    (failed,) = store.outbox()
    assert (failed.status, failed.attempts, failed.last_status) == ("failed", 4, 500)
    told = [e for e in store.events("op") if e.kind.startswith("notif")]
    assert [(e.kind, e.data["attempts"], e.data["status"]) for e in told] == [("notify_failed", 4, 500)]
    everything = json.dumps([e.to_json() for e in store.outbox()]) + json.dumps([dict(e.data) for e in told])
    assert SECRET not in everything and TOKEN not in everything


@pytest.mark.parametrize(
    ("answer", "env", "sent", "error"),
    [
        (Answer(404), {"PW_HOOK_SECRET": SECRET}, 1, "the webhook answered 404; not retried"),
        (Answer(204), {}, 0, "webhook secret variable PW_HOOK_SECRET is not set; nothing was sent"),
    ],
)
def test_a_refusal_is_not_retried_and_a_missing_secret_sends_nothing(
    store: Store, answer: Answer, env: dict[str, str], sent: int, error: str
) -> None:
    with serving({("POST", "/hook"): answer}) as hook:
        _stop(store, _hooked(f"{hook.url}/hook"))
        courier = Courier(store, owner=process_owner("outbox"), environ=env)
        made = _one(courier.deliver_due()).attempted
    assert made is not None and made.error == error and len(hook.seen) == sent
    assert (made.retry_at is None) == (sent == 1)  # a refusal is final; a missing secret may be set by then


def test_a_request_nobody_could_deliver_for_a_day_is_given_up_unsent(store: Store) -> None:
    with serving({("POST", "/hook"): Answer(204)}) as hook:
        _stop(store, _hooked(f"{hook.url}/hook"))
        clock = Clock(store.db_now() + outbox.WEBHOOK_MAX_AGE + timedelta(minutes=1))
        made = _one(_courier(store, clock).deliver_due()).attempted
    assert hook.seen == [] and made is not None and made.retry_at is None and not made.delivered
    assert [e.kind for e in store.events("op")][-1] == "notify_failed"


def test_a_pass_claims_each_delivery_when_its_turn_comes_and_attempts_each_once(store: Store) -> None:
    """`outbox --deliver` over a long outbox: claimed `parallel` at a time, so no claim waits behind a queue of
    attempts (a lease outlives one attempt, not many), and one that fails is not tried again in the same pass."""
    leased_at_each_post: list[int] = []

    def receiver(seen: Seen) -> Answer:
        leased_at_each_post.append(sum(e.lease_owner is not None for e in store.outbox()))
        return Answer(500 if json.loads(seen.body)["decision"]["operation"] == "op-2" else 204)

    with serving({("POST", "/hook"): receiver}) as hook:
        for n in range(6):
            _stop(store, _hooked(f"{hook.url}/hook"), op=f"op-{n}")
        courier = Courier(store, owner=process_owner("outbox"), environ={"PW_HOOK_SECRET": SECRET}, parallel=2)
        done = courier.deliver_due(every=True)
    assert sorted(d.entry.operation_id or "" for d in done) == [f"op-{n}" for n in range(6)]
    assert len(hook.seen) == 6 and max(leased_at_each_post) <= 2
    ((waiting),) = store.outbox()
    assert (waiting.operation_id, waiting.attempts, waiting.status) == ("op-2", 1, "pending")


def _corrupt(backend: Backend, statement: str) -> None:
    """A row changed behind the store's back (a bad disk, a hand at the database)."""
    if backend.kind == "sqlite":
        with contextlib.closing(sqlite3.connect(backend.target)) as conn, conn:
            conn.execute(statement)
        return
    with psycopg.connect(str(backend.target), autocommit=True) as pg:
        pg.execute(statement.encode())


def test_a_decision_that_cannot_be_read_is_given_up_not_tried_for_ever(store: Store, backend: Backend) -> None:
    with serving({("POST", "/hook"): Answer(204)}) as hook:
        _stop(store, _hooked(f"{hook.url}/hook"))
        _corrupt(backend, "UPDATE decisions SET request = 'not json'")
        made = _one(_courier(store, Clock(store.db_now())).deliver_due()).attempted
    assert hook.seen == [] and made is not None and made.retry_at is None and not made.delivered
    assert made.error == "decision d-op or its operation cannot be read: JSONDecodeError"
    assert [e.kind for e in store.events("op")][-1] == "notify_failed"


def test_each_attempt_is_bounded_however_long_the_receiver_hangs(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The receiver holds the POST until the test lets it go; the attempt has ended long before (its timeout is
    made short here: the bound, not its length, is the point)."""
    monkeypatch.setattr(outbox, "WEBHOOK_TIMEOUT", 0.3)
    with held_hook() as (hook, url):
        _stop(store, _hooked(url))
        made = _one(_courier(store, Clock(store.db_now())).deliver_due()).attempted
        assert not hook.released.is_set() and len(hook.posts) == 1
    assert made is not None and made.retry_at is not None and made.error is not None
    assert made.error.startswith("timeout"), made.error


def _witnessed(tmp_path: Path, location: str) -> Store:
    return open_store(
        tmp_path / "w.db",
        keys=load_or_create_keys(tmp_path / "keys"),
        trusted_checkpoint_path=tmp_path / "audit-head.checkpoint",
        witness=Witness.parse(location, "test"),
    )


def test_the_commit_keeps_the_homes_head_and_the_loop_writes_the_witness(tmp_path: Path) -> None:
    """A witness directory (a mount of another machine) can hang; before the outbox the committing thread wrote it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store = _witnessed(tmp_path, str(elsewhere))
    try:
        store.append("op", ev.WatchInterrupted.prepared({"by": "test"}), T0)
        newest = store.audit_heads()[-1]
        assert read_kept_file(tmp_path / "audit-head.checkpoint").head == newest  # type: ignore[union-attr]
        assert list(elsewhere.iterdir()) == []  # nothing written for the witness on the committing path
        made = _one(Courier(store, owner=process_owner("outbox")).deliver_due()).attempted
        assert made is not None and made.delivered
        (kept,) = elsewhere.iterdir()
        assert read_kept_file(kept).head == newest  # type: ignore[union-attr]
        assert store.outbox() == []
    finally:
        store.close()


def test_a_witness_that_cannot_be_written_is_said_counted_and_noted_until_it_takes_the_head(tmp_path: Path) -> None:
    answers = [Answer(503), Answer(204)]

    def witness(seen: Seen) -> Answer:
        return answers.pop(0)

    said: list[tuple[str, dict[str, object]]] = []
    with serving({("POST", "/heads"): witness}) as server:
        store = _witnessed(tmp_path, f"{server.url}/heads")
        try:
            store.append("op", ev.WatchInterrupted.prepared({"by": "test"}), T0)
            head = store.audit_heads()[-1].counter
            clock = Clock(store.db_now())
            courier = _courier(store, clock, say=lambda event, **fields: said.append((event, fields)))
            made = _one(courier.deliver_due()).attempted
            assert made is not None and not made.delivered and made.retry_at is not None
            assert [event for event, _ in said] == ["witness_failing"]
            assert [(c.kind, c.state, c.count) for c in store.outbox_counts()] == [("witness", "retrying", 1)]
            (note,) = witness_notes(store, store.witness)
            assert f"the witness has not taken head #{head}: 1 attempt(s) failed" in note
            assert "the witness answered 503" in note
            clock.now = made.retry_at
            made = _one(courier.deliver_due()).attempted
            assert made is not None and made.delivered
            assert [event for event, _ in said] == ["witness_failing", "witness_recovered"]
            assert witness_notes(store, store.witness) == () and store.outbox() == []
        finally:
            store.close()
    assert [json.loads(seen.body)["head"]["counter"] for seen in server.seen] == [head, head]


class _HeldLook:
    """A store whose next `next_delivery` (the loop's look) is held until the test lets it go."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.entered, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    def next_delivery(self, key: str | None) -> datetime | None:
        self.entered.set()
        assert self.release.wait(60), "the test never let the look go"
        return self._store.next_delivery(key)


def test_stop_returns_once_the_loops_look_has_ended_not_while_it_reads(store: Store) -> None:
    """The caller closes the store when `stop` returns: a look still reading then kept its SQLite connection open
    past the close, and a process that ended so left its -wal behind (seen under load: 5 `watch` runs in 40)."""
    held = _HeldLook(store)
    courier = Courier(held, owner=process_owner("outbox")).start()  # type: ignore[arg-type]
    assert held.entered.wait(60)
    stopping = threading.Thread(target=courier.stop, kwargs={"wait": 0})
    stopping.start()
    stopping.join(0.5)
    looking = stopping.is_alive()
    held.release.set()
    stopping.join(60)
    assert looking, "stop returned while the loop's look was still reading the store"
    assert courier._thread is not None and not courier._thread.is_alive()


def test_stop_waits_for_a_look_a_little_not_for_a_look_that_waits_on_a_lock(store: Store) -> None:
    """A look held by a lock another process keeps (an operator's `sqlite3` shell mid-write, a table lock on
    PostgreSQL) ends only with the store's busy timeout, 30 s: `stop` waits `LOOK_WAIT` for it, not that long, and
    leaves it to its daemon thread as it did before (the -wal stays behind then; SQLite reads it at the next open)."""
    held = _HeldLook(store)
    courier = Courier(held, owner=process_owner("outbox")).start()  # type: ignore[arg-type]
    assert held.entered.wait(60)
    started = time.monotonic()
    try:
        courier.stop(wait=0)
        took = time.monotonic() - started
    finally:
        held.release.set()
    assert outbox.LOOK_WAIT <= 2
    assert outbox.LOOK_WAIT <= took < outbox.LOOK_WAIT + 10, took  # the upper bound stops a hang only
