"""Key pinning: a verifier given one public key trusts that key alone, whatever key the log itself names."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from pollwarden.audit import (
    AuditCipher,
    AuditKeyError,
    key_id_of,
    public_key_text,
    read_public_key_file,
    verify,
)

from .conftest import Signer, build_log


def _private_text(key: Ed25519PrivateKey) -> str:
    return base64.b64encode(key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())).decode()


def test_the_pinned_key_that_signed_the_log_verifies(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_a", 4)
    report = verify(log, [signer.head(log)], signer.public, pinned_key=signer.public)
    assert report.ok, report.problems


def test_a_log_signed_by_another_key_is_not_the_pinned_one(cipher: AuditCipher, signer: Signer) -> None:
    # A forger rebuilt the log and re-signed it with a key of their own, which the log now names.
    pinned = Ed25519PrivateKey.generate()
    log = build_log(cipher, "op_a", 4)
    report = verify(log, [signer.head(log)], signer.public, pinned_key=pinned.public_key())
    assert not report.ok
    text = " ".join(p.what for p in report.problems)
    assert "not the pinned key" in text
    assert key_id_of(signer.public) in text and key_id_of(pinned.public_key()) in text
    assert any(p.log_id == "op_a" and "checkpoint #1" in p.what for p in report.problems)
    for secret in (_private_text(signer.key), _private_text(pinned)):
        assert secret not in text


def test_a_swapped_key_alone_is_caught_even_when_the_signatures_are_the_pinned_keys(
    cipher: AuditCipher, signer: Signer
) -> None:
    log = build_log(cipher, "op_a", 3)
    other = Ed25519PrivateKey.generate().public_key()
    report = verify(log, [signer.head(log)], other, pinned_key=signer.public)
    assert [p.seq for p in report.problems] == [None]
    assert f"key {key_id_of(other)} is not the pinned key {key_id_of(signer.public)}" in report.problems[0].what


def test_a_log_with_no_checkpoints_naming_another_key_is_caught(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_a", 3)
    report = verify(log, [], signer.public, pinned_key=Ed25519PrivateKey.generate().public_key())
    assert not report.ok and "not the pinned key" in report.problems[0].what


def test_a_checkpoint_kept_elsewhere_under_another_key_is_not_trusted(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_a", 3)
    forger = Signer(Ed25519PrivateKey.generate())
    report = verify(
        log, [signer.head(log)], signer.public, pinned_key=signer.public, trusted_checkpoint=forger.head(log)
    )
    assert [p.log_id for p in report.problems] == ["op_a"]
    assert "kept elsewhere" in report.problems[0].what and "not the pinned key" in report.problems[0].what


def test_a_public_key_file_as_signing_pub_is_written_reads_back(tmp_path: Path, signer: Signer) -> None:
    path = tmp_path / "signing.pub"
    path.write_text(public_key_text(signer.public) + "\n")
    assert public_key_text(read_public_key_file(path)) == public_key_text(signer.public)


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        (None, "cannot read"),
        (b"", "decodes to 0 bytes"),
        (b"not base64 at all!\n", "not valid base64"),
        (base64.b64encode(b"x" * 16) + b"\n", "decodes to 16 bytes"),
        (b"\xff\xfe\n", "not valid base64"),
    ],
)
def test_a_bad_public_key_file_names_the_file_and_what_a_key_file_looks_like(
    tmp_path: Path, content: bytes | None, phrase: str
) -> None:
    path = tmp_path / "pinned.pub"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(AuditKeyError) as caught:
        read_public_key_file(path)
    message = str(caught.value)
    assert str(path) in message and phrase in message
    assert "base64" in message and "32-byte" in message and "signing.pub" in message


def test_a_directory_is_not_a_key_file(tmp_path: Path) -> None:
    with pytest.raises(AuditKeyError, match="cannot read public key file"):
        read_public_key_file(tmp_path)
