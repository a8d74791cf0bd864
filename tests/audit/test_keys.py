from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from pollwarden.audit import (
    AUDIT_KEY_ENV,
    SIGNING_KEY_ENV,
    AuditCipher,
    AuditKeyError,
    checkpoint_valid,
    load_or_create_keys,
    load_public_key,
    public_key_text,
    sign_checkpoint,
)
from pollwarden.audit.keys import _create_exclusive


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def raw_private(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


def test_creates_key_files_with_private_modes(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        keys = load_or_create_keys(tmp_path)
    finally:
        os.umask(old_umask)
    directory = tmp_path / "keys"
    assert mode(directory) == 0o700
    assert mode(directory / "audit.key") == 0o600
    assert mode(directory / "signing.key") == 0o600
    assert mode(directory / "signing.pub") == 0o644
    assert keys.cipher_key is not None and len(keys.cipher_key) == 32
    assert base64.b64decode((directory / "audit.key").read_text()) == keys.cipher_key
    assert keys.signing_key is not None
    assert base64.b64decode((directory / "signing.key").read_text()) == raw_private(keys.signing_key)
    assert (directory / "signing.pub").read_text().strip() == public_key_text(keys.public_key)
    assert [p.name for p in directory.iterdir() if p.name.endswith(".tmp")] == []


def test_public_key_file_is_world_readable_even_under_a_strict_umask(tmp_path: Path) -> None:
    old_umask = os.umask(0o077)
    try:
        load_or_create_keys(tmp_path)
    finally:
        os.umask(old_umask)
    assert mode(tmp_path / "keys" / "signing.pub") == 0o644


def test_second_load_returns_the_same_keys(tmp_path: Path) -> None:
    first = load_or_create_keys(tmp_path)
    second = load_or_create_keys(tmp_path)
    assert first.cipher_key == second.cipher_key
    assert public_key_text(first.public_key) == public_key_text(second.public_key)


def test_key_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    keys = load_or_create_keys(tmp_path)
    path = tmp_path / "keys" / "audit.key"
    path.chmod(0o644)
    with pytest.raises(AuditKeyError, match="chmod 600") as caught:
        load_or_create_keys(tmp_path)
    assert str(path) in str(caught.value)
    assert "0644" in str(caught.value)
    assert keys.cipher_key is not None
    assert base64.b64encode(keys.cipher_key).decode() not in str(caught.value)


def test_signing_key_readable_by_group_is_refused(tmp_path: Path) -> None:
    load_or_create_keys(tmp_path)
    (tmp_path / "keys" / "signing.key").chmod(0o640)
    with pytest.raises(AuditKeyError, match=r"signing\.key.*chmod 600"):
        load_or_create_keys(tmp_path)


def test_symlinked_key_file_is_refused(tmp_path: Path) -> None:
    load_or_create_keys(tmp_path / "a")
    target = tmp_path / "a" / "keys" / "audit.key"
    (tmp_path / "b" / "keys").mkdir(parents=True, mode=0o700)
    (tmp_path / "b" / "keys" / "audit.key").symlink_to(target)
    with pytest.raises(AuditKeyError, match="cannot read key file"):
        load_or_create_keys(tmp_path / "b")


def test_malformed_key_file_names_the_file_and_hides_the_content(tmp_path: Path) -> None:
    load_or_create_keys(tmp_path)
    path = tmp_path / "keys" / "audit.key"
    path.write_text("c2VjcmV0LXZhbHVl\n")  # valid base64, 12 bytes
    with pytest.raises(AuditKeyError, match="decodes to 12 bytes, expected an AES-256 key") as caught:
        load_or_create_keys(tmp_path)
    assert str(path) in str(caught.value)
    assert "c2VjcmV0LXZhbHVl" not in str(caught.value)


def test_environment_keys_override_the_files_and_are_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cipher_key = os.urandom(32)
    signing = Ed25519PrivateKey.generate()
    monkeypatch.setenv(AUDIT_KEY_ENV, base64.b64encode(cipher_key).decode())
    monkeypatch.setenv(SIGNING_KEY_ENV, base64.b64encode(raw_private(signing)).decode())
    keys = load_or_create_keys(tmp_path)
    assert keys.cipher_key == cipher_key
    assert public_key_text(keys.public_key) == public_key_text(signing)
    assert not (tmp_path / "keys" / "audit.key").exists()
    assert not (tmp_path / "keys" / "signing.key").exists()
    loaded = load_public_key(tmp_path)
    assert loaded is not None and public_key_text(loaded) == public_key_text(signing)


def test_environment_overrides_existing_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from_files = load_or_create_keys(tmp_path)
    cipher_key = os.urandom(32)
    monkeypatch.setenv(AUDIT_KEY_ENV, base64.b64encode(cipher_key).decode())
    keys = load_or_create_keys(tmp_path)
    assert keys.cipher_key == cipher_key != from_files.cipher_key


@pytest.mark.parametrize("variable", [AUDIT_KEY_ENV, SIGNING_KEY_ENV])
@pytest.mark.parametrize("value", ["not*base64", base64.b64encode(b"short").decode()])
def test_bad_environment_key_names_the_variable_and_hides_the_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(AuditKeyError) as caught:
        load_or_create_keys(tmp_path)
    assert f"environment variable {variable}" in str(caught.value)
    assert value not in str(caught.value)


def test_keys_work_for_sealing_and_signing(tmp_path: Path) -> None:
    keys = load_or_create_keys(tmp_path)
    assert keys.cipher_key is not None and keys.signing_key is not None
    cipher = AuditCipher(keys.cipher_key)
    assert cipher.open(cipher.seal(b"x", b""), b"") == b"x"
    cp = sign_checkpoint(keys.signing_key, log_id="op", seq=0, head_hash="0" * 64, counter=1, at="2025-03-01T00:00:00Z")
    public = load_public_key(tmp_path)
    assert public is not None and checkpoint_valid(cp, public)


def test_repr_never_shows_the_secret_keys(tmp_path: Path) -> None:
    keys = load_or_create_keys(tmp_path)
    assert keys.cipher_key is not None and keys.signing_key is not None
    shown = repr(keys)
    assert base64.b64encode(keys.cipher_key).decode() not in shown
    assert repr(keys.cipher_key) not in shown
    assert base64.b64encode(raw_private(keys.signing_key)).decode() not in shown


def test_public_key_alone_is_enough_on_another_machine(tmp_path: Path) -> None:
    keys = load_or_create_keys(tmp_path / "writer")
    verifier_home = tmp_path / "verifier"
    (verifier_home / "keys").mkdir(parents=True)
    (verifier_home / "keys" / "signing.pub").write_bytes((tmp_path / "writer" / "keys" / "signing.pub").read_bytes())
    public = load_public_key(verifier_home)
    assert public is not None and public_key_text(public) == public_key_text(keys.public_key)
    read_only = load_or_create_keys(verifier_home, create=False)
    assert (read_only.cipher_key, read_only.signing_key) == (None, None)
    assert not (verifier_home / "keys" / "audit.key").exists()


def test_empty_home_has_no_public_key_and_create_false_creates_nothing(tmp_path: Path) -> None:
    assert load_public_key(tmp_path) is None
    with pytest.raises(AuditKeyError, match="no audit signing key"):
        load_or_create_keys(tmp_path, create=False)
    assert not (tmp_path / "keys").exists()


def test_mismatched_public_key_file_is_refused(tmp_path: Path) -> None:
    load_or_create_keys(tmp_path)
    (tmp_path / "keys" / "signing.pub").write_text(public_key_text(Ed25519PrivateKey.generate()) + "\n")
    with pytest.raises(AuditKeyError, match="does not match"):
        load_or_create_keys(tmp_path)


def test_exclusive_create_never_overwrites_a_key_another_process_made(tmp_path: Path) -> None:
    path = tmp_path / "audit.key"
    assert _create_exclusive(path, b"first\n", 0o600)
    assert not _create_exclusive(path, b"second\n", 0o600)
    assert path.read_bytes() == b"first\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.key"]
