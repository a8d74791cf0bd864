"""Heads kept elsewhere: the home's head file, and a witness location configured once.

A store can always be rolled back together with the files beside it; only a head held somewhere the
attacker cannot write shows it. After each commit the store offers its new head here, and the newest goes to
the home's `audit-head.checkpoint`: a local file, cheap, written from the committing thread.

Writing a file (and an fsync) per commit would double the cost of a poll, so that file is coalesced: a head is
written at once when its transaction recorded an outcome (success, stop, decision, escalation), and otherwise
at most once a second, and the newest one when the store closes.

The witness (a directory on another volume or machine, or an HTTPS endpoint that receives each head as a
POST) is slow or down at times, so nothing on the committing path writes it: the store queues the head in the
outbox in the transaction that signs it (`store.sql_outbox`), and the delivery loop of a long-running process
sends it (`pollwarden.home.outbox`). Each head extends every earlier one, so the newest is all a witness needs: a
newer head replaces the one waiting.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..audit import AuditError, Head, HeadFile, read_kept_file, write_head_file
from .records import StoreError

if TYPE_CHECKING:
    from .common import Tx

__all__ = ["WITNESS_ENV", "HeadKeeper", "Witness", "witness_file_name", "write_forward"]

WITNESS_ENV = "POLLWARDEN_AUDIT_WITNESS"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_INTERVAL = 1.0

log = logging.getLogger("pollwarden.witness")


def witness_file_name(key_id: str) -> str:
    """One file per signing key: a store whose key was rotated keeps the last head of each key there, and a
    verifier reads them all (`witnessing.py`). A witness location is one store's: another's heads there are
    reported, since nothing tells them apart from a replaced key's."""
    return f"pollwarden-head-{key_id}.json"


@dataclass(frozen=True)
class Witness:
    """Where new heads are sent: a directory, or a URL (https, or http to a loopback address for tests)."""

    location: str

    @property
    def is_url(self) -> bool:
        return "://" in self.location

    @classmethod
    def parse(cls, text: str, source: str) -> Witness:
        """Check a configured location; a bad one is a StoreError naming `source` and what to give."""
        location = text.strip()
        if not location:
            raise StoreError(f"{source} is empty: give a directory or an https:// URL")
        if "://" in location:
            parts = urlsplit(location)
            loopback = parts.scheme == "http" and (parts.hostname or "") in _LOOPBACK
            if parts.scheme != "https" and not loopback:
                raise StoreError(
                    f"{source}: a witness URL must be https:// (http:// only to a loopback address), got "
                    f"{parts.scheme}://"
                )
            if not parts.hostname or parts.username or parts.password or parts.fragment:
                raise StoreError(f"{source}: a witness URL needs a host and no user, password or fragment")
            return cls(location)
        path = Path(location).expanduser()
        if not path.is_absolute():
            raise StoreError(f"{source}: a witness directory must be an absolute path, got {location!r}")
        if not path.is_dir():
            raise StoreError(f"{source}: {path} is not a directory; create it (on another volume) first")
        if not os.access(path, os.W_OK | os.X_OK):
            raise StoreError(f"{source}: {path} is not writable by this user")
        return cls(str(path))

    @property
    def key(self) -> str:
        """What the outbox knows this witness by: a digest of its location, which is not stored (a URL's query
        may carry a token)."""
        return hashlib.sha256(self.location.encode("utf-8")).hexdigest()[:24]

    def file_for(self, key_id: str) -> Path | None:
        """The file a directory witness keeps the heads of this signing key in (None for a URL)."""
        return None if self.is_url else Path(self.location) / witness_file_name(key_id)


def write_forward(path: Path, head: Head) -> None:
    """Write `head` unless the file already holds a later one (another process got further)."""
    try:
        kept = read_kept_file(path) if path.exists() else None
    except AuditError:
        kept = None  # a damaged file is replaced; verify reported what it read before, if anyone asked
    if isinstance(kept, HeadFile) and kept.head.counter >= head.counter:
        return
    write_head_file(path, head)


class HeadKeeper:
    """Takes each committed head; writes the newest to the home's file, coalesced."""

    def __init__(self, local: Path | None) -> None:
        self.local = local
        self._lock = threading.Lock()
        self._newest: Head | None = None
        self._written = 0
        self._written_at = float("-inf")

    def offer(self, tx: Tx) -> None:
        head = tx.head
        if head is None or self.local is None:
            return
        with self._lock:
            if self._newest is None or head.counter > self._newest.counter:
                self._newest = head
            if tx.outcome or time.monotonic() - self._written_at >= _INTERVAL:
                self._send()

    def flush(self) -> None:
        """Write the newest head not written yet (a store closing)."""
        with self._lock:
            self._send()

    def _send(self) -> None:
        head = self._newest
        if head is None or head.counter <= self._written or self.local is None:
            return
        self._written, self._written_at = head.counter, time.monotonic()
        try:
            write_forward(self.local, head)
        except OSError as exc:
            # The commit is done; a head that could not be kept beside the database weakens rollback evidence,
            # and the next one will try again. Said once per failure, never with the head's content.
            log.warning("could not keep audit head #%d in %s: %s", head.counter, self.local, exc.strerror or exc)
            self._written = 0
