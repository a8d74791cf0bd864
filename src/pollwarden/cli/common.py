"""What every command shares: bad-input errors, the duration and number flag parsers, the store and the contract."""

from __future__ import annotations

import argparse
from datetime import timedelta
from pathlib import Path

from ..core.contract import Contract, ContractError, load_contract
from ..core.durations import DurationError, parse_duration
from ..errors import PollwardenError
from ..home import resolve_home
from ..operating import HomeError, open_store
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


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0 or value > 1_000_000:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1000000, got {value}")
    return value


def _open_store(home_arg: str | None, *, keys: str = "write") -> Store:
    """keys: "write" loads or creates both audit keys, "read" needs the existing ones, "none" neither."""
    try:
        return open_store(resolve_home(home_arg), keys=keys)
    except HomeError as exc:
        raise UsageError(str(exc)) from None


def _load_contract(path: str) -> Contract:
    try:
        return load_contract(Path(path))
    except ContractError as exc:
        raise UsageError(str(exc)) from None
