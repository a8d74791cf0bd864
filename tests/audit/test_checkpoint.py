from __future__ import annotations

import base64
import hashlib
from dataclasses import replace
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from pollwarden.audit import (
    AuditKeyError,
    Checkpoint,
    checkpoint_valid,
    key_id_of,
    load_public_key_text,
    public_key_text,
    sign_checkpoint,
)

HEAD = hashlib.sha256(b"head").hexdigest()


def _sign(key: Ed25519PrivateKey, **overrides: Any) -> Checkpoint:
    fields: dict[str, Any] = {
        "log_id": "op_1",
        "seq": 7,
        "head_hash": HEAD,
        "counter": 3,
        "at": "2025-03-01T12:00:00Z",
    }
    fields.update(overrides)
    return sign_checkpoint(key, **fields)


def test_signed_checkpoint_is_valid_and_names_its_key() -> None:
    key = Ed25519PrivateKey.generate()
    cp = _sign(key)
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert cp.key_id == hashlib.sha256(raw).hexdigest()[:16] == key_id_of(key.public_key())
    assert len(bytes.fromhex(cp.signature)) == 64
    assert checkpoint_valid(cp, key.public_key())


@pytest.mark.parametrize(
    "change",
    [
        {"log_id": "op_2"},
        {"seq": 8},
        {"head_hash": "1" * 64},
        {"counter": 4},
        {"at": "2025-03-01T12:00:01Z"},
        {"key_id": "0" * 16},
    ],
)
def test_any_changed_field_invalidates_the_signature(change: dict[str, Any]) -> None:
    key = Ed25519PrivateKey.generate()
    assert not checkpoint_valid(replace(_sign(key), **change), key.public_key())


@pytest.mark.parametrize("signature", ["", "zz", "00" * 64])
def test_malformed_or_wrong_signature_is_invalid_not_an_exception(signature: str) -> None:
    key = Ed25519PrivateKey.generate()
    assert not checkpoint_valid(replace(_sign(key), signature=signature), key.public_key())


def test_other_public_key_does_not_validate() -> None:
    cp = _sign(Ed25519PrivateKey.generate())
    assert not checkpoint_valid(cp, Ed25519PrivateKey.generate().public_key())


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"log_id": ""}, "log_id"),
        ({"seq": -1}, "seq"),
        ({"counter": True}, "counter"),
        ({"head_hash": "XYZ"}, "head_hash"),
        ({"at": "yesterday"}, "at"),
    ],
)
def test_sign_checkpoint_refuses_bad_fields(override: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _sign(Ed25519PrivateKey.generate(), **override)


def test_public_key_text_round_trips_from_private_or_public() -> None:
    key = Ed25519PrivateKey.generate()
    text = public_key_text(key)
    assert text == public_key_text(key.public_key())
    assert len(base64.b64decode(text)) == 32
    cp = _sign(key)
    assert checkpoint_valid(cp, load_public_key_text(text + "\n"))


@pytest.mark.parametrize(
    ("text", "message"),
    [("not base64!", "not valid base64"), (base64.b64encode(b"x" * 31).decode(), "31 bytes, expected a 32-byte")],
)
def test_load_public_key_text_explains_bad_input(text: str, message: str) -> None:
    with pytest.raises(AuditKeyError, match=message) as caught:
        load_public_key_text(text, source="header field")
    assert "header field" in str(caught.value)


def test_checkpoint_json_round_trip_and_errors() -> None:
    cp = _sign(Ed25519PrivateKey.generate())
    assert Checkpoint.from_json(cp.to_json()) == cp
    partial = cp.to_json()
    del partial["signature"]
    with pytest.raises(ValueError, match=r"lacks field.*signature"):
        Checkpoint.from_json(partial)
    with pytest.raises(ValueError, match="'counter' must be a non-negative integer"):
        Checkpoint.from_json({**cp.to_json(), "counter": "3"})
