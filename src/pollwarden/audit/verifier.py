"""Offline verification of audit logs: needs the records, the heads or checkpoints and a public key, never a secret.

`chains.py` walks each log's hash chain; `journal.py` replays the signed heads (one per committed
transaction, over every log); `kept.py` checks the lineage of signing keys and the heads kept elsewhere;
`vouch.py` compares the store's rows with what the heads vouched for. This module puts them together with the
per-log checkpoints of stores and exports written before heads existed, a checkpoint kept elsewhere (rollback),
a pinned key, and an export header's list of log sizes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from pollwarden.audit.chain import GENESIS_HASH, AuditRecord
from pollwarden.audit.chains import ALL_LOGS, ChainWalk, Problem, StoredRows, record_fields, short
from pollwarden.audit.checkpoint import Checkpoint, key_id_of, load_public_key_text
from pollwarden.audit.crypto import AuditKeyError
from pollwarden.audit.heads import Head
from pollwarden.audit.journal import (
    HeadFile,
    Journal,
    StoredHeads,
    compare_tips,
    replay,
)
from pollwarden.audit.kept import KeyChecks, key_id_text, plural
from pollwarden.audit.rotation import Lineage, Rotation, lineage
from pollwarden.audit.vouch import Vouch, compare_rows

__all__ = ["ALL_LOGS", "LogHead", "Problem", "VerifyReport", "verify"]


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
    heads: int = 0
    rows: int = 0
    """Rows compared with what the heads vouched for (a store's operations and settings; 0 for an export)."""
    unvouched: int = 0
    """Rows no head has vouched for yet: a store upgraded to schema 8 and not written since."""
    witnesses: int = 0
    """Heads kept elsewhere that were checked (the home's head file and every witness file)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "records": self.records,
            "logs": self.logs,
            "checkpoints": self.checkpoints,
            "heads": self.heads,
            "rows": self.rows,
            "rows_not_yet_vouched_for": self.unvouched,
            "witnesses": self.witnesses,
            "bytes_verified": self.bytes_verified,
            "problems": [problem.to_json() for problem in self.problems],
        }


def _verdict(what: str) -> str:
    """The word that leads a finding from `compare_tips`: what happened to the log."""
    if what.endswith("holds none"):
        return "deleted"
    return "rewritten" if "rewritten" in what else "truncated"


def _public(text: str) -> Ed25519PublicKey | None:
    try:
        return load_public_key_text(text, source="a rotation's key")
    except AuditKeyError:
        return None


class Evidence(TypedDict, total=False):
    """What `verify` checks the records against besides their checkpoints and key (each described there)."""

    trusted_checkpoint: Checkpoint | None
    pinned_key: Ed25519PublicKey | None
    expected_heads: Mapping[str, LogHead] | None
    heads: Sequence[Head] | StoredHeads | None
    witness: HeadFile | None
    witnesses: Sequence[HeadFile]
    rotations: Sequence[Rotation]
    rows: Iterable[Vouch] | None
    findings: Sequence[Problem]


class _Verifier(KeyChecks):
    def __init__(
        self, checkpoints: Sequence[Checkpoint], public_key: Ed25519PublicKey | None, evidence: Evidence
    ) -> None:
        pinned_key = evidence.get("pinned_key")
        trusted = evidence.get("trusted_checkpoint")
        heads = evidence.get("heads")
        witness = evidence.get("witness")
        witnesses = [*([witness] if witness is not None else []), *evidence.get("witnesses", ())]
        rotations = evidence.get("rotations", ())
        self.checkpoints = checkpoints
        # A pinned key replaces the one the log names as the root of trust: the keys it rotated to, and it alone
        # where there was no rotation, are the only ones trusted.
        self.claimed_key = public_key
        self.pinned_key = pinned_key
        self.pinned = pinned_key is not None
        root = pinned_key if pinned_key is not None else public_key
        self.rotations = sorted(rotations, key=lambda rotation: rotation.counter)
        # The key the newest head must be signed by: the last rotation's, or the root's when none happened.
        self.public_key = _public(self.rotations[-1].new_public) if self.rotations else root
        self.trusted = trusted
        self.expected_heads = evidence.get("expected_heads")
        self.witnesses = witnesses
        self.rows = evidence.get("rows")
        self.problems: list[Problem] = []
        # None: a source from before signed heads (an older export, a store not written since its upgrade).
        self.journal: Journal | None = None
        if heads is not None:
            snapshot_at = [kept.head.counter for kept in witnesses] + [rotation.counter for rotation in self.rotations]
            # Without rotations the newest head is checked in the replay; with them, once the lineage says which
            # key signs its counter (the rotation's own head is the old key's last).
            self.journal = replay(heads, None if self.rotations else self.public_key, snapshot_at)
        self.lineage: Lineage = lineage(self.rotations, root, self.journal.hashes if self.journal is not None else {})
        self.keys = self._trusted_keys()
        if self.rotations and self.journal is not None:
            self._check_newest_head(self.journal)
        self.valid = [cp for cp in checkpoints if self._signed(cp)]
        self.trusted_valid = trusted is not None and self._signed(trusted)
        interest: dict[str, set[int]] = self.journal.interest() if self.journal is not None else {}
        for cp in self.valid:
            interest.setdefault(cp.log_id, set()).add(cp.seq)
        if trusted is not None and self.trusted_valid:
            interest.setdefault(trusted.log_id, set()).add(trusted.seq)
        for kept in witnesses:
            for log_id, (seq, _) in (kept.logs or {}).items():
                interest.setdefault(log_id, set()).add(seq)
        elsewhere: dict[str, int] = {}
        for cp in checkpoints:
            if isinstance(cp.seq, int):
                elsewhere[cp.log_id] = max(elsewhere.get(cp.log_id, 0), cp.seq)
        if trusted is not None:
            elsewhere.setdefault(trusted.log_id, 0)
        if self.journal is not None:
            for log_id, (seq, _) in self.journal.state.items():
                elsewhere[log_id] = max(elsewhere.get(log_id, 0), seq)
        self.walk = ChainWalk({log_id: frozenset(seqs) for log_id, seqs in interest.items()}, elsewhere)

    def _evidence(self, log_id: str, seq: int) -> tuple[str | None, str]:
        """What a checkpoint or head fixes at the end of a log, to classify a mismatch of its last record."""
        for cp in self.valid:
            if cp.log_id == log_id and cp.seq == seq:
                return cp.head_hash, f"checkpoint #{cp.counter}"
        if self.trusted is not None and self.trusted_valid:
            cp = self.trusted
            if cp.log_id == log_id and cp.seq == seq:
                return cp.head_hash, f"checkpoint #{cp.counter} kept elsewhere"
        if self.journal is not None and self.journal.newest is not None:
            tip = self.journal.state.get(log_id)
            if tip is not None and tip[0] == seq:
                return tip[1], f"head #{self.journal.newest.counter}"
        return None, ""

    def finish(self) -> VerifyReport:
        self.walk.finish(self._evidence)
        if self.public_key is None:
            self._no_public_key()
        else:
            if self.pinned:
                self._check_claimed_key(self.public_key)
            self._check_lineage()
            self._check_checkpoints(self.public_key)
            if self.trusted is not None:
                self._check_trusted(self.trusted, self.public_key)
        if self.journal is not None:
            self._check_journal(self.journal)
        else:
            self._check_checkpointed_kinds()
        for kept in self.witnesses:
            self._check_witness(kept)
        if self.expected_heads is not None:
            self._check_heads(self.expected_heads)
        checked, unvouched = self._check_rows()
        problems = [*self.walk.problems, *self.problems]
        log_ids = set(self.walk.logs) | {cp.log_id for cp in self.checkpoints}
        if self.journal is not None:
            log_ids |= set(self.journal.state)
        problems.sort(key=lambda p: (p.log_id, p.seq is None, p.seq if p.seq is not None else 0))
        return VerifyReport(
            ok=not problems,
            records=self.walk.records,
            logs=len(log_ids),
            checkpoints=len(self.checkpoints),
            bytes_verified=self.walk.bytes_verified,
            problems=tuple(problems),
            heads=self.journal.count if self.journal is not None else 0,
            rows=checked,
            unvouched=unvouched,
            witnesses=len(self.witnesses),
        )

    # -- rows and keys -------------------------------------------------------------------------------------

    def _check_rows(self) -> tuple[int, int]:
        """The stored rows against what the heads vouched for; (rows read, rows not yet vouched for)."""
        if self.rows is None:
            return 0, 0
        journal = self.journal
        found = compare_rows(
            self.rows,
            journal.vouched if journal is not None else {},
            journal.vouching_since if journal is not None else None,
        )
        self.problems.extend(Problem(log_id, None, what) for log_id, what in found.problems or ())
        return found.rows, found.unvouched

    # -- signed heads ------------------------------------------------------------------------------------

    def _check_journal(self, journal: Journal) -> None:
        """Every log the newest head fixes is stored whole, and every stored record is under a head."""
        self.problems.extend(Problem(ALL_LOGS, f.seq, f.what) for f in journal.findings)
        newest = journal.newest
        label = f"the newest signed head (#{newest.counter})" if newest is not None else ""
        logs = self.walk.logs
        for log_id, seq, what in compare_tips(journal.state, logs):
            self.problems.append(Problem(log_id, seq, f"{_verdict(what)}: {label} {what}"))
        for log_id, state in sorted(logs.items()):
            if state.failed:
                continue
            covered = journal.state.get(log_id, (0, GENESIS_HASH))[0]
            if state.last_seq <= covered:
                continue
            if newest is None:
                what = (
                    f"{plural(state.last_seq, 'record')} and no signed head covers them: the store's heads were "
                    "deleted (or the records were written without pollwarden)"
                )
            else:
                span = (
                    f"record {state.last_seq}"
                    if state.last_seq == covered + 1
                    else (f"records {covered + 1}–{state.last_seq}")
                )
                what = (
                    f"{span} not covered by any signed head (the newest is #{newest.counter}): heads after it were "
                    "deleted, or the records were written without pollwarden"
                )
            self.problems.append(Problem(log_id, covered + 1, what))

    def _check_checkpointed_kinds(self) -> None:
        """Before heads, a record of these kinds was always checkpointed in its own transaction."""
        covered: dict[str, int] = {}
        for cp in self.valid:
            covered[cp.log_id] = max(covered.get(cp.log_id, 0), cp.seq)
        for log_id, state in sorted(self.walk.logs.items()):
            if state.failed or state.must_cover == 0 or covered.get(log_id, 0) >= state.must_cover:
                continue
            self.problems.append(
                Problem(
                    log_id,
                    state.must_cover,
                    f"record {state.must_cover} is of a kind that is always checkpointed, but no checkpoint "
                    "covers it: the log's checkpoints were deleted (and its tail may be cut)",
                )
            )

    # -- per-log checkpoints (stores and exports from before signed heads) -------------------------------

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
        if claimed is None or key_id_of(claimed) == key_id_of(pinned) or key_id_of(claimed) in self.keys:
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
            state = self.walk.logs.get(log_id)
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
                    f"the last record's hash ({short(tail)}) is not the head the export header lists "
                    f"({short(head.head_hash)}): the log was rewritten after the export was written"
                )
            else:
                continue
            self.problems.append(Problem(log_id, seq, what))
        present = set(self.walk.logs) | {cp.log_id for cp in self.checkpoints}
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
                f"{label}: signed by key {key_id_text(cp.key_id)}, which is not the pinned key {expected}: the log "
                "was re-signed with another key, or comes from another installation"
            )
        if cp.key_id != expected:
            return (
                f"{label}: bad signature: signed by key {short(cp.key_id)}, but the verifying public key is "
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
        state = self.walk.logs.get(log_id)
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
                    f"(checkpoint {short(cp.head_hash)}, log {short(actual)}): the log was rewritten after "
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
        state = self.walk.logs.get(trusted.log_id)
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
                    f"record {trusted.seq} differs from it (checkpoint {short(trusted.head_hash)}, log {short(actual)})"
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
    records: Iterable[AuditRecord] | StoredRows,
    checkpoints: Sequence[Checkpoint],
    public_key: Ed25519PublicKey | None,
    **evidence: Unpack[Evidence],
) -> VerifyReport:
    """Check hash chains, signed heads, checkpoint signatures, truncation and rollback, with no decryption key.

    `records` are `AuditRecord`s or a store's rows (`StoredRows`, read without building records); they may
    interleave logs, but each log's records must come in the order they are stored (for a
    database, ORDER BY seq per log is right: a renumbered record then fails its own hash).
    `heads` are the store's or export's signed heads in counter order (`StoredHeads`: a store's rows, read
    without building a head per commit); None for a source from before heads
    (then the per-log `checkpoints` are all there is, and a record of a kind that was always checkpointed
    must have one). With heads, every record must be under the newest head and every log it fixes stored.
    `witness` is a head kept elsewhere: the records must extend it (rollback otherwise); `witnesses` are more of
    them (every head file of a witness location, whatever key signed it), each checked the same way.
    `rotations` are the store's key rotations (`audit/rotation.py`): the newest head must be signed by the key
    they lead to, and a kept head by a key of theirs in its time.
    `rows` are the store's vouched rows as they stand (`store/vouching.py`): each must be what the heads last
    vouched for under its log (None: not checked, as for an export).
    `findings` are problems found before verifying (a witness that could not be read), reported with the rest.
    `trusted_checkpoint` is an older-style checkpoint kept outside the log (the file `audit export` wrote
    beside it); it also pins the public key, since an attacker who rewrites an export can re-sign it.
    `pinned_key` is the only key trusted when given: every signature is checked against it, and a
    `public_key` (the key the store or export names) that differs is a problem of its own (log ``"*"``).
    `expected_heads` is what an export's header lists per log; the records must match it.
    """
    verifier = _Verifier(checkpoints, public_key, evidence)
    verifier.problems.extend(evidence.get("findings", ()))
    verifier.walk.add_rows(records.rows if isinstance(records, StoredRows) else map(record_fields, records))
    return verifier.finish()
