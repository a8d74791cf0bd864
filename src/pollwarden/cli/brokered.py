"""A person's command as the broker runs it, in a process of its own: `python -m pollwarden.cli.brokered`.

It reads {"argv", "home", "user"} on stdin, parses the words with the command's own parser (so a mistake gets the
message it gets without --connect), and runs the command on the broker's home with `--by` the connected user's
name. A process per command keeps the broker's streams, signals and memory out of the command's way; its output
goes back to the person whole.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import PollwardenError
from ..isolation.commands import BY_PERSON
from .app import run
from .parser import build_parser

_UNSET = "\x00unset"
"""What `--by` holds when the person gave none: no name can be this (a NUL is refused everywhere)."""


class Refused(PollwardenError):
    pass


def parse(words: list[str], user: str) -> argparse.Namespace:
    """The words as the command's parser reads them, `--by` checked against the kernel's name for the person."""
    command = words[0] if words else ""
    # argparse keeps the last --by: put the stand-in first, so one the person typed (abbreviated or not) wins.
    typed = [command, "--by", _UNSET, *words[1:]] if command in BY_PERSON else list(words)
    args = build_parser().parse_args(typed)
    if args.home or args.db:
        raise Refused("--home and --db do not go with --connect: the broker uses its own home; leave them out")
    if command == "decisions" and args.operation != "close":
        if args.by == _UNSET:
            args.by = None  # a listing names no one; a --by typed to it is refused by the command itself
    elif command in BY_PERSON:
        given = args.by.strip()
        if given not in (_UNSET, user):
            raise Refused(
                f"--by {given!r} is not you: through the broker a decision is recorded with your user name ({user})."
                " Leave --by out, or give --by " + user + ". Nothing changed"
            )
        args.by = user
    args.connect = None
    return args


def main() -> int:
    request = json.loads(sys.stdin.read())
    words = [str(w) for w in request["argv"]]
    user = str(request["user"])
    try:
        args = parse(words, user)
    except PollwardenError as exc:
        print(f"pollwarden: error: {exc}", file=sys.stderr)
        return exc.exit_code
    args.home = str(request["home"])
    return run(args, args.func, process=True)


if __name__ == "__main__":
    try:
        code = main()
    except SystemExit as exc:  # argparse's answer to bad words (its message is on stderr already)
        code = exc.code if isinstance(exc.code, int) else 2
    sys.exit(code)
