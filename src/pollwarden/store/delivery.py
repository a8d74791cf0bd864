"""What the outbox's writers (the store) and its delivery loops (`pollwarden.home.outbox`) share, light enough for
every driver to import: the kinds of delivery and their ids, the name a process queues under, and the bell that
wakes this process's delivery loops."""

from __future__ import annotations

import os
import threading
import weakref

from .owner import this_host

__all__ = ["BELL", "WEBHOOK", "WITNESS", "Bell", "queued_by", "webhook_delivery", "witness_delivery"]

WEBHOOK = "webhook"
WITNESS = "witness"


def webhook_delivery(decision_id: str) -> str:
    """The outbox id of a decision request's webhook: one per decision, however often it is queued."""
    return f"{WEBHOOK}:{decision_id}"


def witness_delivery(key: str) -> str:
    """The outbox id of a witness's newest head: one per witness (`Witness.key`)."""
    return f"{WITNESS}:{key}"


_origin: tuple[int, str] | None = None


def queued_by() -> str:
    """This process as the outbox names who queued a delivery: host, pid and a nonce (a pid is reused)."""
    global _origin
    pid = os.getpid()
    if _origin is None or _origin[0] != pid:  # a forked child is another process
        _origin = (pid, f"{this_host()}:{pid}:{os.urandom(4).hex()}")
    return _origin[1]


class Bell:
    """Wakes this process's delivery loops when a commit of the process queued a webhook: it goes out at once,
    not at a loop's next look. A witness's head waits for that look (a second at most): heads come with every
    commit, and the witness needs only the newest."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: weakref.WeakSet[threading.Event] = weakref.WeakSet()

    def listen(self, event: threading.Event) -> None:
        with self._lock:
            self._listeners.add(event)

    def ring(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for event in listeners:
            event.set()


BELL = Bell()
