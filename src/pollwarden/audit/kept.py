"""What a verifier checks of signing keys and of heads kept elsewhere (issue 23, "a witness that holds").

The store's rotations make a lineage of keys (`rotation.py`). From it: which signatures count (the lineage's keys,
from a pinned key on), the newest head's signature by the key of its counter, rotations that do not link, a home
key the rotations do not lead to, and each head a witness keeps: signed by a key of the lineage in that key's
time, and extended by the store. A mixin of the verifier (`verifier.py`), which holds the state it reads.
"""

from __future__ import annotations

from collections.abc import Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from pollwarden.audit.chains import ALL_LOGS, ChainWalk, Problem, short
from pollwarden.audit.checkpoint import Checkpoint, checkpoint_valid, key_id_of
from pollwarden.audit.heads import head_valid
from pollwarden.audit.journal import Finding, HeadFile, Journal, bad_signature, compare_tips, state_differences
from pollwarden.audit.rotation import Lineage, Rotation

__all__ = ["KeyChecks", "key_id_text", "plural"]


def key_id_text(value: object) -> str:
    """A key id read from a file is shown only when it has the shape of one (16 hex characters)."""
    if isinstance(value, str) and len(value) == 16 and all(c in "0123456789abcdef" for c in value):
        return value
    return f"{short(value)!r} (malformed)"


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


class KeyChecks:
    """The verifier's checks of keys and kept heads; the verifier sets these attributes before calling them."""

    claimed_key: Ed25519PublicKey | None
    pinned_key: Ed25519PublicKey | None
    pinned: bool
    public_key: Ed25519PublicKey | None
    """The key the newest head must be signed by: the last rotation's, or the root's when none happened."""
    rotations: Sequence[Rotation]
    lineage: Lineage
    keys: dict[str, Ed25519PublicKey]
    journal: Journal | None
    walk: ChainWalk
    problems: list[Problem]

    def _check_newest_head(self, journal: Journal) -> None:
        """The newest head's signature, by the key of the lineage that signs its counter."""
        newest = journal.newest
        if newest is None:
            return
        epoch = next((epoch for epoch in self.lineage.epochs if epoch.signs(newest.counter)), None)
        key = epoch.public_key if epoch is not None else self.public_key
        if key is not None and not head_valid(newest, key):
            label = f"the newest head (#{newest.counter})"
            journal.findings.append(Finding(None, None, bad_signature(newest, key, label)))

    def _trusted_keys(self) -> dict[str, Ed25519PublicKey]:
        """The keys whose signatures count, by key id: the lineage's, from the pinned key on when one is pinned."""
        epochs = list(self.lineage.epochs)
        if self.pinned_key is not None:
            pinned = key_id_of(self.pinned_key)
            starts = [index for index, epoch in enumerate(epochs) if epoch.key_id == pinned]
            epochs = epochs[starts[0] :] if starts else []
            if not epochs:
                return {pinned: self.pinned_key}
        return {epoch.key_id: epoch.public_key for epoch in epochs}

    def _signed(self, cp: Checkpoint) -> bool:
        key = self.keys.get(cp.key_id)
        return key is not None and checkpoint_valid(cp, key)

    def _check_lineage(self) -> None:
        """Rotations that do not link, a pinned key outside the lineage, a home key the rotations do not lead to."""
        self.problems.extend(Problem(ALL_LOGS, None, what) for what in self.lineage.problems)
        if not self.rotations:
            return
        current = self.lineage.current
        names = ", ".join(epoch.key_id for epoch in self.lineage.epochs)
        if self.pinned_key is not None and self.lineage.epoch_of(key_id_of(self.pinned_key)) is None:
            self.problems.append(
                Problem(
                    ALL_LOGS,
                    None,
                    f"the pinned key {key_id_of(self.pinned_key)} is not one of the store's signing keys ({names}):"
                    " the log was re-signed with other keys, or comes from another installation",
                )
            )
        claimed = self.claimed_key
        if (
            self.pinned_key is None
            and claimed is not None
            and current is not None
            and key_id_of(claimed) != current.key_id
        ):
            self.problems.append(
                Problem(
                    ALL_LOGS,
                    None,
                    f"the home's public key is {key_id_of(claimed)}, but the store's rotations lead to key"
                    f" {current.key_id}: a rotation was not finished (run `pollwarden audit rotate-key` again),"
                    " or the home's key was replaced",
                )
            )

    def _check_witness(self, witness: HeadFile) -> None:
        """One head kept elsewhere: signed by a key of the store's lineage in that key's time, and extended by the
        store. A head of a key no rotation leads from is a finding (the key was replaced and the heads re-signed),
        and is still compared with the store, so a rollback behind it is named too."""
        head = witness.head
        kept = witness.label
        if self.public_key is None:
            self.problems.append(Problem(ALL_LOGS, None, f"{kept} cannot be checked: no public key was given"))
            return
        epoch = self.lineage.epoch_of(head.key_id)
        if epoch is None or epoch.key_id not in self.keys:
            current = self.lineage.current
            signer = f"key {current.key_id}" if current is not None else "another key"
            if self.pinned and epoch is None:
                self.problems.append(Problem(ALL_LOGS, None, bad_signature(head, self.public_key, kept)))
                return
            self.problems.append(
                Problem(
                    ALL_LOGS,
                    None,
                    f"{kept} is signed by key {key_id_text(head.key_id)}, but the store's heads are signed by"
                    f" {signer} and no rotation leads from that key to it: the signing key was replaced and the"
                    " heads re-signed (or the head is another store's: give each store a witness location of its own)",
                )
            )
        elif not epoch.signs(head.counter):
            self.problems.append(
                Problem(
                    ALL_LOGS,
                    None,
                    f"{kept} is signed by key {epoch.key_id}, which signs {epoch.span()} only: it was signed with a"
                    " key after that key was rotated away (the key is in other hands, or a process kept it)",
                )
            )
        elif not head_valid(head, epoch.public_key):
            self.problems.append(Problem(ALL_LOGS, None, bad_signature(head, epoch.public_key, kept)))
            return
        journal = self.journal
        newest = journal.newest if journal is not None else None
        stored = journal.hashes.get(head.counter) if journal is not None else None
        if stored is None:
            have = (
                f"the store's newest head is #{newest.counter} ({plural(newest.logs, 'log')}, "
                f"{plural(newest.records, 'record')})"
                if newest is not None
                else "the store has no signed head"
            )
            self.problems.append(
                Problem(
                    ALL_LOGS,
                    None,
                    f"rollback: {kept} covers {plural(head.logs, 'log')} and {plural(head.records, 'record')}, but "
                    f"{have}: the store was replaced by an older copy, or its heads were deleted",
                )
            )
            expected = witness.logs
        elif stored != head.head_hash:
            self.problems.append(
                Problem(
                    ALL_LOGS,
                    None,
                    f"the store's head #{head.counter} is not {kept} (store {short(stored)}, kept "
                    f"{short(head.head_hash)}): the store's heads were rewritten",
                )
            )
            expected = witness.logs
        else:
            assert journal is not None
            expected = journal.snapshots.get(head.counter)
            if witness.logs is not None and expected is not None:
                differ = state_differences(witness.logs, expected)
                if differ:
                    self.problems.append(
                        Problem(
                            ALL_LOGS,
                            None,
                            f"the log list in the file of {kept} differs from what that head fixes for "
                            f"{plural(len(differ), 'log')} (first {differ[0]!r}): the file was edited",
                        )
                    )
        if expected is None:
            return
        troubled = {p.log_id for p in [*self.walk.problems, *self.problems]}
        for log_id, seq, what in compare_tips(expected, self.walk.logs):
            if log_id not in troubled:
                self.problems.append(Problem(log_id, seq, f"rollback: {kept} {what}"))
