"""Walking hash chains: the per-record half of verification, streaming, with one record of look-ahead.

Per log it keeps the last verified (seq, hash), the hashes at the seqs someone asked for (a checkpoint's, a
head's), and at most one pending observation. Ciphertexts are dropped as soon as they are hashed. It
reports the first bad record of each log; after that point a log's records prove nothing, so they are
counted but not judged.

Some failures are only classified by the next record of the same log (or the end of the stream):

* a seq gap is a *missing* record unless the skipped seq arrives next, which makes it an *order* problem;
* a hash mismatch is a *changed stored hash* when the next record links to the recomputed hash, and a
  *modified record* when the next record links to the stored one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pollwarden.audit.chain import (
    GENESIS_HASH,
    MAX_SEQ,
    AuditRecord,
    RecordRow,
    hash_fields_unchecked,
    hash_message,
    is_hash_text,
    log_frame,
)
from pollwarden.audit.checkpoint import CHECKPOINTED_KINDS

__all__ = ["ALL_LOGS", "ChainWalk", "LogState", "Problem", "StoredRows", "record_fields", "short"]

# The log id of a problem about the whole store or export rather than one log (a key that is not the pinned
# one, heads deleted); it can never be a real log's id, which the store makes from operation ids and names.
ALL_LOGS = "*"

# How far around a bad record the walk looks for the seq (or log) whose hash the record matches, and
# how many trial hashes one verification may spend on such explanations in total.
_PROBE_WINDOW = 64
_PROBE_BUDGET = 200_000

Evidence = Callable[[str, int], tuple[str | None, str]]
"""(log_id, seq) -> the hash a checkpoint or head fixes at that seq and how to name it, or (None, "")."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding. `seq` is the first bad record's seq, or None when the problem is not about one record."""

    log_id: str
    seq: int | None
    what: str

    def __str__(self) -> str:
        return f"log {self.log_id}: {self.what}"

    def to_json(self) -> dict[str, Any]:
        return {"log_id": self.log_id, "seq": self.seq, "what": self.what}


def short(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text[:12] + "…" if len(text) > 12 else text


def _missing(expected: int, found: int, last: int) -> str:
    span = f"record {expected}" if found - expected == 1 else f"records {expected}–{found - 1}"
    if last == 0:
        return f"{span} missing: the log starts at seq {found}"
    return f"{span} missing: seq jumps from {last} to {found}"


@dataclass(slots=True)
class _Gap:
    expected: int
    last: int
    found: int

    def resolve(self, following: AuditRecord | None) -> tuple[int, str]:
        if following is not None and following.seq == self.expected:
            return (
                self.found,
                f"record {self.found} out of order: it is stored before record {self.expected} "
                "(records swapped or reordered)",
            )
        return (self.expected, _missing(self.expected, self.found, self.last))


@dataclass(slots=True)
class _Mismatch:
    seq: int
    stored: str
    computed: str

    def describe(self, links_to: str | None, evidence: str) -> tuple[int, str]:
        numbers = f"stored {short(self.stored)}, computed {short(self.computed)}"
        if links_to == self.computed:
            return (
                self.seq,
                f"record {self.seq}: stored hash changed ({numbers}; {evidence} matches the computed hash): "
                "the record's this_hash was modified",
            )
        if links_to == self.stored:
            return (
                self.seq,
                f"record {self.seq}: hash mismatch ({numbers}): the record was modified "
                "(its ciphertext or clear fields changed)",
            )
        return (
            self.seq,
            f"record {self.seq}: hash mismatch ({numbers}): the record or its stored hash was modified",
        )


@dataclass(slots=True)
class LogState:
    interest: frozenset[int]
    records: int = 0
    last_seq: int = 0
    last_hash: str = GENESIS_HASH
    failed: bool = False
    pending: _Gap | _Mismatch | None = None
    max_seq: int = 0
    tail: object = GENESIS_HASH  # the stored this_hash of the last record read, judged or not
    must_cover: int = 0  # the seq of the last record of a kind a checkpoint always follows (legacy logs)
    hashes: dict[int, str] = field(default_factory=lambda: {0: GENESIS_HASH})


@dataclass(frozen=True, slots=True)
class StoredRows:
    """Records as a database cursor yields them (`RecordRow`s, in stored order): `verify` walks them as
    they are, building an `AuditRecord` only for a record that is not plainly intact."""

    rows: Iterable[RecordRow]


def record_fields(record: AuditRecord) -> RecordRow:
    return (
        record.log_id,
        record.seq,
        record.at,
        record.kind,
        record.prev_hash,
        record.ciphertext,
        record.this_hash,
    )


def _malformed(record: AuditRecord) -> str | None:
    if not isinstance(record.log_id, str) or not record.log_id:
        return "malformed log_id"
    seq = record.seq
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= MAX_SEQ:
        return f"malformed seq {seq!r}"
    for name in ("at", "kind"):
        if not isinstance(getattr(record, name), str) or not getattr(record, name):
            return f"malformed {name}"
    if not isinstance(record.ciphertext, bytes | bytearray):
        return "malformed ciphertext (not bytes)"
    if not is_hash_text(record.prev_hash):
        return f"malformed prev_hash {short(record.prev_hash)!s} (expected 64 lowercase hex)"
    if not is_hash_text(record.this_hash):
        return f"malformed stored hash {short(record.this_hash)!s} (expected 64 lowercase hex)"
    return None


class ChainWalk:
    """The records of every log, read once in stored order; `finish` settles what is still pending."""

    def __init__(self, interest: Mapping[str, frozenset[int]], elsewhere: Mapping[str, int]) -> None:
        # `elsewhere`: logs known only from checkpoints or heads, with the highest seq they name, so a
        # record spliced from a log that is no longer stored can still be recognised.
        self.interest = interest
        self.elsewhere = elsewhere
        self.logs: dict[str, LogState] = {}
        self.problems: list[Problem] = []
        self.records = 0
        self.bytes_verified = 0
        # Shared by all probes of one verification, so a file full of broken logs cannot make it crawl.
        self.probe_budget = _PROBE_BUDGET

    def add(self, record: AuditRecord) -> None:
        self.add_rows((record_fields(record),))

    def add_rows(self, rows: Iterable[RecordRow]) -> None:
        """Walk records given as rows (`RecordRow`: what a database cursor yields), in stored order.

        The fast path takes an intact record that follows its log's last one: one SHA-256 call over the
        message `hash_message` builds in one join, the log's frame built once per run of its records, the
        previous hash kept as raw bytes. Anything unusual (a type, a gap, a mismatch, a log already failed or pending)
        becomes an `AuditRecord` and takes the careful path, which re-checks everything from the start.

        While a run of one log's records lasts, its state lives in local variables (attribute reads and
        writes on every record were a tenth of the walk); it is written back to its `LogState` when the run
        ends, before the careful path reads it, and when the rows end.
        """
        sha256 = hashlib.sha256
        message = hash_message
        checkpointed = CHECKPOINTED_KINDS
        logs = self.logs
        current: object = None
        state: LogState | None = None
        frame = b""
        prev_raw = b""
        last_seq = 0
        last_hash = GENESIS_HASH
        must_cover = 0
        interest: frozenset[int] = frozenset()
        hashes: dict[int, str] = {}
        sound = False  # the fast path is open for this log: it has a frame, nothing pending, nothing failed
        run = 0  # this log's records read since its state was last written back
        tail: object = None
        hashed = 0
        try:
            for row in rows:
                log_id, seq, at, kind, prev_hash, ciphertext, this_hash = row
                if state is None or log_id != current:
                    if state is not None:
                        self._write_back(state, run, tail, last_seq, last_hash, must_cover)
                        run = 0
                    state = logs.get(log_id)
                    if state is None:
                        state = LogState(interest=self.interest.get(log_id, frozenset()))
                        logs[log_id] = state
                    current = log_id
                    frame = log_frame(log_id) if type(log_id) is str and log_id else b""
                    last_seq, last_hash, must_cover = state.last_seq, state.last_hash, state.must_cover
                    interest, hashes = state.interest, state.hashes
                    sound = bool(frame) and state.pending is None and not state.failed
                    prev_raw = bytes.fromhex(last_hash)
                run += 1
                tail = this_hash
                if (
                    sound
                    and type(seq) is int
                    and seq == last_seq + 1
                    and prev_hash == last_hash
                    and type(at) is str
                    and at
                    and type(kind) is str
                    and kind
                    and type(ciphertext) is bytes
                ):
                    raw = sha256(message(prev_raw, frame, seq, at, kind, ciphertext)).digest()
                    computed = raw.hex()
                    if computed == this_hash:
                        hashed += len(ciphertext)
                        if kind in checkpointed:
                            must_cover = seq
                        last_seq = seq
                        last_hash = computed
                        prev_raw = raw
                        if seq in interest:
                            hashes[seq] = computed
                        continue
                self._write_back(state, run, tail, last_seq, last_hash, must_cover)
                run = 0
                record = AuditRecord(log_id, seq, at, kind, prev_hash, ciphertext, this_hash)
                self._add_carefully(record, log_id, state)
                last_seq, last_hash, must_cover = state.last_seq, state.last_hash, state.must_cover
                sound = bool(frame) and state.pending is None and not state.failed
                prev_raw = bytes.fromhex(last_hash)
        finally:
            if state is not None:
                self._write_back(state, run, tail, last_seq, last_hash, must_cover)
            self.bytes_verified += hashed

    def _write_back(
        self, state: LogState, run: int, tail: object, last_seq: int, last_hash: str, must_cover: int
    ) -> None:
        """What `add_rows` kept in local variables for a run of one log's records, into its state."""
        if run:
            state.records += run
            self.records += run
            state.tail = tail
        state.last_seq, state.last_hash, state.must_cover = last_seq, last_hash, must_cover

    def _add_carefully(self, record: AuditRecord, log_id: str, state: LogState) -> None:
        if isinstance(record.seq, int) and record.seq > state.max_seq:
            state.max_seq = record.seq
        if state.failed:
            return
        if state.pending is not None:
            self._resolve(log_id, state, record)
            return
        bad = _malformed(record)
        if bad is not None:
            seq = record.seq if isinstance(record.seq, int) and not isinstance(record.seq, bool) else None
            self._fail(log_id, state, seq, f"record after seq {state.last_seq}: {bad}")
            return
        expected = state.last_seq + 1
        if record.seq > expected:
            state.pending = _Gap(expected=expected, last=state.last_seq, found=record.seq)
            return
        if record.seq < expected:
            if record.seq == state.last_seq and record.this_hash == state.last_hash:
                what = f"record {record.seq} duplicated: it is stored twice in a row"
            else:
                what = f"record {record.seq} out of order: it is stored after record {state.last_seq}"
            self._fail(log_id, state, record.seq, what)
            return
        computed = hash_fields_unchecked(
            record.prev_hash, log_id, record.seq, record.at, record.kind, record.ciphertext
        )
        self.bytes_verified += len(record.ciphertext)
        if record.prev_hash != state.last_hash:
            self._fail(log_id, state, record.seq, self._broken_link(record, state, computed))
            return
        if computed != record.this_hash:
            # Every log's first record links to GENESIS_HASH, so a first record copied from another log links
            # fine; only its log id gives it away.
            origin = self._origin_elsewhere(record, own=False) if record.prev_hash == GENESIS_HASH else None
            if origin is not None:
                other, other_seq = origin
                self._fail(
                    log_id,
                    state,
                    record.seq,
                    f"record {record.seq}: spliced from log {other!r} (log id mismatch: its hash verifies as "
                    f"record {other_seq} of that log, not as record {record.seq} of {log_id!r})",
                )
                return
            state.pending = _Mismatch(seq=record.seq, stored=record.this_hash, computed=computed)
            return
        state.last_seq = record.seq
        state.last_hash = record.this_hash
        if record.kind in CHECKPOINTED_KINDS:
            state.must_cover = record.seq
        if record.seq in state.interest:
            state.hashes[record.seq] = record.this_hash

    def _fail(self, log_id: str, state: LogState, seq: int | None, what: str) -> None:
        state.failed = True
        state.pending = None
        self.problems.append(Problem(log_id, seq, what))

    def finish(self, evidence: Evidence) -> None:
        """Settle each log's pending observation; at a log's end, `evidence` (a checkpoint or head) decides."""
        for log_id, state in self.logs.items():
            if state.pending is not None:
                self._resolve(log_id, state, None, evidence)

    def _resolve(
        self, log_id: str, state: LogState, following: AuditRecord | None, evidence: Evidence | None = None
    ) -> None:
        pending = state.pending
        assert pending is not None
        if isinstance(pending, _Gap):
            seq, what = pending.resolve(following)
        else:
            links_to: str | None
            if following is not None:
                links_to = following.prev_hash if isinstance(following.prev_hash, str) else None
                evidence_text = f"record {following.seq}'s prev_hash"
            else:
                links_to, named = evidence(log_id, pending.seq) if evidence is not None else (None, "")
                evidence_text = named
            seq, what = pending.describe(links_to, evidence_text)
        self._fail(log_id, state, seq, what)

    def _broken_link(self, record: AuditRecord, state: LogState, computed: str) -> str:
        k = record.seq
        link = f"prev_hash link broken (expected {short(state.last_hash)}, found {short(record.prev_hash)})"
        if computed == record.this_hash:
            return (
                f"record {k}: {link}: the record is intact but does not follow record {k - 1}: "
                "it was inserted, or the log before it was rebuilt"
            )
        origin = self._origin_elsewhere(record, own=True)
        if origin is not None:
            other, other_seq = origin
            if other == record.log_id:
                return (
                    f"record {k}: out of order: its hash verifies as record {other_seq} of this log, not at "
                    f"seq {k}; {link}: records were removed, inserted or reordered and renumbered"
                )
            return (
                f"record {k}: spliced from log {other!r}: its hash verifies as record {other_seq} of that "
                f"log, not as record {k} of {record.log_id!r}; {link}"
            )
        return f"record {k}: {link} and hash mismatch: the record was replaced"

    def _origin_elsewhere(self, record: AuditRecord, *, own: bool) -> tuple[str, int] | None:
        """Find a (log, seq) under which the record's stored hash does verify; only runs on a failure."""
        candidates: list[tuple[str, range]] = []
        k = record.seq
        if own:
            candidates.append((record.log_id, range(max(1, k - _PROBE_WINDOW), k + _PROBE_WINDOW + 1)))
        others = set(self.logs) | set(self.elsewhere)
        others.discard(record.log_id)
        for other in sorted(others):
            seen = max(self.logs[other].max_seq, self.logs[other].last_seq) if other in self.logs else 0
            top = max(seen, self.elsewhere.get(other, 0), k) + _PROBE_WINDOW
            candidates.append((other, range(1, top + 1)))
        for log_id, seqs in candidates:
            for seq in seqs:
                if log_id == record.log_id and seq == k:
                    continue
                self.probe_budget -= 1
                if self.probe_budget < 0:
                    return None
                digest = hash_fields_unchecked(record.prev_hash, log_id, seq, record.at, record.kind, record.ciphertext)
                if digest == record.this_hash:
                    return log_id, seq
        return None
