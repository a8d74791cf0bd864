"""One tree for every error a person acts on, and one map from any exception to the process exit code.

A leaf: it imports nothing from the project, so the sans-I/O core can derive its errors from it and still
load only the standard library. Each subclass stays in the module that raises it and says, in its
`exit_code`, which row of the exit code table in docs/watching.md it belongs to.
"""

from __future__ import annotations

from typing import ClassVar

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_JOB_ENDED = 3
EXIT_ESCALATED = 4
EXIT_TAMPERED = 5
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM


class PollwardenError(Exception):
    """Something a person can act on: the message says what was wrong and what to do; never a secret.

    The default is bad input or a refusal: nothing was sent and nothing changed.
    """

    exit_code: ClassVar[int] = EXIT_USAGE


class Interruption(BaseException):
    """Something outside the code asked a running watch to stop (a signal): a BaseException, so no `except
    Exception` on the way swallows it. `why` names it in the `interrupted` event the engine records."""

    @property
    def why(self) -> str:
        return str(self) or type(self).__name__


def exit_code_for(exc: BaseException) -> int:
    """The exit code of a command that ended with `exc`: the error's own row, else an interrupt, else a bug."""
    if isinstance(exc, PollwardenError):
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_INTERNAL
