"""What every command shares: bad-input errors, the duration and number flag parsers, the store and the contract."""

from __future__ import annotations

import argparse
import gc
import math
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from ..catalogue import resolve_contract
from ..core.admission import MAX_COUNT
from ..core.contract.parse import Contract, ContractError
from ..core.contract.vars import VAR_NAME
from ..core.durations import DurationError, parse_duration
from ..errors import PollwardenError
from ..home.directory import resolve_home
from ..shown import has_control, shown
from ..shown import shown_json as shown_json  # the commands' text output: in `shown`, which other interfaces share
from ..shown import shown_request as shown_request
from ..store.base import Store

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_JOB_ENDED, EXIT_ESCALATED = 0, 1, 2, 3, 4


class UsageError(PollwardenError):
    """Bad input from the person at the keyboard: reported in one line, exit 2, nothing changed."""


def _duration(text: str | None, flag: str) -> timedelta | None:
    if text is None:
        return None
    try:
        value = parse_duration(text)
    except DurationError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    if value <= timedelta(0):
        raise UsageError(f"{flag}: must be longer than zero")
    return value


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high]; argparse names the flag and exits 2 when it is not."""

    def parse(text: str) -> int:
        # Bounded before int(): a 5,000-digit number would otherwise cost a conversion and then an OverflowError.
        if len(text.strip()) > 20:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low} to {high}, got {shown(text[:24])}...")
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be a whole number from {low} to {high}, got {shown(text)!r}"
            ) from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low} to {high}, got {value}")
        return value

    parse.__name__ = "whole number"  # argparse words its own errors with the type's name
    return parse


def real_number(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a finite number in (low, high]; nan and inf are refused, not compared."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and low < value <= high):
            raise argparse.ArgumentTypeError(
                f"must be a number greater than {low:g} and at most {high:g}, got {shown(text)!r}"
            )
        return value

    parse.__name__ = "number"
    return parse


_positive = whole_number(1, MAX_COUNT)  # admission's cap; a budget of 0 would stop before the first request
"""A count or budget flag. 0 passes here so the command can say why it is not allowed where it is not."""
port_number = whole_number(0, 65_535)


def host_name(text: str) -> str:
    """An address to bind (`--host`, `--metrics-host`): an IP literal or a name the resolver can be asked about.
    A name IDNA cannot encode (a bidi control, a label past 63 characters) was a traceback from the socket layer;
    one that encodes but does not resolve is still the bind's own exit 2."""
    try:
        text.encode("idna")
    except UnicodeError:
        raise argparse.ArgumentTypeError(
            f"'{shown(text[:80])}' is not a host name or IP address (letters, digits, '-' and '.', labels of at most"
            " 63 characters)"
        ) from None
    return text


def typed(value: str | None, flag: str) -> str | None:
    """A name or note a person typed for the audit log: refused, not escaped, when it holds a control character."""
    if value is not None and has_control(value):
        raise UsageError(
            f"{flag} {shown(value)!r}: control characters (newlines, tabs, escapes, bidi overrides) are not"
            " allowed; type plain text"
        )
    return value


def resume_hint(args: argparse.Namespace, operation_id: str) -> str:
    """The resume command for this operation, with the --home/--db this command was given."""
    from ..home.operating import watch_command  # `operating` (with http, ssl) is not the parser's: imported by use

    return watch_command(operation_id, home=getattr(args, "home", None), db=getattr(args, "db", None))


@contextmanager
def output_file(path: str, flag: str) -> Iterator[Path]:
    """A temporary file beside `path`, renamed over it when the block succeeds, removed when it fails.

    Only a regular file is ever replaced: a device, FIFO, socket, symlink or directory at `path` is refused,
    so `--out /dev/full` (as root) cannot replace the device node, and a reader never sees half a file."""
    target = Path(path)
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise UsageError(f"{flag} {shown(path)}: {exc.strerror}") from None
    if mode is not None and not stat.S_ISREG(mode):
        kind = (
            "a symbolic link" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        )
        raise UsageError(f"{flag} {shown(path)}: {kind}; give the path of a regular file to write (or replace)")
    parent = target.parent
    if not parent.is_dir():
        raise UsageError(f"{flag} {shown(path)}: the directory {shown(parent)} does not exist")
    try:
        fd, temp_name = tempfile.mkstemp(dir=parent, prefix=f".{target.name}.", suffix=".part")
    except OSError as exc:
        raise UsageError(f"{flag} {shown(path)}: cannot write in {shown(parent)}: {exc.strerror}") from None
    os.close(fd)
    temp = Path(temp_name)
    try:
        yield temp
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _open_store(home_arg: str | None, *, keys: str = "write") -> Store:
    """keys: "write" loads or creates both audit keys, "read" needs the existing ones, "none" neither."""
    from ..home.operating import HomeError, open_store

    try:
        return open_store(resolve_home(home_arg), keys=keys)
    except HomeError as exc:
        raise UsageError(str(exc)) from None


def var_pair(text: str) -> tuple[str, str]:
    """An argparse type for `--var NAME=VALUE`; the value's own rule is the contract's (contract_vars)."""
    name, sep, value = text.partition("=")
    if not sep or not VAR_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(f"write it as NAME=VALUE with a lowercase NAME, got {shown(text)!r}")
    return name, value


var_pair.__name__ = "NAME=VALUE"


def add_var_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--var",
        dest="vars",
        action="append",
        type=var_pair,
        metavar="NAME=VALUE",
        help="a value for one of the contract's [vars] (repeatable), e.g. --var base_url=http://127.0.0.1:8080",
    )


def vars_of(args: argparse.Namespace) -> dict[str, str]:
    given: dict[str, str] = {}
    for name, value in getattr(args, "vars", None) or []:
        if name in given:
            raise UsageError(f"--var {name} is given twice; give each var once")
        given[name] = value
    return given


def _load_contract(argument: str, vars: dict[str, str] | None = None) -> Contract:
    """`--contract`: a shipped name or a path (catalogue.resolve_contract), with the `--var` values."""
    try:
        return resolve_contract(argument, vars)
    except ContractError as exc:
        raise UsageError(shown(str(exc))) from None


def settle() -> None:
    """For a command that serves until it is stopped, once it has imported what it serves with: those objects live
    as long as the process, so they leave every collection from now on, the one at its exit included (the MCP
    SDK's made the exit of each `pollwarden mcp` and broker a collection of ~0.2 s CPU, and every collection
    while it served scan them again)."""
    gc.freeze()
