"""`pollwarden ARGS...` with test instruments, for end-to-end tests that must see inside one command. Run it as
`python tests/instrumented_cli.py ARGS...`; pollwarden never imports it, and an installed pollwarden has none of it.

- POLLWARDEN_TEST_CLAIMS=FILE: one line per claim of a named operation the command makes, "taken" or "held",
  appended to FILE once the claim's transaction has returned: a test waits for the line instead of sleeping.
- POLLWARDEN_TEST_CLOCK_SKEW=SECONDS: `pollwarden.clock.utcnow`, this host's wall clock as every driver reads it,
  that many seconds ahead, as on a host whose clock is wrong. Set before any module binds `utcnow`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any


def _skew(seconds: float) -> None:
    import pollwarden.clock

    honest = pollwarden.clock.utcnow

    def ahead() -> datetime:
        return honest() + timedelta(seconds=seconds)

    pollwarden.clock.utcnow = ahead


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
    if (skew := os.environ.get("POLLWARDEN_TEST_CLOCK_SKEW")) is not None:
        _skew(float(skew))
    if (claims := os.environ.get("POLLWARDEN_TEST_CLAIMS")) is not None:
        _count_claims(claims)
    from pollwarden.cli import main as pollwarden

    return pollwarden()  # reads sys.argv[1:] as the console script does, signals and all


if __name__ == "__main__":
    sys.exit(main())
