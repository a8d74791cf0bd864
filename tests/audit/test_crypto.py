from __future__ import annotations

import base64
import os

import pytest

from pollwarden.audit import AuditCipher, AuditDecryptError, AuditError


@pytest.mark.parametrize("length", [0, 16, 31, 33, 64])
def test_key_of_wrong_length_is_refused_with_its_length(length: int) -> None:
    with pytest.raises(ValueError, match=rf"exactly 32 bytes.*got {length} bytes"):
        AuditCipher(b"k" * length)


def test_key_must_be_bytes() -> None:
    with pytest.raises(ValueError, match="must be bytes"):
        AuditCipher("a" * 32)  # type: ignore[arg-type]


def test_seal_then_open_round_trips_and_uses_a_fresh_nonce() -> None:
    cipher = AuditCipher(os.urandom(32))
    first = cipher.seal(b"payload", b"aad")
    second = cipher.seal(b"payload", b"aad")
    assert first != second
    assert first[:12] != second[:12]
    assert len(first) == 12 + len(b"payload") + 16
    assert cipher.open(first, b"aad") == b"payload"
    assert cipher.open(second, b"aad") == b"payload"


def test_wrong_key_fails_with_audit_decrypt_error() -> None:
    blob = AuditCipher(os.urandom(32)).seal(b"payload", b"aad")
    with pytest.raises(AuditDecryptError, match="wrong audit key"):
        AuditCipher(os.urandom(32)).open(blob, b"aad")


def test_any_flipped_byte_or_other_aad_fails() -> None:
    cipher = AuditCipher(os.urandom(32))
    blob = cipher.seal(b"payload", b"aad")
    for index in range(len(blob)):
        tampered = bytearray(blob)
        tampered[index] ^= 0x01
        with pytest.raises(AuditDecryptError):
            cipher.open(bytes(tampered), b"aad")
    with pytest.raises(AuditDecryptError):
        cipher.open(blob, b"other aad")


def test_too_short_blob_is_reported_not_crashed() -> None:
    with pytest.raises(AuditDecryptError, match="too short"):
        AuditCipher(os.urandom(32)).open(b"\x00" * 27, b"")


def test_decrypt_error_is_an_audit_error_and_never_shows_the_key() -> None:
    key = os.urandom(32)
    cipher = AuditCipher(key)
    with pytest.raises(AuditError) as caught:
        cipher.open(AuditCipher(os.urandom(32)).seal(b"x", b""), b"")
    shown = str(caught.value) + repr(cipher)
    for spelling in (key.hex(), base64.b64encode(key).decode()):
        assert spelling not in shown
    assert "hidden" in repr(cipher)
