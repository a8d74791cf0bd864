"""The store's bell (`store.bell`), both backends: a ring wakes every listener, in this process or another, a
listener's own poke ends only its wait, a quiet bell lets a wait run out, and a FIFO whose listener died is
swept by the next ring."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pollwarden.store.bell import FifoBell, pause

from .conftest import AnyStore

LISTEN = """
import sys
from pathlib import Path
from pollwarden.store.bell import FifoBell
listener = FifoBell(Path(sys.argv[1])).listen()
print("listening", flush=True)
print("rung" if listener.wait(60) else "quiet", flush=True)
listener.close()
"""


def test_a_ring_wakes_every_listener_and_a_quiet_bell_does_not(store: AnyStore) -> None:
    bell = store.bell()
    first, second = bell.listen(), bell.listen()
    try:
        assert not first.wait(0.05)
        bell.ring()
        assert first.wait(10) and second.wait(10)
        assert not first.wait(0.05)  # one ring, one wake-up: it was read
    finally:
        first.close()
        second.close()


def test_a_poke_ends_only_its_own_listeners_wait(store: AnyStore) -> None:
    bell = store.bell()
    mine, other = bell.listen(), bell.listen()
    try:
        mine.poke()
        assert mine.wait(10)
        assert not other.wait(0.05)
        stop = threading.Event()
        stop.set()
        assert pause(other, 60, stop)  # a stop already set ends a pause at once
    finally:
        mine.close()
        other.close()


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_a_listener_in_another_process_is_woken(tmp_path: Path) -> None:
    directory = tmp_path / "pollwarden.db.bells"
    proc = subprocess.Popen(
        [sys.executable, "-c", LISTEN, str(directory)], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "listening"
    FifoBell(directory).ring()
    out, _ = proc.communicate(timeout=60)
    assert out.strip() == "rung"
    assert list(directory.iterdir()) == []  # it closed its FIFO on the way out


def test_a_fifo_left_by_a_dead_listener_is_swept_by_the_next_ring(tmp_path: Path) -> None:
    directory = tmp_path / "bells"
    directory.mkdir(mode=0o700)
    os.mkfifo(directory / "4242-dead.fifo", 0o600)  # no reader: its listener was killed
    bell = FifoBell(directory)
    live = bell.listen()
    try:
        bell.ring()
        assert live.wait(10)
        assert [p.name for p in directory.iterdir()] != [] and not (directory / "4242-dead.fifo").exists()
    finally:
        live.close()


def test_a_close_from_another_thread_ends_a_wait_without_closing_its_descriptors_under_it(store: AnyStore) -> None:
    """A worker's bell thread waits while its worker closes the listener on the way out: the wait ends, quietly,
    and the descriptors close once it has left (a close under the wait read a closed descriptor: EBADF)."""
    listener = store.bell().listen()
    inside, ended = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    answers: list[bool] = []

    def wait() -> None:
        try:
            inside.set()
            answers.append(listener.wait(60))
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)
        finally:
            ended.set()

    threading.Thread(target=wait, daemon=True).start()
    assert inside.wait(10)
    listener.close()
    assert ended.wait(30), "the close did not end the wait"
    assert errors == [] and answers == [False]
    assert not listener.wait(0)  # closed: no wait any more
    listener.poke()  # and no write to a descriptor that may belong to someone else now
