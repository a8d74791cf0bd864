"""Replaying signed heads into the state they commit to, and what a head kept elsewhere proves.

The verifier (`verifier.py`) replays the heads before it reads a single record, so it knows which seq of
each log it must remember (the last one every head fixes, and the ones a witness head fixes), and then
compares that state with the logs it streamed. Only the newest head's signature is checked, and a witness
head's: the chain from head 1 to the newest fixes every earlier head's content, so a signature per head
would cost one Ed25519 verification per commit and prove nothing more.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from pollwarden.audit.chain import GENESIS_HASH
from pollwarden.audit.chains import LogState
from pollwarden.audit.checkpoint import key_id_of
from pollwarden.audit.heads import DIGEST_ERRORS, Head, head_hash_ok, head_message, head_valid, parse_changes
from pollwarden.audit.vouch import Vouched, parse_vouches

__all__ = ["HeadFile", "HeadRow", "Journal", "LogTip", "StoredHeads", "replay"]

LogTip = tuple[int, str]
"""A log's last seq and that record's this_hash."""


@dataclass(frozen=True, slots=True)
class HeadFile:
    """A head kept elsewhere (a witness's copy), with the state it fixes when the file lists it.

    `logs` is not covered by the signature: it lets a verifier name the logs a rolled-back store lacks, and
    is itself checked against the store's heads whenever the store still holds that head.
    """

    head: Head
    logs: Mapping[str, LogTip] | None = None
    source: str | None = None
    """Where it was read (a witness's file or URL), for the findings to name; None: "kept elsewhere"."""

    @property
    def label(self) -> str:
        return f"the head #{self.head.counter} kept {'elsewhere' if self.source is None else 'in ' + self.source}"


@dataclass(frozen=True, slots=True)
class Finding:
    """What replaying found: `log_id` None is about the heads as a whole."""

    log_id: str | None
    seq: int | None
    what: str


def _short(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text[:12] + "…" if len(text) > 12 else text


@dataclass(slots=True)
class Journal:
    """The state the heads replay to, the newest head, and what was wrong with them."""

    state: dict[str, LogTip] = field(default_factory=dict)
    newest: Head | None = None
    count: int = 0
    findings: list[Finding] = field(default_factory=list)
    snapshots: dict[int, dict[str, LogTip]] = field(default_factory=dict)
    """The state at each counter asked for (a witness head's), as the store's heads replay it."""
    hashes: dict[int, str] = field(default_factory=dict)
    """The hash of each replayed head at a counter asked for, for comparing with a head kept elsewhere."""
    broken: bool = False
    vouched: dict[str, Vouched] = field(default_factory=dict)
    """Per log, what the heads last vouched for its row (`audit/vouch.py`)."""
    vouching_since: int | None = None
    """The counter of the first head that vouches for rows (schema 8): from it on, every row is vouched for."""

    def interest(self) -> dict[str, set[int]]:
        """The seqs of each log whose hash the verifier must keep: the final state and every snapshot."""
        wanted: dict[str, set[int]] = {}
        for tips in (self.state, *self.snapshots.values()):
            for log_id, (seq, _) in tips.items():
                wanted.setdefault(log_id, set()).add(seq)
        return wanted


HeadRow = Sequence[Any]
"""A head as a database hands it over for replay: counter, prev_hash, changes, logs, records, at, head_hash and
vouches (`Head.replayed`), every value unchecked."""


@dataclass(frozen=True, slots=True)
class StoredHeads:
    """Heads to replay as rows (`HeadRow`s, in counter order), and the newest head whole.

    Only the newest head's signature is checked, so only it is read with its key id and signature: a store
    hands over the rest as the eight columns the chain needs, without building a `Head` per commit. `newest`
    must be the last row's head, read in the same snapshot; `replay` checks that it is.
    """

    rows: Iterable[HeadRow]
    newest: Head | None

    @classmethod
    def of(cls, heads: Sequence[Head]) -> StoredHeads:
        """Heads already built (an export's), in counter order."""
        return cls((head.replayed() for head in heads), heads[-1] if heads else None)


def replay(
    heads: Iterable[Head] | StoredHeads, public_key: Ed25519PublicKey | None, snapshot_at: Iterable[int] = ()
) -> Journal:
    """Replay `heads` (in counter order, as stored) into the state of every log.

    Every head must follow the one before it: counter + 1, prev_hash the previous head_hash, its own
    head_hash right, its totals what its changes replay to, and no log moved backwards. The first break is
    reported and the replay goes on with the later heads' changes, so a broken chain does not also make
    every log look uncovered. The newest head's signature is checked with `public_key`.
    """
    stored = heads if isinstance(heads, StoredHeads) else StoredHeads.of(list(heads))
    journal = Journal()
    wanted = set(snapshot_at)
    expected_prev = GENESIS_HASH
    # True while expected_prev is known to be 64 lowercase hex (GENESIS_HASH, or a head_hash that equalled
    # the hash computed from its head): then a head that links to it and whose own hash is right passes
    # every check of `_link_problem`, which only runs for the others. `prev_raw` is then its raw bytes.
    prev_sound = True
    prev_raw = bytes(32)
    total = 0
    count = 0
    last: HeadRow | None = None
    state = journal.state
    hashes = journal.hashes
    sha256 = hashlib.sha256
    vouched = journal.vouched
    for row in stored.rows:
        counter, prev_hash, changes, logs, records, at, head_hash, vouches = row
        count += 1
        last = row
        problem: str | None = None
        raw = b""
        if prev_sound and counter == count and prev_hash == expected_prev:
            try:
                raw = sha256(head_message(counter, prev_raw, changes, logs, records, at, vouches)).digest()
            except DIGEST_ERRORS:
                raw = b""
        if not raw or raw.hex() != head_hash:
            problem = _link_problem(row, count, expected_prev)
            raw = bytes.fromhex(head_hash) if problem is None else b""
        prev_sound = problem is None
        prev_raw = raw
        parsed = None
        try:  # after a break too: the later heads' logs stay covered, so one deleted head is one finding
            parsed = parse_changes(changes)
        except (ValueError, TypeError) as exc:
            if problem is None:
                problem = f"head #{counter} is malformed: {exc}"
        if parsed is not None:
            for log_id, seq, this_hash in parsed:
                tip = state.get(log_id)
                before = 0 if tip is None else tip[0]
                if seq <= before and problem is None:
                    problem = (
                        f"head #{counter} moves log {log_id!r} back from seq {before} to {seq}: "
                        "the heads were rewritten"
                    )
                total += seq - before
                state[log_id] = (seq, this_hash)
            if problem is None and (logs != len(state) or records != total):
                problem = (
                    f"head #{counter} claims {logs} logs and {records} records, but the heads up to "
                    f"it replay to {len(state)} logs and {total} records: the heads were rewritten"
                )
        if vouches and vouches != "[]":  # most heads of a store vouch for no row (appends only): nothing to parse
            try:
                for log_id, row_state, identity in parse_vouches(vouches):
                    known = vouched.get(log_id)
                    if known is None:
                        known = vouched[log_id] = Vouched(row_state, counter)
                    known.state, known.state_at = row_state, counter
                    if identity is not None:
                        known.identity, known.identity_at = identity, counter
            except (ValueError, TypeError) as exc:
                if problem is None:
                    problem = f"head #{counter} is malformed: {exc}"
        if vouches and journal.vouching_since is None:
            journal.vouching_since = counter
        if problem is not None and not journal.broken:
            journal.broken = True
            journal.findings.append(Finding(None, None, problem))
        if isinstance(head_hash, str):
            expected_prev = head_hash
        if counter in wanted:
            hashes[counter] = head_hash
            journal.snapshots[counter] = dict(state)
    journal.count = count
    newest = stored.newest
    replayed = tuple(last) if last is not None else None
    if replayed != (newest.replayed() if newest is not None else None):
        # Both come from one snapshot, so this is a store handing over two different histories at once.
        what = "the newest head read whole is not the last head replayed: the heads changed while they were read"
        journal.findings.append(Finding(None, None, what))
        newest = None
    journal.newest = newest
    if newest is not None and public_key is not None and not head_valid(newest, public_key):
        label = f"the newest head (#{newest.counter})"
        journal.findings.append(Finding(None, None, bad_signature(newest, public_key, label)))
    return journal


def _link_problem(row: HeadRow, position: int, expected_prev: str) -> str | None:
    """What is wrong with how this head follows the one before it, or None (the careful path of `replay`)."""
    counter = row[0]
    if type(counter) is not int or type(row[3]) is not int or type(row[4]) is not int:
        # A database hands over what its columns hold; a head's numbers are integers or it is malformed.
        return (
            f"head #{_short(counter)} (position {position}) is malformed: its counter, logs and records must be "
            "integers"
        )
    counter, prev_hash, changes, logs, records, at, head_hash, vouches = row
    head = Head(counter, prev_hash, changes, logs, records, at, head_hash, key_id="", signature="", vouches=vouches)
    if head.counter != position:
        if head.counter > position:
            span = f"head #{position}" if head.counter == position + 1 else f"heads #{position}–#{head.counter - 1}"
            return f"{span} missing: the heads jump to #{head.counter} (heads were deleted)"
        return f"head #{head.counter} is stored out of order (after head #{position - 1})"
    if head.prev_hash != expected_prev:
        return (
            f"head #{head.counter} does not follow head #{head.counter - 1} (prev_hash {_short(head.prev_hash)}, "
            f"expected {_short(expected_prev)}): heads were replaced or inserted"
        )
    if not head_hash_ok(head):
        return f"head #{head.counter}: its hash does not match its fields: the head was modified"
    return None


def bad_signature(head: Head, public_key: Ed25519PublicKey, label: str) -> str:
    expected = key_id_of(public_key)
    if head.key_id != expected:
        return (
            f"{label} is signed by key {_short(head.key_id)}, not by {expected}: the heads were "
            "re-signed with another key, or the wrong public key was given"
        )
    return f"{label}: bad signature with key {expected}: the head was altered or forged"


def compare_tips(expected: Mapping[str, LogTip], logs: Mapping[str, LogState]) -> Iterable[tuple[str, int, str]]:
    """Each log `expected` names that the walked `logs` lack, hold fewer records of, or hold differently.

    A log whose chain already failed is left out: after its first bad record it proves nothing, and the walk
    has reported it. Yields (log_id, seq of the first record in question, what is wrong, in words to follow
    "the head ..."). The words start with what happened to the log (deleted, truncated, rewritten), so callers
    prefix only the head they speak of.
    """
    for log_id in sorted(expected):
        seq, this_hash = expected[log_id]
        state = logs.get(log_id)
        if state is not None and state.failed:
            continue
        have_seq = state.last_seq if state is not None else 0
        if have_seq == 0:
            yield log_id, 1, f"covers {seq} record{'s' if seq != 1 else ''} of this log, but it holds none"
        elif have_seq < seq:
            span = f"record {seq}" if seq == have_seq + 1 else f"records {have_seq + 1}–{seq}"
            yield log_id, have_seq + 1, f"covers seq {seq}, but the log ends at seq {have_seq} ({span} missing)"
        else:
            assert state is not None  # have_seq > 0
            found = state.hashes.get(seq)
            if found is not None and found != this_hash:
                yield (
                    log_id,
                    seq,
                    f"fixes record {seq} as {_short(this_hash)}, but the log holds {_short(found)} there "
                    "(the log was rewritten)",
                )


def state_differences(listed: Mapping[str, LogTip], replayed: Mapping[str, LogTip]) -> Sequence[str]:
    """The log ids where a witness file's own list differs from the state the store's heads replay to."""
    return sorted(log_id for log_id in set(listed) | set(replayed) if listed.get(log_id) != replayed.get(log_id))
