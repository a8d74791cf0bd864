"""`pollwarden ARGS...` with test instruments, for end-to-end tests that must see inside one command. Run it as
`python tests/instrumented_cli.py ARGS...`; pollwarden never imports it, and an installed pollwarden has none of it.

- POLLWARDEN_TEST_CLAIMS=FILE: one line per claim of a named operation the command makes, "taken" or "held",
  appended to FILE once the claim's transaction has returned: a test waits for the line instead of sleeping.
- POLLWARDEN_TEST_CLOCK_SKEW=SECONDS: `pollwarden.clock.utcnow`, this host's wall clock as every driver reads it,
  that many seconds ahead, as on a host whose clock is wrong. Set before any module binds `utcnow`.
- POLLWARDEN_TEST_STORE_CLOCK=FILE: the store's clock (`Store.db_now`, every claim, lease, deadline and audit time)
  and `pollwarden.clock.utcnow` (the MCP server's clock on SQLite, `home_clock`) ahead by the seconds FILE holds
  (none while it does not exist), read at each call: a test moves the command's time past a deadline while it
  runs, instead of waiting for the machine's clock to get there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any


def _skew(seconds: float) -> None:
    import pollwarden.clock

    honest = pollwarden.clock.utcnow

    def ahead() -> datetime:
        return honest() + timedelta(seconds=seconds)

    pollwarden.clock.utcnow = ahead


def _store_clock(path: str) -> None:
    import pollwarden.clock

    def moved(honest: Callable[..., datetime]) -> Callable[..., datetime]:
        def ahead(*args: Any) -> datetime:
            try:
                seconds = float(Path(path).read_text())
            except FileNotFoundError:
                seconds = 0.0
            return honest(*args) + timedelta(seconds=seconds)

        return ahead

    pollwarden.clock.utcnow = moved(pollwarden.clock.utcnow)  # before any module binds it (the MCP server's clock)
    from pollwarden.store.postgres import PostgresStore
    from pollwarden.store.sqlite import SQLiteStore

    SQLiteStore.db_now = moved(SQLiteStore.db_now)  # type: ignore[method-assign]
    PostgresStore.db_now = moved(PostgresStore.db_now)  # type: ignore[method-assign]


def _count_claims(path: str) -> None:
    from pollwarden.store.sql_leases import Leases

    claim_many = Leases.claim_many

    def counted(self: Leases, claims: Sequence[Any], now: datetime) -> list[Any]:
        answers = claim_many(self, claims, now)
        with open(path, "a", encoding="ascii") as out:
            out.writelines("held\n" if answer is None else "taken\n" for answer in answers)
        return answers

    Leases.claim_many = counted  # type: ignore[method-assign]


def main() -> int:
    # Run as a script, its own folder (tests/) is first on sys.path, where tests/mcp would stand for the mcp library.
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]
    if (skew := os.environ.get("POLLWARDEN_TEST_CLOCK_SKEW")) is not None:
        _skew(float(skew))
    if (moved := os.environ.get("POLLWARDEN_TEST_STORE_CLOCK")) is not None:
        _store_clock(moved)
    if (claims := os.environ.get("POLLWARDEN_TEST_CLAIMS")) is not None:
        _count_claims(claims)
    from pollwarden.cli import main as pollwarden

    return pollwarden()  # reads sys.argv[1:] as the console script does, signals and all


if __name__ == "__main__":
    sys.exit(main())
