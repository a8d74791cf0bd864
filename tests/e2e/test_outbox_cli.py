"""Decision webhooks delivered from the outbox, off the polling path, with real processes: a receiver on loopback
that hangs until the test releases it, a `watch` and a worker that do not wait for it, a kill -9 between the
commit and the delivery, and `pollwarden outbox` delivering what a process left behind. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pollwarden.simulator import Simulator
from tests.conftest import run_cli, write_contract
from tests.e2e.conftest import store_of
from tests.e2e.test_worker import _enqueue
from tests.loopback import held_hook

pytestmark = pytest.mark.slow

ENV = {"PW_HOOK_SECRET": "hook-secret-outbox-1"}


def _hook_contract(path: Path, sim: Simulator, hook_url: str, **options: object) -> Path:
    extra = f'\n[escalation]\nwebhook_url = "{hook_url}"\nwebhook_secret_env = "PW_HOOK_SECRET"\n'
    return write_contract(path, sim.url, extra=extra, **options)


def _events(db: str, home: Path, operation: str) -> list[tuple[str, dict[str, object]]]:
    store = store_of(db, home)
    try:
        return [(e.kind, dict(e.data)) for e in store.events(operation)]
    finally:
        store.close()


def _sent(story: str, decision_id: str) -> bool:
    return re.search(rf"webhook for {decision_id} sent after \d attempts?", story) is not None


def test_a_watch_that_stops_for_a_decision_exits_without_waiting_for_a_hanging_webhook(
    db: str, sim: Simulator, home: Path, tmp_path: Path
) -> None:
    """The finding: the watch's exit waited 24 s for a webhook that hung (four attempts of 5 s)."""
    with held_hook() as (hook, url):
        contract = _hook_contract(tmp_path / "c.toml", sim, url)
        ran = run_cli("watch", "--db", db, "--contract", str(contract), "--job", "unknown_state-1", "--operation",
                      "op", "--json", home=home, env=ENV)  # fmt: skip
        assert ran.code == 4, ran.stderr
        # The watch has gone while the receiver still holds what it was sent: no attempt after the first was waited
        # for (before the outbox it made all four, one after another, and only then exited).
        assert not hook.released.is_set() and len(hook.posts) <= 1, [p.headers for p in hook.posts]
        decision_id = json.loads(ran.stdout.strip().splitlines()[-1])["decision"]["decision_id"]
        listed = run_cli("outbox", "--db", db, home=home)
        assert listed.code == 0, listed.stderr
        assert decision_id in listed.stdout and "webhook" in listed.stdout, listed.stdout
        hook.release()
        delivered = run_cli("outbox", "--deliver", "--db", db, home=home, env=ENV)
        assert delivered.code == 0, delivered.stdout + delivered.stderr
    assert {p.headers["idempotency-key"] for p in hook.posts} == {decision_id}
    assert _sent(run_cli("story", "op", "--db", db, home=home).stdout, decision_id)
    after = run_cli("outbox", "--db", db, "--json", home=home)
    assert json.loads(after.stdout) == [], after.stdout


def test_a_delivery_cut_by_kill_9_after_its_commit_is_made_by_the_next_process(
    db: str, sim: Simulator, home: Path, tmp_path: Path
) -> None:
    with held_hook() as (hook, url):
        contract = _hook_contract(tmp_path / "c.toml", sim, url)
        watch = subprocess.Popen(
            [sys.executable, "-m", "pollwarden", "watch", "--db", db, "--contract", str(contract), "--job",
             "unknown_state-1", "--operation", "op"],
            env={**os.environ, "POLLWARDEN_HOME": str(home), **ENV},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            hook.wait_for(1)  # the stop and its decision request are committed, the delivery is on its way
        finally:
            watch.kill()
            watch.wait(60)
        hook.release()
        decisions = [data for kind, data in _events(db, home, "op") if kind == "decision_requested"]
        assert len(decisions) == 1 and not [k for k, _ in _events(db, home, "op") if k.startswith("notif")]
        delivered = run_cli("outbox", "--deliver", "--db", db, home=home, env=ENV)
        assert delivered.code == 0, delivered.stdout + delivered.stderr
    decision_id = decisions[0]["decision_id"]
    assert [p.headers["idempotency-key"] for p in hook.posts] == [decision_id, decision_id]
    notified = [data for kind, data in _events(db, home, "op") if kind == "notified"]
    assert [(n["decision_id"], n["ok"]) for n in notified] == [(decision_id, True)]


def _spawn_worker(db: str, home: Path) -> subprocess.Popen[bytes]:
    """One lane (concurrency 1): before the outbox, a webhook that hung held that lane's batch, so nothing else
    was polled until its four attempts had ended."""
    return subprocess.Popen(
        [sys.executable, "-m", "pollwarden", "worker", "--processes", "1", "--db", db, "--concurrency", "1"],
        env={**os.environ, "POLLWARDEN_HOME": str(home), **ENV},
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_hanging_decision_webhook_never_stops_the_worker_polling_the_others(
    db: str, sim: Simulator, home: Path, tmp_path: Path
) -> None:
    with held_hook() as (hook, url):
        contract = _hook_contract(
            tmp_path / "c.toml", sim, url, base_delay="50ms", max_delay="100ms", max_requests=1000, deadline="10m"
        )
        _enqueue(db, home, contract, ["unknown_state-1", "never-1", "never-2"])
        worker = _spawn_worker(db, home)
        try:
            hook.wait_for(1)

            def others() -> int:
                return sim.request_count("never-1") + sim.request_count("never-2")

            start = others()
            guard = time.monotonic() + 60
            while others() < start + 6:  # counted in polls, not in seconds
                # Before the outbox the lane polled again only once all four attempts had hung to their end.
                assert len(hook.posts) < 4, "the worker polled nothing else while the webhook's attempts hung"
                assert worker.poll() is None, f"the worker exited with {worker.returncode}"
                assert time.monotonic() < guard, "the worker stopped polling"
                time.sleep(0.01)
            assert not hook.released.is_set()
            hook.release()
            guard = time.monotonic() + 60
            while not [k for k, _ in _events(db, home, "op-unknown_state-1") if k == "notified"]:
                assert time.monotonic() < guard, "the released webhook was never recorded as delivered"
                time.sleep(0.05)
        finally:
            worker.terminate()
            worker.wait(60)
