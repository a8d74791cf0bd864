"""Signed checkpoints of a log's head.

A hash chain alone cannot show that records were cut from its end or that the whole log was swapped for
an older copy: both leave a valid chain. A checkpoint signed with a key that is not the decryption key
fixes (log, seq, head hash) at a point in time, and its counter, monotonic across the whole store, orders
checkpoints so an older log cannot pass for a newer one when a later checkpoint is kept elsewhere.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from pollwarden.audit.chain import MAX_SEQ, check_utc_time, is_hash_text
from pollwarden.audit.crypto import AuditKeyError, length_prefixed

__all__ = [
    "CHECKPOINTED_KINDS",
    "CHECKPOINT_DOMAIN",
    "Checkpoint",
    "checkpoint_message",
    "checkpoint_valid",
    "key_id_of",
    "load_public_key_text",
    "public_key_text",
    "sign_checkpoint",
]

CHECKPOINT_DOMAIN = b"pollwarden-checkpoint-v1"

CHECKPOINTED_KINDS = frozenset({"succeeded", "job_ended", "escalated", "decided", "extended", "action"})
"""Record kinds a store before signed heads (schema 2) always checkpointed in the same transaction: such a
record with no checkpoint at or after it means checkpoints were deleted."""
_FIELDS = ("log_id", "seq", "head_hash", "counter", "at", "key_id", "signature")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    log_id: str
    seq: int
    head_hash: str
    counter: int
    at: str
    key_id: str
    signature: str

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Checkpoint:
        """Build from parsed JSON, checking types so a malformed file fails here with the field named."""
        if not isinstance(data, Mapping):
            raise ValueError("checkpoint must be a JSON object")
        missing = [name for name in _FIELDS if name not in data]
        if missing:
            raise ValueError(f"checkpoint lacks field(s): {', '.join(missing)}")
        for name in ("log_id", "head_hash", "at", "key_id", "signature"):
            if not isinstance(data[name], str):
                raise ValueError(f"checkpoint field {name!r} must be a string")
        for name in ("seq", "counter"):
            value = data[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"checkpoint field {name!r} must be a non-negative integer")
        return cls(**{name: data[name] for name in _FIELDS})


def key_id_of(public_key: Ed25519PublicKey) -> str:
    """First 16 hex characters of SHA-256 over the raw public key: names a key without revealing anything."""
    return hashlib.sha256(_raw_public(public_key)).hexdigest()[:16]


def _raw_public(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def checkpoint_message(*, log_id: str, seq: int, head_hash: str, counter: int, at: str, key_id: str) -> bytes:
    """The exact bytes that are signed.

    ``lp(b"pollwarden-checkpoint-v1") || lp(log_id) || seq (8-byte BE) || lp(bytes.fromhex(head_hash))
    || counter (8-byte BE) || lp(at) || lp(key_id)``, where ``lp(x)`` is an 8-byte big-endian length then x.
    """
    return b"".join(
        (
            length_prefixed(CHECKPOINT_DOMAIN),
            length_prefixed(log_id.encode("utf-8")),
            seq.to_bytes(8, "big"),
            length_prefixed(bytes.fromhex(head_hash)),
            counter.to_bytes(8, "big"),
            length_prefixed(at.encode("utf-8")),
            length_prefixed(key_id.encode("utf-8")),
        )
    )


def sign_checkpoint(
    key: Ed25519PrivateKey, *, log_id: str, seq: int, head_hash: str, counter: int, at: str
) -> Checkpoint:
    """Sign the head of one log. `seq` 0 with GENESIS_HASH is allowed: it pins a log as empty."""
    if not isinstance(log_id, str) or not log_id:
        raise ValueError("log_id must be a non-empty string")
    for name, value in (("seq", seq), ("counter", counter)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQ:
            raise ValueError(f"{name} must be an integer from 0 to 2**63-1, got {value!r}")
    if not is_hash_text(head_hash):
        raise ValueError("head_hash must be 64 lowercase hex characters")
    check_utc_time(at)
    key_id = key_id_of(key.public_key())
    message = checkpoint_message(log_id=log_id, seq=seq, head_hash=head_hash, counter=counter, at=at, key_id=key_id)
    return Checkpoint(
        log_id=log_id,
        seq=seq,
        head_hash=head_hash,
        counter=counter,
        at=at,
        key_id=key_id,
        signature=key.sign(message).hex(),
    )


def checkpoint_valid(cp: Checkpoint, public_key: Ed25519PublicKey) -> bool:
    """True only if `public_key` signed exactly these fields; any malformed field is simply invalid."""
    try:
        if cp.key_id != key_id_of(public_key) or not is_hash_text(cp.head_hash):
            return False
        for value in (cp.seq, cp.counter):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQ:
                return False
        signature = bytes.fromhex(cp.signature)
        message = checkpoint_message(
            log_id=cp.log_id,
            seq=cp.seq,
            head_hash=cp.head_hash,
            counter=cp.counter,
            at=cp.at,
            key_id=cp.key_id,
        )
        public_key.verify(signature, message)
    except (InvalidSignature, ValueError, TypeError, AttributeError):
        return False
    return True


def public_key_text(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """Base64 of the 32 raw public-key bytes: short enough to paste, print or publish."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return base64.b64encode(_raw_public(public)).decode("ascii")


def load_public_key_text(text: str, *, source: str = "public key") -> Ed25519PublicKey:
    """Parse `public_key_text` output; `source` names where the text came from in error messages."""
    if not isinstance(text, str):
        raise AuditKeyError(f"{source}: expected base64 text of a 32-byte Ed25519 public key")
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise AuditKeyError(
            f"{source} is not valid base64: expected the 32-byte Ed25519 public key, base64-encoded "
            "(as in keys/signing.pub)"
        ) from None
    if len(raw) != 32:
        raise AuditKeyError(
            f"{source} decodes to {len(raw)} bytes, expected a 32-byte raw Ed25519 public key, base64-encoded "
            "(as in keys/signing.pub)"
        )
    try:
        return Ed25519PublicKey.from_public_bytes(raw)
    except ValueError:
        raise AuditKeyError(
            f"{source} is not a valid Ed25519 public key: expected the 32-byte raw key, base64-encoded "
            "(as in keys/signing.pub)"
        ) from None
