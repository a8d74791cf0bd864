"""Offline verification of audit logs: needs the records, the checkpoints and a public key, never a secret.

The verifier streams: per log it keeps the last verified (seq, hash), the hashes at sequence numbers that
some checkpoint names, and at most one pending observation. Ciphertexts are dropped as soon as they are
hashed. It reports the first bad record of each log; after that point a log's records prove nothing, so
they are counted but not judged.

Some failures are only classified by the next record of the same log (or the end of the stream):

* a seq gap is a *missing* record unless the skipped seq arrives next, which makes it an *order* problem;
* a hash mismatch is a *changed stored hash* when the next record links to the recomputed hash, and a
  *modified record* when the next record links to the stored one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from pollwarden.audit.chain import GENESIS_HASH, MAX_SEQ, AuditRecord, hash_fields_unchecked, is_hash_text
from pollwarden.audit.checkpoint import Checkpoint, checkpoint_valid, key_id_of

__all__ = ["ALL_LOGS", "LogHead", "Problem", "VerifyReport", "verify"]

# The log id of a problem about the whole store or export rather than one log (a key that is not the pinned
# one); it can never be a real log's id, which the store makes from operation ids and names.
ALL_LOGS = "*"

# How far around a bad record the verifier looks for the seq (or log) whose hash the record matches, and
# how many trial hashes one verification may spend on such explanations in total.
_PROBE_WINDOW = 64
_PROBE_BUDGET = 200_000


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


@dataclass(frozen=True, slots=True)
class LogHead:
    """What an export's header says one log holds: how many records, and the hash of the last one."""

    records: int
    head_hash: str


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """`records` counts every record read; `bytes_verified` only the ciphertext bytes actually hashed."""

    ok: bool
    records: int
    logs: int
    checkpoints: int
    bytes_verified: int
    problems: tuple[Problem, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "records": self.records,
            "logs": self.logs,
            "checkpoints": self.checkpoints,
            "bytes_verified": self.bytes_verified,
            "problems": [problem.to_json() for problem in self.problems],
        }


def _key_id_text(value: object) -> str:
    """A key id read from a file is shown only when it has the shape of one (16 hex characters)."""
    if isinstance(value, str) and len(value) == 16 and all(c in "0123456789abcdef" for c in value):
        return value
    return f"{_short(value)!r} (malformed)"


def _short(value: object) -> str:
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
        numbers = f"stored {_short(self.stored)}, computed {_short(self.computed)}"
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
class _Log:
    interest: frozenset[int]
    records: int = 0
    last_seq: int = 0
    last_hash: str = GENESIS_HASH
    failed: bool = False
    pending: _Gap | _Mismatch | None = None
    max_seq: int = 0
    tail: object = GENESIS_HASH  # the stored this_hash of the last record read, judged or not
    hashes: dict[int, str] = field(default_factory=lambda: {0: GENESIS_HASH})


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
        return f"malformed prev_hash {_short(record.prev_hash)!s} (expected 64 lowercase hex)"
    if not is_hash_text(record.this_hash):
        return f"malformed stored hash {_short(record.this_hash)!s} (expected 64 lowercase hex)"
    return None


class _Verifier:
    def __init__(
        self,
        checkpoints: Sequence[Checkpoint],
        public_key: Ed25519PublicKey | None,
        trusted: Checkpoint | None,
        pinned_key: Ed25519PublicKey | None = None,
        expected_heads: Mapping[str, LogHead] | None = None,
    ) -> None:
        self.checkpoints = checkpoints
        # A pinned key replaces the one the log names: every signature is checked against it alone.
        self.claimed_key = public_key
        self.pinned = pinned_key is not None
        if pinned_key is not None:
            public_key = pinned_key
        self.public_key = public_key
        self.trusted = trusted
        self.expected_heads = expected_heads
        self.problems: list[Problem] = []
        self.logs: dict[str, _Log] = {}
        self.records = 0
        self.bytes_verified = 0
        # Shared by all probes of one verification, so a file full of broken logs cannot make it crawl.
        self.probe_budget = _PROBE_BUDGET
        self.valid: list[Checkpoint] = []
        if public_key is not None:
            self.valid = [cp for cp in checkpoints if checkpoint_valid(cp, public_key)]
        self.trusted_valid = trusted is not None and public_key is not None and checkpoint_valid(trusted, public_key)
        interest: dict[str, set[int]] = {}
        for cp in self.valid:
            interest.setdefault(cp.log_id, set()).add(cp.seq)
        if trusted is not None and self.trusted_valid:
            interest.setdefault(trusted.log_id, set()).add(trusted.seq)
        self.interest = {log_id: frozenset(seqs) for log_id, seqs in interest.items()}
        self.cp_max_seq: dict[str, int] = {}
        for cp in checkpoints:
            if isinstance(cp.seq, int):
                self.cp_max_seq[cp.log_id] = max(self.cp_max_seq.get(cp.log_id, 0), cp.seq)

    # -- records ---------------------------------------------------------------------------------------

    def add(self, record: AuditRecord) -> None:
        self.records += 1
        log_id = record.log_id
        state = self.logs.get(log_id)
        if state is None:
            state = _Log(interest=self.interest.get(log_id, frozenset()))
            self.logs[log_id] = state
        state.records += 1
        state.tail = record.this_hash
        if state.pending is None and not state.failed:
            # Fast path for the common case, an intact record; anything unusual takes the careful path,
            # which re-checks everything from the start.
            seq = record.seq
            at = record.at
            kind = record.kind
            ciphertext = record.ciphertext
            if (
                type(seq) is int
                and seq == state.last_seq + 1
                and record.prev_hash == state.last_hash
                and type(at) is str
                and at
                and type(kind) is str
                and kind
                and type(ciphertext) is bytes
            ):
                computed = hash_fields_unchecked(state.last_hash, log_id, seq, at, kind, ciphertext)
                if computed == record.this_hash:
                    self.bytes_verified += len(ciphertext)
                    state.last_seq = seq
                    state.last_hash = computed
                    if seq in state.interest:
                        state.hashes[seq] = computed
                    return
        self._add_carefully(record, log_id, state)

    def _add_carefully(self, record: AuditRecord, log_id: str, state: _Log) -> None:
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
        if record.seq in state.interest:
            state.hashes[record.seq] = record.this_hash

    def _fail(self, log_id: str, state: _Log, seq: int | None, what: str) -> None:
        state.failed = True
        state.pending = None
        self.problems.append(Problem(log_id, seq, what))

    def _resolve(self, log_id: str, state: _Log, following: AuditRecord | None) -> None:
        pending = state.pending
        assert pending is not None
        if isinstance(pending, _Gap):
            seq, what = pending.resolve(following)
        else:
            links_to: str | None
            if following is not None:
                links_to = following.prev_hash if isinstance(following.prev_hash, str) else None
                evidence = f"record {following.seq}'s prev_hash"
            else:
                links_to, evidence = self._checkpoint_head(log_id, pending.seq)
            seq, what = pending.describe(links_to, evidence)
        self._fail(log_id, state, seq, what)

    def _checkpoint_head(self, log_id: str, seq: int) -> tuple[str | None, str]:
        for cp in self.valid:
            if cp.log_id == log_id and cp.seq == seq:
                return cp.head_hash, f"checkpoint #{cp.counter}"
        if self.trusted is not None and self.trusted_valid:
            cp = self.trusted
            if cp.log_id == log_id and cp.seq == seq:
                return cp.head_hash, f"checkpoint #{cp.counter} kept elsewhere"
        return None, ""

    def _broken_link(self, record: AuditRecord, state: _Log, computed: str) -> str:
        k = record.seq
        link = f"prev_hash link broken (expected {_short(state.last_hash)}, found {_short(record.prev_hash)})"
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
        others = set(self.logs) | set(self.cp_max_seq)
        if self.trusted is not None:
            others.add(self.trusted.log_id)
        others.discard(record.log_id)
        for other in sorted(others):
            seen = max(self.logs[other].max_seq, self.logs[other].last_seq) if other in self.logs else 0
            top = max(seen, self.cp_max_seq.get(other, 0), k) + _PROBE_WINDOW
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

    # -- checkpoints -----------------------------------------------------------------------------------

    def finish(self) -> VerifyReport:
        for log_id, state in self.logs.items():
            if state.pending is not None:
                self._resolve(log_id, state, None)
        if self.public_key is None:
            self._no_public_key()
        else:
            if self.pinned:
                self._check_claimed_key(self.public_key)
            self._check_checkpoints(self.public_key)
            if self.trusted is not None:
                self._check_trusted(self.trusted, self.public_key)
        if self.expected_heads is not None:
            self._check_heads(self.expected_heads)
        log_ids = set(self.logs) | {cp.log_id for cp in self.checkpoints}
        problems = sorted(self.problems, key=lambda p: (p.log_id, p.seq is None, p.seq if p.seq is not None else 0))
        return VerifyReport(
            ok=not problems,
            records=self.records,
            logs=len(log_ids),
            checkpoints=len(self.checkpoints),
            bytes_verified=self.bytes_verified,
            problems=tuple(problems),
        )

    def _no_public_key(self) -> None:
        counts: dict[str, int] = {}
        for cp in self.checkpoints:
            counts[cp.log_id] = counts.get(cp.log_id, 0) + 1
        for log_id, count in sorted(counts.items()):
            self.problems.append(
                Problem(
                    log_id,
                    None,
                    f"{count} checkpoint(s) cannot be checked: no public key was given, so truncation and "
                    "rollback go undetected; pass the signing public key (keys/signing.pub or the export "
                    "header)",
                )
            )
        if self.trusted is not None:
            self.problems.append(
                Problem(
                    self.trusted.log_id,
                    None,
                    f"the checkpoint #{self.trusted.counter} kept elsewhere cannot be checked: no public key "
                    "was given; pass the signing public key",
                )
            )

    def _check_claimed_key(self, pinned: Ed25519PublicKey) -> None:
        claimed = self.claimed_key
        if claimed is None or key_id_of(claimed) == key_id_of(pinned):
            return
        self.problems.append(
            Problem(
                ALL_LOGS,
                None,
                f"key {key_id_of(claimed)} is not the pinned key {key_id_of(pinned)}: the log names another "
                "signing key (replaced, or the log comes from another installation); only the pinned key is trusted",
            )
        )

    def _check_heads(self, heads: Mapping[str, LogHead]) -> None:
        """The body against the sizes and heads the export header lists (a log with a problem already is left)."""
        troubled = {p.log_id for p in self.problems}
        for log_id, head in heads.items():
            if log_id in troubled:
                continue
            state = self.logs.get(log_id)
            held = state.records if state is not None else 0
            tail = state.tail if state is not None else GENESIS_HASH
            listed = f"the export header lists {head.records} record{'s' if head.records != 1 else ''}"
            if held < head.records:
                seq: int | None = held + 1
                if held == 0:
                    what = f"{listed} for this log but the file holds none of them: the log's lines were removed"
                else:
                    span = (
                        f"record {head.records}" if held + 1 == head.records else f"records {held + 1}–{head.records}"
                    )
                    what = f"cut short: {listed} but the file holds {held} ({span} removed from the end)"
            elif held > head.records:
                seq = head.records + 1
                what = f"{listed} but the file holds {held}: records were added after the export was written"
            elif tail != head.head_hash:
                seq = held or None
                what = (
                    f"the last record's hash ({_short(tail)}) is not the head the export header lists "
                    f"({_short(head.head_hash)}): the log was rewritten after the export was written"
                )
            else:
                continue
            self.problems.append(Problem(log_id, seq, what))
        present = set(self.logs) | {cp.log_id for cp in self.checkpoints}
        for log_id in sorted(present - set(heads)):
            self.problems.append(
                Problem(
                    log_id,
                    None,
                    f"this log is not in the export header (which lists {len(heads)} logs): it was added to the file",
                )
            )

    def _bad_signature(self, cp: Checkpoint, public_key: Ed25519PublicKey, label: str) -> str:
        expected = key_id_of(public_key)
        if self.pinned and cp.key_id != expected:
            return (
                f"{label}: signed by key {_key_id_text(cp.key_id)}, which is not the pinned key {expected}: the log "
                "was re-signed with another key, or comes from another installation"
            )
        if cp.key_id != expected:
            return (
                f"{label}: bad signature: signed by key {_short(cp.key_id)}, but the verifying public key is "
                f"{expected}: the log's key was replaced, or the wrong public key was given"
            )
        return f"{label}: bad signature: it does not verify with key {expected}: the checkpoint was altered or forged"

    def _check_checkpoints(self, public_key: Ed25519PublicKey) -> None:
        valid_ids = {id(cp) for cp in self.valid}
        for cp in self.checkpoints:
            if id(cp) not in valid_ids:
                seq = cp.seq if isinstance(cp.seq, int) and not isinstance(cp.seq, bool) else None
                label = f"checkpoint #{cp.counter} (seq {cp.seq})"
                self.problems.append(Problem(cp.log_id, seq, self._bad_signature(cp, public_key, label)))
        by_log: dict[str, list[Checkpoint]] = {}
        for cp in self.valid:
            by_log.setdefault(cp.log_id, []).append(cp)
        for log_id, cps in sorted(by_log.items()):
            self._check_log_checkpoints(log_id, cps)

    def _check_log_checkpoints(self, log_id: str, cps: list[Checkpoint]) -> None:
        state = self.logs.get(log_id)
        last = state.last_seq if state is not None else 0
        failed = state is not None and state.failed
        beyond = [cp for cp in cps if cp.seq > last]
        if beyond and not failed:
            top = max(beyond, key=lambda cp: (cp.seq, cp.counter))
            cut = f"records {last + 1}–{top.seq}" if top.seq > last + 1 else f"record {top.seq}"
            ends = f"ends at seq {last}" if last else "has no records"
            what = (
                f"truncated: checkpoint #{top.counter} covers seq {top.seq} but the log {ends} ({cut} cut from the end)"
            )
            self.problems.append(Problem(log_id, last + 1, what))
        hashes = state.hashes if state is not None else {0: GENESIS_HASH}
        for cp in sorted(cps, key=lambda cp: (cp.seq, cp.counter)):
            actual = hashes.get(cp.seq) if cp.seq <= last else None
            if actual is not None and actual != cp.head_hash:
                what = (
                    f"checkpoint #{cp.counter} (seq {cp.seq}): head_hash differs from record {cp.seq} "
                    f"(checkpoint {_short(cp.head_hash)}, log {_short(actual)}): the log was rewritten after "
                    "the checkpoint was signed"
                )
                self.problems.append(Problem(log_id, cp.seq, what))
                return

    def _check_trusted(self, trusted: Checkpoint, public_key: Ed25519PublicKey) -> None:
        label = f"the checkpoint #{trusted.counter} kept elsewhere"
        if not self.trusted_valid:
            self.problems.append(Problem(trusted.log_id, None, self._bad_signature(trusted, public_key, label)))
            return
        older: list[str] = []
        differs: str | None = None
        seq: int | None = None
        newest = max((cp.counter for cp in self.valid), default=None)
        if newest is None:
            older.append("the log has no valid checkpoint")
        elif trusted.counter > newest:
            older.append(f"the newest checkpoint in the log is #{newest}")
        state = self.logs.get(trusted.log_id)
        last = state.last_seq if state is not None else 0
        failed = state is not None and state.failed
        if trusted.seq > last and not failed:
            ends = f"the log ends at seq {last}" if last else "the log has no records"
            older.append(f"it covers seq {trusted.seq} but {ends}")
            seq = last + 1
        elif trusted.seq <= last:
            actual = (state.hashes if state is not None else {0: GENESIS_HASH}).get(trusted.seq)
            if actual is not None and actual != trusted.head_hash:
                differs = (
                    f"record {trusted.seq} differs from it (checkpoint {_short(trusted.head_hash)}, "
                    f"log {_short(actual)})"
                )
                seq = trusted.seq
        if older:
            headline = f"rollback: the log is older than checkpoint #{trusted.counter} kept elsewhere"
            reasons = [*older, differs] if differs else older
        elif differs:
            headline = f"rollback: the log does not match checkpoint #{trusted.counter} kept elsewhere"
            reasons = [differs]
        else:
            return
        self.problems.append(Problem(trusted.log_id, seq, f"{headline} ({'; '.join(reasons)})"))


def verify(
    records: Iterable[AuditRecord],
    checkpoints: Sequence[Checkpoint],
    public_key: Ed25519PublicKey | None,
    *,
    trusted_checkpoint: Checkpoint | None = None,
    pinned_key: Ed25519PublicKey | None = None,
    expected_heads: Mapping[str, LogHead] | None = None,
) -> VerifyReport:
    """Check hash chains, checkpoint signatures, truncation and rollback, with no decryption key.

    `records` may interleave logs, but each log's records must come in the order they are stored (for a
    database, ORDER BY seq per log is right: a renumbered record then fails its own hash).
    `trusted_checkpoint` is a checkpoint kept outside the log (the file `audit export` writes beside it);
    it also pins the public key, since an attacker who rewrites an export can re-sign it with a new key.
    `pinned_key` is the only key trusted when given: every signature is checked against it, and a
    `public_key` (the key the store or export names) that differs is a problem of its own (log ``"*"``).
    `expected_heads` is what a version 2 export's header lists per log; the records must match it.
    """
    verifier = _Verifier(checkpoints, public_key, trusted_checkpoint, pinned_key, expected_heads)
    for record in records:
        verifier.add(record)
    return verifier.finish()
