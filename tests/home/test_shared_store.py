"""The Python API's watches of one home share one store while any of them runs (`pollwarden.home.shared_store`)."""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import pollwarden.home.shared_store as shared
from pollwarden import Progress, Succeeded, Watch, watch_sync
from pollwarden import events as ev
from pollwarden.audit.keys import AUDIT_KEY_ENV
from pollwarden.home.operating import HomeError, open_store, verify_home
from pollwarden.home.shared_store import home_store
from pollwarden.simulator import Simulator
from pollwarden.store.base import Store, StoreError
from tests.conftest import write_contract
from tests.store.test_store import CONTRACT, _record


def _counting_opens(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    opened: list[Path] = []

    def counted(home: Path) -> Store:
        opened.append(home)
        return open_store(home)

    monkeypatch.setattr("pollwarden.home.shared_store.open_store", counted)
    return opened


def _in_step(count: int) -> Callable[[Progress], None]:
    """An on_progress that holds every watch at its first step until all `count` are there: they overlap."""
    barrier = threading.Barrier(count)
    held: set[str] = set()

    def told(progress: Progress) -> None:
        if progress.operation_id not in held:
            held.add(progress.operation_id)
            barrier.wait(60)

    return told


def test_watches_running_at_once_share_one_store_and_the_audit_verifies(
    sim: Simulator, tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="50ms", max_delay="50ms")
    opened = _counting_opens(monkeypatch)
    outcomes: dict[int, object] = {}
    told = _in_step(20)

    def one(n: int) -> None:
        outcomes[n] = watch_sync(contract, f"happy-{n}", home=home, on_progress=told)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert all(isinstance(outcomes.get(n), Succeeded) for n in range(20)), outcomes
    assert opened == [home]  # twenty watches, all at once: one store
    assert shared._SHARED == {}  # the last one closed it
    check = verify_home(home)
    assert check.report.ok, check.report


def test_a_watch_after_the_others_ended_opens_the_home_again(home: Path) -> None:
    with home_store(home) as first, home_store(home) as again:
        assert again is first
    with pytest.raises(StoreError, match="closed"):
        first.get("anything")
    with home_store(home) as later:
        assert later is not first and later.get("anything") is None


def test_two_homes_never_share(tmp_path: Path) -> None:
    with home_store(tmp_path / "a") as a, home_store(tmp_path / "b") as b:
        assert a is not b and a.path != b.path
        a.create(_record("only-in-a"), CONTRACT, ev.Created.prepared({}))
        assert b.get("only-in-a") is None


def test_changed_keys_give_the_next_watch_a_store_of_its_own(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with home_store(home) as first:
        with home_store(home) as same:
            assert same is first
        monkeypatch.setenv(AUDIT_KEY_ENV, base64.b64encode(os.urandom(32)).decode())
        with home_store(home) as by_env:
            assert by_env is not first and by_env.keys != first.keys
        monkeypatch.delenv(AUDIT_KEY_ENV)
        key_file = home / "keys" / "audit.key"
        replaced = key_file.with_name("new.key")
        replaced.write_bytes(base64.b64encode(os.urandom(32)) + b"\n")
        replaced.chmod(0o600)
        replaced.replace(key_file)  # a person restored another key file
        with home_store(home) as by_file:
            assert by_file is not first and by_file.keys != first.keys
        first.create(
            _record("still-open"), CONTRACT, ev.Created.prepared({})
        )  # the running watch keeps its store to the end


def test_a_failing_watch_does_not_poison_the_shared_store(sim: Simulator, tmp_path: Path, home: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="50ms", max_delay="50ms")
    told = _in_step(2)

    def explode(progress: Progress) -> None:
        told(progress)
        raise RuntimeError("the caller's callback failed")

    failed: list[BaseException] = []

    def failing() -> None:
        try:
            watch_sync(contract, "happy-bad", home=home, operation_id="api-bad", on_progress=explode)
        except RuntimeError as exc:
            failed.append(exc)

    thread = threading.Thread(target=failing)
    thread.start()
    good = watch_sync(contract, "happy-good", home=home, on_progress=told)
    thread.join(60)
    assert isinstance(good, Succeeded) and len(failed) == 1
    resumed = Watch(contract, home=home, operation_id="api-bad").run()  # the interrupted one goes on
    assert isinstance(resumed, Succeeded)
    assert verify_home(home).report.ok


def test_a_store_that_fails_to_open_is_not_kept(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.write_text("not a directory")
    with pytest.raises(HomeError), home_store(home):
        pass
    assert shared._SHARED == {}
    home.unlink()
    with home_store(home) as store:
        assert store.get("x") is None


def test_a_forked_child_opens_a_store_of_its_own(home: Path) -> None:
    with home_store(home) as parents:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports by its exit code
            code = 1
            try:
                with home_store(home) as childs:
                    childs.create(_record("from-the-child"), CONTRACT, ev.Created.prepared({}))
                    code = 0 if childs is not parents else 3
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert parents.get("from-the-child") is not None


EXIT_SCRIPT = """
import sys, threading
import pollwarden

started = threading.Event()
def watch():
    pollwarden.watch_sync(sys.argv[1], "never-exit", home=sys.argv[2], on_progress=lambda p: started.set())
threading.Thread(target=watch, daemon=True).start()
started.wait(60)
# The interpreter exits while the watch sleeps between polls, its store still open.
"""


def test_a_store_open_at_interpreter_exit_leaves_its_newest_head_in_the_home(sim: Simulator, tmp_path: Path) -> None:
    import subprocess
    import sys

    from pollwarden.audit import HeadFile, read_kept_file
    from pollwarden.home.directory import trusted_checkpoint_path

    home = tmp_path / "home"
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="30s", max_delay="30s", deadline="10m")
    ran = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, str(contract), str(home)], timeout=120, text=True,
                         capture_output=True)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    kept = read_kept_file(trusted_checkpoint_path(home))
    with home_store(home) as store:
        newest = store.audit_heads()[-1]
    # Its first commit wrote the file; the claim, reservation and record after it, within a second, did not yet.
    assert isinstance(kept, HeadFile) and kept.head.counter == newest.counter
