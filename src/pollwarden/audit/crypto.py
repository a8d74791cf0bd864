"""Payload encryption for the audit log, and the error types every audit module shares.

The cipher only protects confidentiality and binds a ciphertext to its place in the log (via the AAD).
Integrity of the log as a whole comes from the hash chain, which is computed over the ciphertext so that a
verifier never needs this key.
"""

from __future__ import annotations

import os

from ..errors import EXIT_TAMPERED, PollwardenError

__all__ = [
    "KEY_BYTES",
    "NONCE_BYTES",
    "TAG_BYTES",
    "AuditCipher",
    "AuditDecryptError",
    "AuditError",
    "AuditKeyError",
    "length_prefixed",
]

KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16


class AuditError(PollwardenError):
    """Base of every audit failure a person may see.

    Messages say what is wrong and what to do. They never contain key material, so they are safe to print,
    log and return over MCP.
    """


class AuditDecryptError(AuditError):
    """A ciphertext could not be opened: wrong key, or the bytes or their metadata were changed."""

    exit_code = EXIT_TAMPERED  # a record that does not authenticate is what `audit verify` calls tampered


class AuditKeyError(AuditError):
    """Key material is missing, malformed or stored unsafely."""


def length_prefixed(data: bytes) -> bytes:
    """Frame one field as an 8-byte big-endian length followed by the bytes.

    Every hashed, signed or authenticated encoding in the audit package is a concatenation of such frames
    (plus fixed-width integers), so no two different field tuples can encode to the same bytes.
    """
    return len(data).to_bytes(8, "big") + data


class AuditCipher:
    """AES-256-GCM with a fresh random 96-bit nonce per message, stored in front of the ciphertext.

    Random nonces are safe for about 2**32 messages under one key (NIST SP 800-38D), far beyond what one
    pollwarden home writes; rotate the key long before that.
    """

    __slots__ = ("_aead",)

    def __init__(self, key: bytes) -> None:
        # Imported here, not with the module: the error types above are imported by every audit caller, while a
        # cipher is made only when a store opens its keys; `import pollwarden` then loads no cryptography.
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if not isinstance(key, bytes | bytearray):
            raise ValueError(f"audit key must be bytes, got {type(key).__name__}")
        if len(key) != KEY_BYTES:
            raise ValueError(f"audit key must be exactly {KEY_BYTES} bytes (AES-256), got {len(key)} bytes")
        self._aead = AESGCM(bytes(key))

    def __repr__(self) -> str:
        # Never show anything derived from the key.
        return "AuditCipher(<key hidden>)"

    def seal(self, plaintext: bytes, aad: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, plaintext, aad)

    def open(self, blob: bytes, aad: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag  # loaded already: __init__ imported cryptography

        if len(blob) < NONCE_BYTES + TAG_BYTES:
            raise AuditDecryptError(
                f"ciphertext is too short ({len(blob)} bytes, at least {NONCE_BYTES + TAG_BYTES} expected): "
                "it was truncated or altered; run `pollwarden audit verify`"
            )
        try:
            return self._aead.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], aad)
        except InvalidTag:
            raise AuditDecryptError(
                "cannot decrypt: wrong audit key, or the ciphertext or its metadata was altered; "
                "check POLLWARDEN_AUDIT_KEY / keys/audit.key and run `pollwarden audit verify`"
            ) from None
