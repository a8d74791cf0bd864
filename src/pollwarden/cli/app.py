"""The `pollwarden` command: parse (`parser`), call the library, render. No decision is made here.

Exit codes: 0 succeeded, 1 internal error, 2 bad input (nothing changed), 3 the job ended at the
provider without success, 4 stopped and escalated for a decision, 5 the audit log is tampered with;
129, 130, 143 stopped by SIGHUP, SIGINT, SIGTERM (the record is kept); 141 stdout was closed (`| head`).
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress

from ..errors import PollwardenError
from ..isolation.commands import BROKERED
from ..shown import shown
from .common import EXIT_USAGE, resume_hint
from .interrupts import EXIT_BROKEN_PIPE, Interrupted, interruptible
from .parser import build_parser

__all__ = ["build_parser", "main"]


def _standard_streams() -> None:
    """Standard input, output and error open, on /dev/null where the caller closed one (`2>&-`, a service
    manager): otherwise the next file opened (a key, the database, a lock) would take that descriptor, and
    whatever writes to "stderr" (a log line, a library's warning) would write into it; and a closed stderr made
    the worker's first log line end it with exit 1 and nothing said."""
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, mode)
            if null != fd:  # the lowest free descriptor: it is `fd` itself unless a lower one is closed too
                os.dup2(null, fd)
                os.close(null)
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 (the process's own stream)
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115


def main(argv: Sequence[str] | None = None) -> int:
    _standard_streams()
    words = list(sys.argv[1:] if argv is None else argv)
    for number, word in enumerate(words, 1):
        # Bytes that are not UTF-8 arrive as lone surrogates: no id, path or note may be one, and a store would
        # refuse to encode it; one message here instead of a traceback wherever the word first reaches a store.
        if any("\ud800" <= ch <= "\udfff" for ch in word):
            _say(f"pollwarden: error: argument {number} ({shown(word)}) is not valid UTF-8 text; nothing was done")
            return EXIT_USAGE
    parser = build_parser()
    args = parser.parse_args(words)
    if getattr(args, "connect", None) and args.command in BROKERED:
        from ..isolation.remote import run_remote  # a person's command, carried out by the broker

        return run(args, lambda _: run_remote(args.connect, words, home=args.home, db=args.db), process=argv is None)
    if getattr(args, "db", None):
        os.environ["POLLWARDEN_DB"] = args.db  # one rule for every store this process opens (operating.py)
    return run(args, args.func, process=argv is None)


def run(args: argparse.Namespace, func: Callable[[argparse.Namespace], int], *, process: bool) -> int:
    """A parsed command, with every error a person acts on turned into its message and exit code."""
    try:
        with interruptible(process=process):  # the program's own arguments: so its whole life
            return func(args)
    except PollwardenError as exc:  # every error a person acts on, with its own exit code (errors.py)
        _say(f"pollwarden: error: {shown(exc)}")
        return exc.exit_code
    except Interrupted as exc:
        _say(_interrupted(args, exc))
        return exc.exit_code
    except BrokenPipeError:
        # The reader went away (`| head`): nothing more can be said on stdout, and Python's own flush at exit
        # would raise again and print a traceback, so stdout now points at /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    except OSError as exc:  # after BrokenPipeError, which is one
        if exc.errno != errno.ENAMETOOLONG:
            raise
        # Only a person's words make a path too long (a flag, --home, a witness directory); `Path.exists()` and
        # `is_dir()` raise this rather than answer False, wherever a command first looks at one.
        named = shown(str(exc.filename))
        _say(
            f"pollwarden: error: a path is too long for the file system: {named[:80]}{'...' if len(named) > 80 else ''}"
        )
        return EXIT_USAGE


def _say(line: str) -> None:
    with suppress(OSError, ValueError):
        print(line, file=sys.stderr)


def _interrupted(args: argparse.Namespace, exc: Interrupted) -> str:
    if sys.stdout.isatty():
        with suppress(OSError, ValueError):
            sys.stdout.write("\r\033[K")  # the live countdown line, if one was being drawn
            sys.stdout.flush()
    if args.command == "enqueue" and getattr(args, "jobs_file", None) is not None:
        return (
            f"pollwarden: interrupted by {exc}; the batches written are whole. Run the same command again to continue"
        )
    if args.command not in ("watch", "submit"):
        return f"pollwarden: interrupted by {exc}"
    from .watch import ProgressLine  # loaded already: both commands run through cli.watch

    operation = ProgressLine.watching or args.operation
    if operation is None:
        return "interrupted before the operation was created; nothing to resume"
    return f"interrupted; the record is kept. Resume with: {resume_hint(args, operation)}"
