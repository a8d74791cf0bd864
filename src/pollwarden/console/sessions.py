"""Logged-in browsers: a session id in an HttpOnly cookie, and per session a CSRF token, flashes and a name."""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from .pages import Flash

SESSION_COOKIE = "pollwarden_console"
SESSION_IDLE_SECONDS = 12 * 3600
MAX_SESSIONS = 64


@dataclass
class Session:
    csrf: str
    seen: float
    flashes: list[Flash] = field(default_factory=list)
    by: str = ""
    """The operator name last used in this session, offered again in the next form."""
    bound_user: str | None = None
    """A broker's console: the user a one-time link was minted for, recorded as `by` of every form."""


class Sessions:
    """Logged-in browsers, in memory only: restarting the console logs everyone out."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[str, Session] = OrderedDict()

    def new(self) -> tuple[str, Session]:
        sid = secrets.token_urlsafe(32)
        session = Session(csrf=secrets.token_urlsafe(32), seen=time.monotonic())
        with self._lock:
            self._items[sid] = session
            while len(self._items) > MAX_SESSIONS:
                self._items.popitem(last=False)
        return sid, session

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        now = time.monotonic()
        with self._lock:
            session = self._items.get(sid)
            if session is None:
                return None
            if now - session.seen > SESSION_IDLE_SECONDS:
                del self._items[sid]
                return None
            session.seen = now
            self._items.move_to_end(sid)
            return session

    def drop(self, sid: str | None) -> None:
        if sid:
            with self._lock:
                self._items.pop(sid, None)
