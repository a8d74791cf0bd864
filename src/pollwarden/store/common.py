"""What both store backends do the same way, whatever the database. Statements stay in each backend
(placeholders and column types differ); only the column lists the converters depend on live here.

Rows come back in the column order of the `*_COLUMNS` constants below, and each `*_from_row` builds the
value from such a row. The one thing the backends store differently is time (SQLite: epoch seconds,
PostgreSQL: timestamptz), so the converters take the backend's `Moment` for a non-null time column, and
`record_values` the backend's way of storing one.

`AuditedStore` holds the audit state both keep (keys, cipher, trusted checkpoint file) and what they do
with it outside SQL: the missing-key errors, reading a log back as events, and keeping the newest
checkpoint in the trusted file after commit. Sealing and chaining a record onto a head it is given is
`seal_next`; reading the head and inserting the record stay with each backend, in its transaction.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..audit import (
    AUDIT_KEY_ENV,
    GENESIS_HASH,
    SIGNING_KEY_ENV,
    AuditCipher,
    AuditError,
    AuditKeys,
    AuditRecord,
    Checkpoint,
    open_record,
    read_checkpoint_file,
    seal_record,
    write_checkpoint_file,
)
from ..core.codec import record_from_json, record_to_json
from ..core.durations import format_rfc3339, parse_rfc3339
from ..core.escalation import DecisionRequest
from ..core.record import OperationRecord
from .base import Event, Grant, Stored, StoredDecision, StoreError, Submission

CHECKPOINT_EVERY = 32
"""A log gets a signed checkpoint at every outcome and at least every this many records."""

CHECKPOINT_KINDS = frozenset({"succeeded", "job_ended", "escalated", "decided", "extended", "action"})

Moment = Callable[[Any], datetime]
"""A backend's reading of a non-null time column as an aware UTC datetime."""

# -- rows ----------------------------------------------------------------------------------------------

STORED_COLUMNS = "record, contract, lease_owner, lease_token, lease_expires_at"
DECISION_COLUMNS = "request, status, decided_by, decided_at, option, note"
GRANT_COLUMNS = "grant_id, kind, subject, scope, status, requested_at, detail, decided_by, decided_at"
SUBMISSION_COLUMNS = "operation_id, fingerprint, idempotency_token, body, state, job_id, status_location, created_at"
AUDIT_RECORD_COLUMNS = "log_id, seq, at, kind, prev_hash, ciphertext, this_hash"
CHECKPOINT_COLUMNS = "log_id, seq, head_hash, counter, at, key_id, signature"


def _optional(moment: Moment, value: Any) -> datetime | None:
    return None if value is None else moment(value)


def record_text(record: OperationRecord) -> str:
    """The record as the `record` column holds it."""
    return json.dumps(record_to_json(record))


def record_values(record: OperationRecord, stamp: Callable[[datetime], Any]) -> tuple[Any, ...]:
    """What the operations row copies out of the record, beside its key: phase, next_poll_at, deadline_at,
    status_requests_used, max_status_requests and the record itself, in that order (`stamp` stores a time)."""
    return (
        record.phase.value,
        stamp(record.next_poll_at),
        stamp(record.deadline_at),
        record.status_requests_used,
        record.plan.max_status_requests,
        record_text(record),
    )


def record_from_text(text: str) -> OperationRecord:
    return record_from_json(json.loads(text))


def stored_from_row(row: Sequence[Any], moment: Moment) -> Stored:
    record, contract_text, owner, token, expires = row
    return Stored(
        record=record_from_text(record),
        contract_text=contract_text,
        lease_owner=owner,
        lease_token=int(token),
        lease_expires_at=_optional(moment, expires),
    )


def decision_request_text(request: DecisionRequest) -> str:
    """The request as the decisions table's `request` column holds it."""
    return json.dumps(request.to_json())


def decision_from_row(row: Sequence[Any], moment: Moment) -> StoredDecision:
    request, status, by, at, option, note = row
    return StoredDecision(
        request=DecisionRequest.from_json(json.loads(request)),
        status=status,
        decided_by=by,
        decided_at=_optional(moment, at),
        option=None if option is None else int(option),
        note=note,
    )


def grant_from_row(row: Sequence[Any], moment: Moment) -> Grant:
    return Grant(
        grant_id=row[0],
        kind=row[1],
        subject=row[2],
        scope=row[3],
        status=row[4],
        requested_at=moment(row[5]),
        detail=json.loads(row[6]),
        decided_by=row[7],
        decided_at=_optional(moment, row[8]),
    )


def grant_detail_text(grant: Grant) -> str:
    """The grant's detail as the `detail` column holds it."""
    return json.dumps(dict(grant.detail), sort_keys=True)


def submission_from_row(row: Sequence[Any], moment: Moment) -> Submission:
    return Submission(row[0], row[1], row[2], bytes(row[3]), row[4], row[5], row[6], moment(row[7]))


def audit_record_from_row(row: Sequence[Any]) -> AuditRecord:
    return AuditRecord(row[0], int(row[1]), row[2], row[3], row[4], bytes(row[5]), row[6])


def audit_record_values(record: AuditRecord) -> tuple[Any, ...]:
    """The record's values in `AUDIT_RECORD_COLUMNS` order, for an INSERT."""
    return (record.log_id, record.seq, record.at, record.kind, record.prev_hash, record.ciphertext, record.this_hash)


def checkpoint_from_row(row: Sequence[Any]) -> Checkpoint:
    return Checkpoint(row[0], int(row[1]), row[2], int(row[3]), row[4], row[5], row[6])


def checkpoint_values(cp: Checkpoint) -> tuple[Any, ...]:
    """The checkpoint's values in `CHECKPOINT_COLUMNS` order, for an INSERT."""
    return (cp.log_id, cp.seq, cp.head_hash, cp.counter, cp.at, cp.key_id, cp.signature)


# -- leases --------------------------------------------------------------------------------------------


def this_host() -> str:
    return socket.gethostname()


def process_owner() -> str:
    """host:pid:nonce — the nonce tells two incarnations of one pid apart."""
    return f"{this_host()}:{os.getpid()}:{os.urandom(4).hex()}"


def holder_dead(owner: str) -> bool:
    """A holder on this host whose process is gone cannot be sending: its lease need not be waited out."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != this_host() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return False


def lease_held(stored: Stored, owner: str, now: datetime) -> bool:
    """`claim` must wait: another owner holds an unexpired lease, and is not a dead process on this host."""
    return (
        stored.lease_owner is not None
        and stored.lease_owner != owner
        and stored.lease_expires_at is not None
        and stored.lease_expires_at > now
        and not holder_dead(stored.lease_owner)
    )


def taken_over(previous_owner: str | None, owner: str) -> bool:
    """A claim took the lease from someone else: that is an event of the operation's log."""
    return previous_owner is not None and previous_owner != owner


def takeover_event(previous_owner: str | None, owner: str, token: int) -> dict[str, Any]:
    """The data of the `lease_taken_over` event."""
    return {"previous_owner": previous_owner, "owner": owner, "token": token}


# -- the audit trail -----------------------------------------------------------------------------------


def seal_next(
    cipher: AuditCipher, head: Sequence[Any] | None, *, log_id: str, kind: str, data: Mapping[str, Any], at: datetime
) -> tuple[AuditRecord, bool]:
    """Seal one event and chain it onto `head` (the log's last (seq, this_hash) row, None for an empty log).

    Returns the record and whether the log gets a signed checkpoint at it. The caller reads the head and
    inserts the record in one write transaction that no other writer of this log can interleave with.
    """
    seq, prev_hash = (int(head[0]) + 1, str(head[1])) if head else (1, GENESIS_HASH)
    record = seal_record(
        cipher, log_id=log_id, seq=seq, at=format_rfc3339(at), kind=kind, prev_hash=prev_hash, payload=data
    )
    return record, kind in CHECKPOINT_KINDS or seq % CHECKPOINT_EVERY == 0


class AuditedStore(ABC):
    """The audit state of a store and what it does with it that needs no SQL.

    `keys` may lack the cipher key (a verifier's machine) or the signing key; then only the operations
    that need them fail, each with a message saying which key is missing. `trusted_checkpoint_path` is a
    file kept outside the database that holds the newest checkpoint, so that replacing the database with
    an older copy is detected as a rollback.
    """

    path: Path | str
    """Where the store is, as messages name it."""

    def __init__(self, *, keys: AuditKeys | None, trusted_checkpoint_path: Path | None) -> None:
        self.keys = keys
        self._cipher = AuditCipher(keys.cipher_key) if keys is not None and keys.cipher_key else None
        self.trusted_checkpoint_path = trusted_checkpoint_path
        self._checkpoint_file_lock = threading.Lock()

    def _writing_cipher(self) -> AuditCipher:
        if self._cipher is None:
            raise StoreError(
                f"no audit encryption key for {self.path}: the log cannot be written. Keep keys/audit.key in"
                f" the home directory or set {AUDIT_KEY_ENV}"
            )
        return self._cipher

    def _signing_key(self) -> Ed25519PrivateKey:
        if self.keys is None or self.keys.signing_key is None:
            raise StoreError(
                f"no audit signing key for {self.path}: checkpoints cannot be signed. Keep keys/signing.key in"
                f" the home directory or set {SIGNING_KEY_ENV}"
            )
        return self.keys.signing_key

    def _keep_checkpoints_elsewhere(self, pending: Sequence[Checkpoint]) -> None:
        """After commit, the newest checkpoint also goes to a file outside the database (rollback evidence)."""
        if not pending or self.trusted_checkpoint_path is None:
            return
        newest = max(pending, key=lambda cp: cp.counter)
        path = self.trusted_checkpoint_path
        with self._checkpoint_file_lock:  # threads of this process; the file only ever moves forward
            try:
                if path.exists() and read_checkpoint_file(path).counter >= newest.counter:
                    return
            except AuditError:
                pass  # a damaged file is replaced by a good one; verify reports what it read before
            write_checkpoint_file(path, newest)

    @abstractmethod
    def audit_records(self, log_id: str | None = None) -> Iterator[AuditRecord]: ...

    def events(self, operation_id: str) -> list[Event]:
        """The decrypted trail of one log; needs the cipher key, and says so when it is missing."""
        if self._cipher is None:
            raise StoreError(
                f"no audit encryption key for {self.path}: the log is verifiable but not readable here."
                f" Restore keys/audit.key in the home directory or set {AUDIT_KEY_ENV}"
            )
        events = []
        for record in self.audit_records(operation_id):
            try:
                data = open_record(self._cipher, record)
            except AuditError:
                raise StoreError(
                    f"audit record {record.seq} of {operation_id} cannot be decrypted with this key;"
                    " run `pollwarden audit verify` to check the log"
                ) from None
            events.append(Event(operation_id, record.seq, parse_rfc3339(record.at), record.kind, data))
        return events
