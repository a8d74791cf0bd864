"""Heads kept elsewhere: the home's head file, and a witness location configured once.

A store can always be rolled back together with the files beside it; only a head held somewhere the
attacker cannot write shows it. After each commit the store offers its new head here. The newest head goes
to the home's `audit-head.checkpoint` and to the witness, when one is configured: a directory (on another
volume or machine: a mount, a synced folder) or an HTTPS endpoint that receives it as a POST.

Writing a file (and an fsync) per commit would double the cost of a poll, so heads are coalesced: a head is
written at once when its transaction recorded an outcome (success, stop, decision, escalation), and
otherwise at most once a second, and the newest one when the store closes. Each head extends every earlier
one, so the newest is all a witness needs; what is lost to a rollback without a witness is at most the
last second of routine polls (docs/audit.md says so).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..audit import AuditError, Head, HeadFile, read_kept_file, write_head_file
from ..audit.export import head_file_text
from .base import StoreError

if TYPE_CHECKING:
    from .common import Tx

__all__ = ["WITNESS_ENV", "HeadKeeper", "Witness", "witness_file_name"]

WITNESS_ENV = "POLLWARDEN_AUDIT_WITNESS"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_INTERVAL = 1.0
_POST_TIMEOUT = 10.0

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

    def file_for(self, key_id: str) -> Path | None:
        """The file a directory witness keeps the heads of this signing key in (None for a URL)."""
        return None if self.is_url else Path(self.location) / witness_file_name(key_id)


def _write_forward(path: Path, head: Head) -> None:
    """Write `head` unless the file already holds a later one (another process got further)."""
    try:
        kept = read_kept_file(path) if path.exists() else None
    except AuditError:
        kept = None  # a damaged file is replaced; verify reported what it read before, if anyone asked
    if isinstance(kept, HeadFile) and kept.head.counter >= head.counter:
        return
    write_head_file(path, head)


class _Poster(threading.Thread):
    """Sends the newest head to an HTTPS witness off the commit path; a slow endpoint never slows a poll."""

    def __init__(self, url: str) -> None:
        super().__init__(name="pollwarden-witness", daemon=True)
        self.url = url
        self._ready = threading.Condition()
        self._pending: Head | None = None
        self._sent = 0
        self._warned_at = 0.0
        self._attempts = 0
        self._failed_attempt = 0

    def offer(self, head: Head) -> None:
        with self._ready:
            if self._pending is None or head.counter > self._pending.counter:
                self._pending = head
            self._ready.notify()

    def drain(self, timeout: float) -> None:
        """Wait (bounded) until the newest offered head is sent: a closing store gives it a chance.

        One chance: an attempt begun after the drain that fails ends the wait, so a witness that is down
        (connection refused) costs a closing command about a second, not the whole bound.
        """
        deadline = time.monotonic() + timeout
        with self._ready:
            begun = self._attempts
            while self._pending is not None and self._failed_attempt <= begun and time.monotonic() < deadline:
                self._ready.wait(0.05)

    def run(self) -> None:
        import urllib.request

        while True:
            with self._ready:
                while self._pending is None:
                    self._ready.wait()
                head = self._pending
                self._attempts += 1
                attempt = self._attempts
            body = head_file_text(head).encode("utf-8")
            request = urllib.request.Request(
                self.url, data=body, method="POST", headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=_POST_TIMEOUT) as answer:
                    answer.read(1024)
                sent = True
            except (OSError, ValueError) as exc:
                sent = False
                if time.monotonic() - self._warned_at > 60:
                    self._warned_at = time.monotonic()
                    log.warning("the audit witness did not take head #%d: %s", head.counter, type(exc).__name__)
            with self._ready:
                if sent and self._pending is head:
                    self._pending = None
                if not sent:
                    self._failed_attempt = attempt
                self._ready.notify_all()
            if not sent:
                time.sleep(_INTERVAL)


class HeadKeeper:
    """Takes each committed head; writes the newest to the home's file and the witness, coalesced."""

    def __init__(self, local: Path | None, witness: Witness | None) -> None:
        self.local = local
        self.witness = witness
        self._lock = threading.Lock()
        self._newest: Head | None = None
        self._written = 0
        self._written_at = float("-inf")
        self._poster = _Poster(witness.location) if witness is not None and witness.is_url else None
        if self._poster is not None:
            self._poster.start()

    def offer(self, tx: Tx) -> None:
        head = tx.head
        if head is None or (self.local is None and self.witness is None):
            return
        with self._lock:
            if self._newest is None or head.counter > self._newest.counter:
                self._newest = head
            if tx.outcome or time.monotonic() - self._written_at >= _INTERVAL:
                self._send()

    def flush(self) -> None:
        """Send the newest head not sent yet (a store closing)."""
        with self._lock:
            self._send()
        if self._poster is not None:
            self._poster.drain(_POST_TIMEOUT)

    def _send(self) -> None:
        head = self._newest
        if head is None or head.counter <= self._written:
            return
        self._written, self._written_at = head.counter, time.monotonic()
        try:
            if self.local is not None:
                _write_forward(self.local, head)
            target = self.witness.file_for(head.key_id) if self.witness is not None else None
            if target is not None:
                _write_forward(target, head)
        except OSError as exc:
            # The commit is done; a head that could not be kept elsewhere weakens rollback evidence, and the
            # next one will try again. Said once per failure, never with the head's content.
            log.warning("could not keep audit head #%d elsewhere: %s", head.counter, exc.strerror or exc)
            self._written = 0
        if self._poster is not None:
            self._poster.offer(head)
