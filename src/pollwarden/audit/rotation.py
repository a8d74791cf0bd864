"""Key rotations: a change of signing key, signed by the key it replaces, and the lineage of keys they make.

A head kept elsewhere (a witness's) is signed by the key of its day. A forger who rolls the store back and
re-signs every head with a key of their own leaves a store that verifies against its own key; what gives them
away is that nothing links the witness's key to theirs. So a key change is a signed statement of the old key:
"after head #C (hash H), heads are signed by key K" (`pollwarden audit rotate-key`). A verifier follows these
from the key of any head kept elsewhere to the key of the newest head (`lineage`); a head of a key outside the
lineage, or of a key after it was rotated away, is a finding.

Pure functions and frozen values, no storage: the store writes rotations (`store/trail.py`), the verifier
checks them (`verifier.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from pollwarden.audit.chain import MAX_SEQ, check_utc_time, is_hash_text
from pollwarden.audit.checkpoint import _raw_public, key_id_of, load_public_key_text, public_key_text
from pollwarden.audit.crypto import AuditKeyError, length_prefixed

__all__ = ["ROTATION_DOMAIN", "Epoch", "Rotation", "lineage", "rotation_key_id", "sign_rotation"]

ROTATION_DOMAIN = b"pollwarden-key-rotation-v1"
ROTATION_FIELDS = ("counter", "head_hash", "at", "old_public", "new_public", "signature")


@dataclass(frozen=True, slots=True)
class Rotation:
    """After head #`counter` (`head_hash`), the last one `old_public` signs, heads are signed by `new_public`."""

    counter: int
    head_hash: str
    at: str
    old_public: str
    """Base64 of the 32 raw bytes of the key rotated away (as keys/signing.pub holds it)."""
    new_public: str
    signature: str
    """Hex Ed25519 signature of the old key over `rotation_message`."""

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in ROTATION_FIELDS}

    @classmethod
    def from_json(cls, data: object) -> Rotation:
        if not isinstance(data, Mapping):
            raise ValueError("a rotation must be a JSON object")
        missing = [name for name in ROTATION_FIELDS if name not in data]
        if missing:
            raise ValueError(f"rotation lacks field(s): {', '.join(missing)}")
        counter = data["counter"]
        if isinstance(counter, bool) or not isinstance(counter, int) or not 1 <= counter <= MAX_SEQ:
            raise ValueError("rotation field 'counter' must be a positive integer")
        for name in ROTATION_FIELDS[1:]:
            if not isinstance(data[name], str):
                raise ValueError(f"rotation field {name!r} must be a string")
        return cls(counter, *(data[name] for name in ROTATION_FIELDS[1:]))

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Rotation:
        """From a database row in `ROTATION_FIELDS` order."""
        counter, head_hash, at, old_public, new_public, signature = row
        return cls(int(counter), str(head_hash), str(at), str(old_public), str(new_public), str(signature))

    def values(self) -> tuple[Any, ...]:
        return (self.counter, self.head_hash, self.at, self.old_public, self.new_public, self.signature)

    @property
    def old_key_id(self) -> str:
        return rotation_key_id(self.old_public) or "(malformed)"

    @property
    def new_key_id(self) -> str:
        return rotation_key_id(self.new_public) or "(malformed)"


def rotation_key_id(public_text: str) -> str | None:
    """The key id of a key as a rotation names it, or None when the text is not a public key."""
    try:
        return key_id_of(load_public_key_text(public_text, source="a rotation's key"))
    except AuditKeyError:
        return None


def rotation_message(counter: int, head_hash: str, at: str, old_public: bytes, new_public: bytes) -> bytes:
    """``lp(b"pollwarden-key-rotation-v1") || counter (8-byte BE) || lp(bytes.fromhex(head_hash)) || lp(at)
    || lp(old public key, 32 raw bytes) || lp(new public key, 32 raw bytes)``"""
    return b"".join(
        (
            length_prefixed(ROTATION_DOMAIN),
            counter.to_bytes(8, "big"),
            length_prefixed(bytes.fromhex(head_hash)),
            length_prefixed(at.encode("utf-8")),
            length_prefixed(old_public),
            length_prefixed(new_public),
        )
    )


def sign_rotation(
    old_key: Ed25519PrivateKey, new_key: Ed25519PublicKey, *, counter: int, head_hash: str, at: str
) -> Rotation:
    """The old key's statement that heads after #counter are signed by `new_key`."""
    if isinstance(counter, bool) or not 1 <= counter <= MAX_SEQ:
        raise ValueError("a rotation follows a signed head: its counter is at least 1")
    if not is_hash_text(head_hash):
        raise ValueError("head_hash must be 64 lowercase hex characters")
    check_utc_time(at)
    old_public = old_key.public_key()
    if key_id_of(old_public) == key_id_of(new_key):
        raise ValueError("a rotation needs a new key, not the one it replaces")
    message = rotation_message(counter, head_hash, at, _raw_public(old_public), _raw_public(new_key))
    return Rotation(
        counter, head_hash, at, public_key_text(old_public), public_key_text(new_key), old_key.sign(message).hex()
    )


def _public(text: str) -> Ed25519PublicKey | None:
    try:
        return load_public_key_text(text, source="a rotation's key")
    except AuditKeyError:
        return None


def rotation_valid(rotation: Rotation) -> bool:
    """True when the key it rotates away signed it; any malformed field is simply invalid."""
    old, new = _public(rotation.old_public), _public(rotation.new_public)
    if old is None or new is None:
        return False
    try:
        message = rotation_message(
            rotation.counter, rotation.head_hash, rotation.at, _raw_public(old), _raw_public(new)
        )
        old.verify(bytes.fromhex(rotation.signature), message)
    except (InvalidSignature, ValueError, TypeError, OverflowError, UnicodeEncodeError):
        return False
    return True


@dataclass(frozen=True, slots=True)
class Epoch:
    """One key of the lineage: it signs the heads after #`after` up to #`until` (None: up to the newest)."""

    key_id: str
    public_key: Ed25519PublicKey
    after: int
    until: int | None

    def signs(self, counter: int) -> bool:
        return counter > self.after and (self.until is None or counter <= self.until)

    def span(self) -> str:
        first = f"#{self.after + 1}"
        return f"heads {first} on" if self.until is None else f"heads {first}–#{self.until}"


@dataclass(frozen=True, slots=True)
class Lineage:
    """The keys of a store in order, oldest first, and what was wrong with the rotations linking them."""

    epochs: tuple[Epoch, ...]
    problems: tuple[str, ...] = ()

    @property
    def current(self) -> Epoch | None:
        return self.epochs[-1] if self.epochs else None

    def epoch_of(self, key_id: str) -> Epoch | None:
        return next((epoch for epoch in self.epochs if epoch.key_id == key_id), None)


def lineage(rotations: Sequence[Rotation], claimed: Ed25519PublicKey | None, head_hashes: Mapping[int, str]) -> Lineage:
    """The keys the rotations link, from the first key to the one the newest head must be signed by.

    Without rotations the lineage is the `claimed` key alone (the key the store's home names). `head_hashes` are
    the store's head hashes at the rotations' counters, as its heads replay: a rotation must name the head it
    follows, so it cannot be moved to another point of the history. The first bad rotation ends the lineage
    there; its problem says why."""
    ordered = sorted(rotations, key=lambda rotation: rotation.counter)
    if not ordered:
        if claimed is None:
            return Lineage(())
        return Lineage((Epoch(key_id_of(claimed), claimed, 0, None),))
    problems: list[str] = []
    first = _public(ordered[0].old_public)
    if first is None:
        return Lineage((), (f"the rotation after head #{ordered[0].counter} names a malformed old key",))
    epochs = [Epoch(key_id_of(first), first, 0, ordered[0].counter)]
    for index, rotation in enumerate(ordered):
        label = f"the rotation after head #{rotation.counter}"
        in_force = epochs[-1]
        new = _public(rotation.new_public)
        stored = head_hashes.get(rotation.counter)
        if new is None or not rotation_valid(rotation):
            problems.append(f"{label} does not verify with the key it rotates away: it was forged or altered")
        elif rotation.old_key_id != in_force.key_id:
            problems.append(
                f"{label} rotates away key {rotation.old_key_id}, but key {in_force.key_id} signed the heads then:"
                " the rotations were rewritten"
            )
        elif stored != rotation.head_hash:
            held = "holds no such head" if stored is None else f"holds {stored[:12]}… there"
            problems.append(
                f"{label} follows head hash {rotation.head_hash[:12]}…, but the store {held}: the heads or the"
                " rotation were rewritten"
            )
        if problems:
            break
        until = ordered[index + 1].counter if index + 1 < len(ordered) else None
        epochs[-1] = Epoch(in_force.key_id, in_force.public_key, in_force.after, rotation.counter)
        assert new is not None
        epochs.append(Epoch(key_id_of(new), new, rotation.counter, until))
    return Lineage(tuple(epochs), tuple(problems))
