"""One-time links into a broker's console: minted for an approver by `pollwarden console-login --connect`,
valid 5 minutes, usable once, and bound to the user the kernel named to the broker."""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

LOGIN_LINK_SECONDS = 300.0
MAX_LINKS = 256
"""Links not yet used: past this the oldest is dropped (a person asks for another)."""


class OneTimeLogins:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._links: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def mint(self, user: str) -> str:
        if not user:
            # A session bound to "" would have no one to record as 'Decided by'.
            raise ValueError("a login link must name its user")
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._links[token] = (user, self._clock() + LOGIN_LINK_SECONDS)
            while len(self._links) > MAX_LINKS:
                self._links.popitem(last=False)
        return token

    def redeem(self, token: str) -> str | None:
        """The user a link was minted for, once; None for a spent, expired or unknown link."""
        with self._lock:
            found = self._links.pop(token, None)
        if found is None:
            return None
        user, until = found
        return user if self._clock() < until else None
