"""Signals and a closed stdout, as a person at a shell expects them to end a command.

SIGINT, SIGTERM and SIGHUP become one exception, `Interrupted`, raised in the main thread wherever it is.
It derives from BaseException so no `except Exception` on the way can swallow it, and every `finally` on the
way runs: a step that holds a lease releases it there, so a resume starts at once instead of waiting out the
lease, and `Engine.run` records the operation's `interrupted` event, as for a cancelled Python API watch.
`main` turns it into one message and the shell's exit code for the signal (128 + number).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from ..errors import Interruption

EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
"""141, what a shell reports for a program killed by SIGPIPE: `set -o pipefail` sees the output was cut short."""

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(Interruption):
    """A signal asked this command to stop; `exit_code` is the shell's convention for it. Its `why` is the
    signal's name ("SIGINT"), which the engine records in the operation's `interrupted` event."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextmanager
def interruptible(*, process: bool = False) -> Iterator[None]:
    """Install the handlers for the block (main thread only), then put the previous ones back.

    SIGINT is installed even when inherited as ignored: a shell starts `cmd &` with SIGINT ignored, and Python
    then installs no KeyboardInterrupt handler, so `kill -INT` would do nothing. SIGHUP inherited as ignored is
    left ignored: that is what `nohup` asks for.

    `process`: the block is the process's command (`main` run as the program, not called by other code): a
    handler the block put in place of ours and left there is then kept to the end. A worker that stopped as
    asked ignores the rest of a burst of stop signals (`foreground.stop_signals(then_ignore=True)`), and
    putting Python's KeyboardInterrupt handler back over that let the interpreter's exit reset it to the
    default, so a late SIGINT of the burst killed a process that had stopped cleanly (exit -2, not 0). Code
    that calls `main` gets its own handlers back, whatever the command did.
    """
    previous: dict[signal.Signals, Callable[[int, FrameType | None], Any] | int | None] = {}
    for signum in _SIGNALS:
        if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
            continue
        previous[signum] = signal.signal(signum, _raise)
    try:
        yield
    finally:
        for number, handler in previous.items():
            if not process or signal.getsignal(number) is _raise:
                signal.signal(number, handler if handler is not None else signal.SIG_DFL)
