"""The sealed, hash-chained audit trail, written once for both backends.

`AuditTrail` holds the audit state a store keeps (keys, cipher, trusted checkpoint file) and the bodies
that read and write the trail: sealing and chaining an event onto its log's head, signing checkpoints,
keeping the newest checkpoint in the trusted file after commit, reading a log back. A backend supplies
only its transactions and reads (`_tx`, `_fetchall`, `_stream`) and its `Dialect`.

Chaining is safe with many writers because the head is read inside the write transaction that inserts
the next record, after the dialect's `lock_log` (PostgreSQL: an advisory lock per log, held to commit;
SQLite: the file's one write lock, so nothing to add). Two writers can never chain onto one head: a fork
would look exactly like tampering to the verifier.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..audit import (
    AUDIT_KEY_ENV,
    CHECKPOINTED_KINDS,
    GENESIS_HASH,
    SIGNING_KEY_ENV,
    AuditCipher,
    AuditError,
    AuditKeys,
    AuditRecord,
    Checkpoint,
    Head,
    StoredHeads,
    StoredRows,
    open_record,
    sign_checkpoint,
    sign_head,
)
from ..audit.chain import seal_made
from ..audit.checkpoint import key_id_of
from ..audit.rotation import Rotation, rotation_key_id, sign_rotation
from ..audit.vouch import Vouch
from ..core.durations import format_rfc3339, parse_rfc3339
from ..events import SigningKeyRotated
from ..events.base import AuditEvent, NewEvent
from ..home.directory import PRIVATE_FILE, tighten
from .common import (
    AUDIT_RECORD_COLUMNS,
    CHECKPOINT_COLUMNS,
    HEAD_COLUMNS,
    REPLAYED_HEAD_COLUMNS,
    Dialect,
    Row,
    Tx,
    audit_record_from_row,
    audit_record_values,
    checkpoint_from_row,
    checkpoint_values,
    marks,
)
from .records import Event, LogEntry, StoreError
from .vouching import (
    VOUCHED_CONTRACT_COLUMNS,
    VOUCHED_OPERATION_COLUMNS,
    VOUCHED_SETTING_COLUMNS,
    contract_vouch_of_row,
    operation_vouch_of_row,
    setting_vouch,
)
from .witness import HeadKeeper, Witness


def log_lock_key(log_id: str) -> int:
    """A 64-bit lock key per log, computed here (not by `hashtext` in SQL) so a transaction that locks
    several logs can take them in one global order and never deadlock with another such transaction."""
    return _lock_key(b"pollwarden-audit-log\x00" + log_id.encode("utf-8"))


def job_lock_key(contract_name: str, job_id: str) -> int:
    """The lock key of one provider job under one contract name, apart from every log's (another prefix)."""
    return _lock_key(b"pollwarden-job\x00" + contract_name.encode("utf-8") + b"\x00" + job_id.encode("utf-8"))


def _lock_key(text: bytes) -> int:
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big", signed=True)


INSERT_ROWS = 128

VOUCH_PAGE = 1000
"""Rows read per statement when an upgraded store's first head vouches for every row."""
"""Records per INSERT statement: 7 parameters each, under SQLite's oldest limit of 999 per statement."""

HEADS_LOCK_KEY = int.from_bytes(hashlib.sha256(b"pollwarden-audit-heads").digest()[:8], "big", signed=True)
"""Held from reading the newest head to commit. Taken last, after every log lock, and held only while the
transaction writes its head and commits, so it orders commits without ever waiting inside one."""


ROTATION_COLUMNS = "counter, head_hash, at, old_public, new_public, signature"

KEYS_LOG = "@audit/keys"
"""The log of the store's signing keys: each rotation is an event here, in the transaction whose head it follows."""

ALL_TIPS = (
    "SELECT r.log_id, r.seq, r.this_hash FROM audit_records r"
    " JOIN (SELECT log_id, MAX(seq) AS seq FROM audit_records GROUP BY log_id) h"
    " ON r.log_id = h.log_id AND r.seq = h.seq ORDER BY r.log_id"
)
"""The head of every log (an upgraded store's first head, a witness file, checkpoints of all logs)."""


def log_tips_query(count: int) -> str:
    """The head (log_id, last seq, its this_hash) of each of `count` logs, in log id order; parameters: the
    ids, each once. Driven by the list of ids: per id one step back in the primary key (log_id, seq) for its
    last seq and one lookup of that row, so it costs the logs asked about, not their length or the trail's
    size. The GROUP BY MAX join it replaced was planned by PostgreSQL as a scan of the whole trail once the
    prepared statement went generic (tests/store/test_tips_plan.py)."""
    values = ",".join(["(?)"] * count)
    return (
        f"SELECT r.log_id, r.seq, r.this_hash FROM (VALUES {values}) AS v JOIN audit_records r"
        " ON r.log_id = v.column1 AND r.seq = (SELECT MAX(m.seq) FROM audit_records m WHERE m.log_id = v.column1)"
        " ORDER BY r.log_id"
    )


def seal_next(
    cipher: AuditCipher, head: Row | None, *, log_id: str, kind: str, data: Mapping[str, Any], at: datetime
) -> AuditRecord:
    """Seal one event and chain it onto `head` (the log's last (seq, this_hash) row, None for an empty log)."""
    seq, prev_hash = (int(head[0]) + 1, str(head[1])) if head else (1, GENESIS_HASH)
    return seal_made(cipher, log_id, seq, format_rfc3339(at), kind, prev_hash, data)


def _of_log(select: str, log_id: str | None) -> tuple[str, tuple[str, ...]]:
    """`select` narrowed to one log, or left whole (None)."""
    return (select, ()) if log_id is None else (select + " WHERE log_id = ?", (log_id,))


class AuditSnapshot:
    """The trail as one read transaction sees it (`AuditTrail.audit_snapshot`)."""

    def __init__(self, read: Callable[[str, Sequence[Any]], Iterator[Row]], dialect: Dialect) -> None:
        self._read = read
        self._dialect = dialect

    def records(self) -> Iterator[AuditRecord]:
        for row in self._record_rows():
            yield audit_record_from_row(row)

    def rows(self) -> StoredRows:
        """The records as the database hands them over, for `verify` to walk without building each one."""
        return StoredRows(self._record_rows())

    def _record_rows(self) -> Iterator[Row]:
        query = f"SELECT {AUDIT_RECORD_COLUMNS} FROM audit_records ORDER BY log_id, seq"
        return self._read(self._dialect.sql(query), ())

    def heads(self) -> list[Head]:
        query = f"SELECT {HEAD_COLUMNS} FROM audit_heads ORDER BY counter"
        return [Head.from_row(tuple(row)) for row in self._read(query, ())]

    def stored_heads(self) -> StoredHeads:
        """The heads for `verify` to replay as rows of the columns the chain needs, and the newest one whole
        (the only one whose signature is checked): a `Head` per commit and two long columns fewer to read."""
        newest = next(self._read(f"SELECT {HEAD_COLUMNS} FROM audit_heads ORDER BY counter DESC LIMIT 1", ()), None)
        query = f"SELECT {REPLAYED_HEAD_COLUMNS} FROM audit_heads ORDER BY counter"
        return StoredHeads(self._read(query, ()), Head.from_row(tuple(newest)) if newest is not None else None)

    def head_key_ids(self) -> list[str]:
        """Every key id a head names (a pinned key is checked against them: `refuse_private_key`)."""
        return [str(row[0]) for row in self._read("SELECT DISTINCT key_id FROM audit_heads", ())]

    def checkpoints(self) -> list[Checkpoint]:
        query = f"SELECT {CHECKPOINT_COLUMNS} FROM audit_checkpoints ORDER BY counter"
        return [checkpoint_from_row(row) for row in self._read(query, ())]

    def rotations(self) -> list[Rotation]:
        """Every change of signing key, oldest first (`audit/rotation.py`)."""
        return [Rotation.from_row(row) for row in self._read(f"SELECT {ROTATION_COLUMNS} FROM audit_key_rotations"
                                                            " ORDER BY counter", ())]  # fmt: skip

    def setting(self, log_id: str) -> tuple[str, str] | None:
        """A setting the log vouches for (`@audit/witness`): its value and when it was set, or None."""
        row = next(self._read(self._dialect.sql("SELECT value, at FROM audit_settings WHERE log_id = ?"), (log_id,)),
                   None)  # fmt: skip
        return None if row is None else (str(row[0]), str(row[1]))

    def pending(self) -> bool:
        return any(True for _ in self._read("SELECT 1 FROM audit_heads_pending", ()))

    def vouched_rows(self) -> Iterator[Vouch]:
        """What every vouched row hashes to as it stands (`store/vouching.py`), streamed, for `verify` to compare
        with what the heads vouched for: the operations, the settings, then the installed contracts."""
        moment = self._dialect.moment
        query = f"SELECT {VOUCHED_OPERATION_COLUMNS} FROM operations ORDER BY operation_id"
        for row in self._read(query, ()):
            yield operation_vouch_of_row(row, moment)
        for log_id, value, at in self._read(
            f"SELECT {VOUCHED_SETTING_COLUMNS} FROM audit_settings ORDER BY log_id", ()
        ):
            yield setting_vouch(str(log_id), str(value), str(at))
        for row in self._read(f"SELECT {VOUCHED_CONTRACT_COLUMNS} FROM contracts ORDER BY digest", ()):
            yield contract_vouch_of_row(row, moment)


class AuditTrail(ABC):
    """The audit state of a store and the bodies that write and read the trail.

    `keys` may lack the cipher key (a verifier's machine) or the signing key; then only the operations
    that need them fail, each with a message saying which key is missing. `trusted_checkpoint_path` is a
    file kept outside the database that holds the newest checkpoint, so that replacing the database with
    an older copy is detected as a rollback.
    """

    path: Path | str
    """Where the store is, as messages name it."""

    dialect: Dialect

    def __init__(
        self, *, keys: AuditKeys | None, trusted_checkpoint_path: Path | None, witness: Witness | None = None
    ) -> None:
        self.keys = keys
        self._cipher = AuditCipher(keys.cipher_key) if keys is not None and keys.cipher_key else None
        self.trusted_checkpoint_path = trusted_checkpoint_path
        self.keeper = HeadKeeper(trusted_checkpoint_path)
        self.witness = witness
        """Where new heads go besides the home's file: queued in the outbox with each commit (`sql_outbox`)."""
        if trusted_checkpoint_path is not None:
            try:
                tighten(trusted_checkpoint_path, PRIVATE_FILE)  # written 0644 by an older pollwarden
            except OSError as exc:
                raise StoreError(f"cannot make {trusted_checkpoint_path} private: {exc.strerror}") from None

    # -- what a backend supplies -------------------------------------------------------------------------

    @abstractmethod
    def _tx(self) -> AbstractContextManager[Tx]:
        """One write transaction. Just before COMMIT the backend calls `_seal_commit(tx)` (inside the
        transaction), and after it `_committed(tx)`."""

    @abstractmethod
    def _fetchall(self, query: str, params: Sequence[Any]) -> Sequence[Row]:
        """One read outside any write transaction; `query` is already in the dialect's placeholders."""

    @abstractmethod
    def _stream(self, query: str, params: Sequence[Any]) -> Iterator[Row]:
        """Like `_fetchall`, for reads that may not fit in memory (a whole fleet's trail)."""

    @abstractmethod
    def _snapshot(self) -> AbstractContextManager[Callable[[str, Sequence[Any]], Iterator[Row]]]:
        """One read-only transaction that sees one committed state throughout (streaming reads within)."""

    def _committed(self, tx: Tx) -> None:
        """After COMMIT: the new head to the home's file (coalesced)."""
        self.keeper.offer(tx)

    def _rows(self, query: str, params: Sequence[Any] = ()) -> Sequence[Row]:
        return self._fetchall(self.dialect.sql(query), params)

    def _row(self, query: str, params: Sequence[Any] = ()) -> Row | None:
        rows = self._rows(query, params)
        return rows[0] if rows else None

    # -- keys --------------------------------------------------------------------------------------------

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

    # -- writing -----------------------------------------------------------------------------------------

    def append(self, log_id: str, event: NewEvent, at: datetime) -> None:
        self.append_many([(log_id, event)], at)

    def append_many(self, entries: Sequence[LogEntry], at: datetime) -> None:
        if not entries:
            return
        with self._tx() as tx:
            self._lock_logs(tx, [log_id for log_id, _ in entries])  # all at once, in the one global order
            self._append_many(tx, [(log_id, event, at) for log_id, event in entries])

    def _lock_logs(self, tx: Tx, log_ids: Iterable[str]) -> None:
        """Hold these logs' heads until commit, in key order: the same order every transaction uses."""
        if self.dialect.lock_log is None:
            return
        wanted = sorted(set(log_ids) - tx.locked, key=log_lock_key)
        if len(wanted) > 1 and self.dialect.lock_logs is not None:  # a batch: one statement, not one per log
            tx.execute(self.dialect.lock_logs, ([log_lock_key(log_id) for log_id in wanted],))
            tx.locked.update(wanted)
            return
        for log_id in wanted:
            tx.execute(self.dialect.lock_log, (log_lock_key(log_id),))
            tx.locked.add(log_id)

    def _read_heads(self, tx: Tx, log_ids: Sequence[str]) -> None:
        """Read the heads of these logs (already locked by `tx`) in one query, for `_append` to chain onto: a
        batch would otherwise read them one statement per log. A log with no record yet gets the genesis head
        (seq 0), which chains exactly as an empty log does, so it is not asked for again one statement each."""
        missing = [log_id for log_id in dict.fromkeys(log_ids) if log_id not in tx.heads]
        if missing:
            for log_id in missing:
                tx.heads[log_id] = (0, GENESIS_HASH)
            for log_id, seq, head_hash in self._tips(tx, missing):
                tx.heads[str(log_id)] = (int(seq), str(head_hash))

    def _append(self, tx: Tx, log_id: str, event: NewEvent, at: datetime) -> None:
        """Seal and chain one event onto its log, and insert it."""
        self._insert_records(tx, [self._seal_onto(tx, log_id, event, at)])

    def _append_many(self, tx: Tx, entries: Iterable[tuple[str, NewEvent, datetime]]) -> None:
        """`_append` for many (log, event, at) entries, in that order, inserted in few statements."""
        self._insert_records(tx, [self._seal_onto(tx, log_id, event, at) for log_id, event, at in entries])

    def _seal_onto(self, tx: Tx, log_id: str, event: NewEvent, at: datetime) -> AuditRecord:
        """Seal one event and chain it onto its log's head in `tx`; the caller inserts it (`_insert_records`)
        in the same transaction before anything reads the log back. The head is read only once the log is
        locked, and the lock is held until commit, so the next writer reads this record as its head. The kind
        sealed is the event's class's: no caller names one."""
        kind, data = event.new_event()
        cipher = self._writing_cipher()
        self._lock_logs(tx, [log_id])
        head: Row | None = tx.heads.get(log_id)
        if head is None:
            head = tx.one(
                "SELECT seq, this_hash FROM audit_records WHERE log_id = ? ORDER BY seq DESC LIMIT 1", (log_id,)
            )
        record = seal_next(cipher, head, log_id=log_id, kind=kind, data=data, at=at)
        tx.heads[log_id] = (record.seq, record.this_hash)
        before = tx.appended[log_id][0] if log_id in tx.appended else record.seq - 1
        tx.appended[log_id] = (before, record.seq, record.this_hash)
        tx.last_at = max(tx.last_at, record.at)
        tx.outcome = tx.outcome or kind in CHECKPOINTED_KINDS
        return record

    def _insert_records(self, tx: Tx, records: Sequence[AuditRecord]) -> None:
        """Sealed records in multi-row INSERTs: a batch of polls writes about three records per poll, and one
        statement per record was a round trip each on PostgreSQL."""
        for start in range(0, len(records), INSERT_ROWS):
            chunk = records[start : start + INSERT_ROWS]
            rows = ",".join([f"({marks(7)})"] * len(chunk))
            params = [value for record in chunk for value in audit_record_values(record)]
            tx.execute(f"INSERT INTO audit_records ({AUDIT_RECORD_COLUMNS}) VALUES {rows}", params)

    def _seal_commit(self, tx: Tx) -> None:
        """Sign one head over every log for this transaction, as its last statement before COMMIT.

        The head lists the logs this transaction appended to and chains onto the newest head, read under
        the heads lock (PostgreSQL) or the file's write lock (SQLite), so heads are dense and never fork.
        A store upgraded from schema 2 holds a pending mark instead of a head: its first head covers every
        log as it stands. Nothing else ever writes a head that covers records it did not append, so heads
        deleted later are not quietly replaced by a new first head.
        """
        if tx.appended and tx.head is None:
            self._sign_head(tx)

    def _sign_head(self, tx: Tx) -> None:
        """Sign and insert the next head: over `tx.appended`, or over every log for an upgraded store's first.

        It vouches for the rows the transaction changed (`tx.vouches`), or for every row when the store was
        upgraded to schema 8 with rows in it and no head has vouched for any yet. It refuses to chain a head
        signed by this store's key onto one signed by another key, unless a rotation links them: a process that
        still holds a key rotated away (or a key made anew when the old one was lost) would otherwise write
        heads no verifier can follow."""
        signing_key = self._signing_key()
        if self.dialect.lock_log is not None:
            tx.execute(self.dialect.lock_log, (HEADS_LOCK_KEY,))
        prev = tx.one(
            "SELECT h.counter, h.head_hash, h.logs, h.records, h.key_id, CASE WHEN h.vouches = '' THEN 1 ELSE 0 END,"
            " r.new_public FROM audit_heads h LEFT JOIN audit_key_rotations r ON r.counter = h.counter"
            " ORDER BY h.counter DESC LIMIT 1"
        )
        if prev is not None:
            self._refuse_another_key(int(prev[0]), str(prev[4]), None if prev[6] is None else str(prev[6]))
        vouches = dict(tx.vouches)
        if (prev is None or int(prev[5])) and tx.one("SELECT 1 FROM audit_vouches_pending") is not None:
            # The first head of a store upgraded to schema 8 with rows in it: it vouches for each as it stands.
            vouches.update((log_id, (state, identity)) for log_id, state, identity in self._every_vouch(tx))
            tx.execute("DELETE FROM audit_vouches_pending")
        if prev is None and tx.one("SELECT 1 FROM audit_heads_pending") is not None:
            changes = [(str(log_id), int(seq), str(h)) for log_id, seq, h in self._tips(tx)]
            logs, records = len(changes), sum(seq for _, seq, _ in changes)
            tx.execute("DELETE FROM audit_heads_pending")
        else:
            changes = [(log_id, seq, h) for log_id, (_, seq, h) in tx.appended.items()]
            logs = (int(prev[2]) if prev else 0) + sum(1 for before, _, _ in tx.appended.values() if before == 0)
            records = (int(prev[3]) if prev else 0) + sum(seq - before for before, seq, _ in tx.appended.values())
        head = sign_head(
            signing_key,
            counter=int(prev[0]) + 1 if prev else 1,
            prev_hash=str(prev[1]) if prev else GENESIS_HASH,
            changes=changes,
            logs=logs,
            records=records,
            at=tx.last_at,
            vouches=[(log_id, state, identity) for log_id, (state, identity) in vouches.items()],
        )
        tx.execute(f"INSERT INTO audit_heads ({HEAD_COLUMNS}) VALUES ({marks(10)})", head.values())
        tx.head = head

    def _refuse_another_key(self, counter: int, key_id: str, rotated_to_public: str | None) -> None:
        """StoreError unless this store's key is the one to sign after head #counter: the key that signed it, with
        no rotation after it, or the key a rotation after it names."""
        mine = key_id_of(self._signing_key().public_key())
        rotated_to = rotation_key_id(rotated_to_public) if rotated_to_public is not None else None
        if (rotated_to_public is None and key_id == mine) or rotated_to == mine:
            return
        if rotated_to_public is not None:
            why = f"the signing key was rotated to key {rotated_to} after head #{counter}: restart this process"
        else:
            why = (
                "no rotation links the two keys: restore the signing key that signed it (keys/signing.key or"
                f" {SIGNING_KEY_ENV}); a new key is linked only by `pollwarden audit rotate-key`, signed by the old one"
            )
        raise StoreError(
            f"{self.path}: the newest signed head (#{counter}) is signed by key {key_id[:16]}, and this process holds"
            f" key {mine}; nothing was written. {why}"
        )

    def _every_vouch(self, tx: Tx) -> Iterator[Vouch]:
        """Every vouched row as it stands in `tx`, a page at a time (a fleet's rows need not fit in memory)."""
        after = ""
        while True:
            rows = tx.execute(
                f"SELECT {VOUCHED_OPERATION_COLUMNS} FROM operations WHERE operation_id > ?"
                f" ORDER BY operation_id LIMIT {VOUCH_PAGE}",
                (after,),
            ).fetchall()
            for row in rows:
                yield operation_vouch_of_row(row, self.dialect.moment)
            if len(rows) < VOUCH_PAGE:
                break
            after = str(rows[-1][0])
        for log_id, value, at in tx.execute(f"SELECT {VOUCHED_SETTING_COLUMNS} FROM audit_settings").fetchall():
            yield setting_vouch(str(log_id), str(value), str(at))
        for row in tx.execute(f"SELECT {VOUCHED_CONTRACT_COLUMNS} FROM contracts").fetchall():
            yield contract_vouch_of_row(row, self.dialect.moment)

    def _tips(self, tx: Tx | None = None, log_ids: Sequence[str] | None = None) -> Sequence[Row]:
        """(log_id, last seq, its this_hash) of every log, or of the named ones, in log id order."""
        if log_ids is None:
            query, params = ALL_TIPS, []
        else:
            params = sorted(set(log_ids))
            query = log_tips_query(len(params))
        if tx is None:
            return self._rows(query, params)
        return tx.execute(query, params).fetchall()

    def _checkpoint(self, tx: Tx, log_id: str, seq: int, head_hash: str, at: str) -> Checkpoint:
        signing_key = self._signing_key()
        row = tx.one(self.dialect.next_counter)
        assert row is not None  # both dialects' counter queries return exactly one row
        cp = sign_checkpoint(signing_key, log_id=log_id, seq=seq, head_hash=head_hash, counter=int(row[0]), at=at)
        tx.execute(f"INSERT INTO audit_checkpoints ({CHECKPOINT_COLUMNS}) VALUES ({marks(7)})", checkpoint_values(cp))
        tx.checkpoints.append(cp)
        return cp

    def rotate_signing_key(self, new_key: Ed25519PrivateKey, *, by: str, at: datetime) -> Rotation:
        """Change the store's signing key: one transaction appends the rotation to `KEYS_LOG`, signs its head with
        the old key, and stores the old key's statement that the heads after that one are signed by `new_key`.

        The store keeps its old key: close it, and open the store again with the new key (a process that goes on
        with the old key is refused at its next head, `_refuse_another_key`)."""
        old_key = self._signing_key()
        old_id, new_id = key_id_of(old_key.public_key()), key_id_of(new_key.public_key())
        if old_id == new_id:
            raise StoreError("the new signing key is the key in use; nothing was rotated")
        rotated = SigningKeyRotated.prepared({"by": by, "old_key_id": old_id, "new_key_id": new_id})
        with self._tx() as tx:
            self._append(tx, KEYS_LOG, rotated, at)
            self._sign_head(tx)  # this transaction's head, by the old key; nothing signs another before COMMIT
            head = tx.head
            assert head is not None
            rotation = sign_rotation(
                old_key, new_key.public_key(), counter=head.counter, head_hash=head.head_hash, at=head.at
            )
            tx.execute(f"INSERT INTO audit_key_rotations ({ROTATION_COLUMNS}) VALUES ({marks(6)})", rotation.values())
        return rotation

    def set_setting(self, log_id: str, value: str, event: AuditEvent, at: datetime) -> None:
        """Set one of the settings the log vouches for (`audit_settings`, each with a log of its own), with its
        event, in one transaction; the head of that commit vouches for the row as it is left."""
        at_text = format_rfc3339(at)
        with self._tx() as tx:
            tx.execute(
                "INSERT INTO audit_settings (log_id, value, at) VALUES (?, ?, ?)"
                " ON CONFLICT (log_id) DO UPDATE SET value = excluded.value, at = excluded.at",
                (log_id, value, at_text),
            )
            self._append(tx, log_id, event, at)
            _, state, identity = setting_vouch(log_id, value, at_text)
            tx.vouch(log_id, state, identity)

    def last_rotation(self) -> Rotation | None:
        row = self._row(f"SELECT {ROTATION_COLUMNS} FROM audit_key_rotations ORDER BY counter DESC LIMIT 1")
        return None if row is None else Rotation.from_row(row)

    def checkpoint_heads(self, at: datetime, log_ids: Sequence[str] | None = None) -> list[Checkpoint]:
        """Sign the current head of each log (all, or the named ones): done before every export.

        The heads are read without taking the logs' locks: a record appended meanwhile comes after a head
        that is still valid, and locking every log of a large fleet at once would exhaust the lock table.
        """
        if log_ids is not None and not log_ids:
            return []
        made: list[Checkpoint] = []
        with self._tx() as tx:
            for log_id, seq, head_hash in self._tips(tx, log_ids):
                made.append(self._checkpoint(tx, log_id, int(seq), head_hash, format_rfc3339(at)))
        return made

    # -- reading -----------------------------------------------------------------------------------------

    def audit_records(self, log_id: str | None = None) -> Iterator[AuditRecord]:
        query, params = _of_log(f"SELECT {AUDIT_RECORD_COLUMNS} FROM audit_records", log_id)
        for row in self._stream(self.dialect.sql(query + " ORDER BY log_id, seq"), params):
            yield audit_record_from_row(row)

    @contextmanager
    def audit_snapshot(self) -> Iterator[AuditSnapshot]:
        """Records, heads and checkpoints as of one moment: a verifier reading them while a worker commits
        would otherwise see heads newer than the records it read, or records newer than its heads."""
        with self._snapshot() as read:
            yield AuditSnapshot(read, self.dialect)

    def audit_heads(self) -> list[Head]:
        """Every signed head, oldest first (a verifier replays them all; only the newest is signature-checked)."""
        return [
            Head.from_row(tuple(row)) for row in self._rows(f"SELECT {HEAD_COLUMNS} FROM audit_heads ORDER BY counter")
        ]

    def heads_pending(self) -> bool:
        """True for a store upgraded from schema 2 that has not been written since: no head covers it yet."""
        return self._row("SELECT 1 FROM audit_heads_pending") is not None

    def newest_head(self) -> tuple[Head, dict[str, tuple[int, str]]] | None:
        """The newest head and the state it fixes (every log's last seq and hash), for a witness file.

        Read in one transaction so the state is exactly the head's; a pending store gets its first head.
        """
        with self._tx() as tx:
            # On SQLite this body may follow others of its batch (group commit) whose records no head covers
            # yet: their head is signed now, so the newest head fixes the state read below. Elsewhere a no-op.
            self._seal_commit(tx)
            uncovered = (
                tx.one("SELECT 1 FROM audit_heads_pending") is not None
                and tx.one("SELECT 1 FROM audit_heads") is None
                and tx.one("SELECT 1 FROM audit_records LIMIT 1") is not None
            ) or (tx.head is None and tx.one("SELECT 1 FROM audit_vouches_pending") is not None)
            if uncovered:
                # The first head of an upgraded store: appending nothing, it covers every log as it stands, and
                # vouches for every row (schema 8).
                tx.last_at = format_rfc3339(datetime.now(UTC))
                self._sign_head(tx)
            row = tx.one(f"SELECT {HEAD_COLUMNS} FROM audit_heads ORDER BY counter DESC LIMIT 1")
            if row is None:
                return None
            state = {str(log_id): (int(seq), str(h)) for log_id, seq, h in self._tips(tx)}
            return Head.from_row(tuple(row)), state

    def audit_checkpoints(self, log_id: str | None = None) -> list[Checkpoint]:
        query, params = _of_log(f"SELECT {CHECKPOINT_COLUMNS} FROM audit_checkpoints", log_id)
        return [checkpoint_from_row(row) for row in self._rows(query + " ORDER BY counter", params)]

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
