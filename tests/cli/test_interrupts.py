"""`cli.interrupts.interruptible`: the command's signal handlers, and what it leaves behind."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest

from pollwarden.cli.interrupts import interruptible
from pollwarden.foreground import stop_signals


@pytest.fixture
def restored() -> Iterator[None]:
    """The test process's own handlers, whatever the test leaves."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_a_stop_that_ignores_the_rest_of_a_burst_is_kept_after_the_command(restored: None) -> None:
    """A worker that stopped as asked ignores the rest of a burst of SIGINT/SIGTERM; the command's own handlers
    must not be put back over that, or the interpreter's exit resets SIGINT to the default and a late one
    kills the process that stopped cleanly."""
    done = threading.Event()
    with interruptible(process=True), stop_signals(done, then_ignore=True):
        done.set()
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN


def test_code_that_calls_main_gets_its_own_handlers_back_whatever_the_command_did(restored: None) -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    done = threading.Event()
    with interruptible(), stop_signals(done, then_ignore=True):
        done.set()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_the_previous_handlers_come_back_when_the_block_left_ours(restored: None) -> None:
    before = signal.getsignal(signal.SIGINT)
    with interruptible(process=True), stop_signals(threading.Event(), then_ignore=True):  # not stopped
        pass
    assert signal.getsignal(signal.SIGINT) is before
