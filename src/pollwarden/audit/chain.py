"""Records of the audit log: canonical payloads, sealing, and the hash that chains them.

The hash covers the ciphertext and the clear metadata, never the plaintext, so anyone can verify a log
without the decryption key, and losing that key loses readability but never verifiability.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pollwarden.audit.crypto import AuditCipher, AuditDecryptError, AuditError, length_prefixed

__all__ = [
    "GENESIS_HASH",
    "HASH_DOMAIN",
    "HASH_HEAD",
    "AuditRecord",
    "RecordRow",
    "canonical_json",
    "chain_hash",
    "open_record",
    "record_aad",
    "seal_made",
    "seal_record",
]

GENESIS_HASH = "0" * 64
HASH_DOMAIN = b"pollwarden-audit-v1"
AAD_DOMAIN = b"pollwarden-audit-aad-v1"
MAX_SEQ = 2**63 - 1

_HEX_DIGITS = "0123456789abcdef"


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One stored record. Everything here is public: the payload is only inside `ciphertext`.

    `kind` stays in clear so a verifier can summarise a log ("12 decisions, 1 escalation") without the key.
    """

    log_id: str
    seq: int
    at: str
    kind: str
    prev_hash: str
    ciphertext: bytes
    this_hash: str


def is_hash_text(value: object) -> bool:
    """True for a 64-character lowercase hex SHA-256, the only spelling the chain accepts."""
    # strip() leaves nothing exactly when every character is a lowercase hex digit; it is several times
    # faster than a regular expression, and the verifier asks this of every head.
    return isinstance(value, str) and len(value) == 64 and not value.strip(_HEX_DIGITS)


def check_utc_time(at: str, what: str = "at") -> None:
    """Reject anything but an RFC 3339 timestamp in UTC, so stories and verifiers never guess a zone."""
    if not isinstance(at, str) or not at:
        raise ValueError(f"{what} must be an RFC 3339 UTC timestamp string, got {at!r}")
    raw = at[:-1] + "+00:00" if at.endswith(("Z", "z")) else at
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise ValueError(f"{what} is not an RFC 3339 timestamp: {at!r}") from None
    if "T" not in at.upper() or moment.utcoffset() != timedelta(0):
        raise ValueError(f"{what} must be an RFC 3339 timestamp in UTC (ending in Z), got {at!r}")


_CONTAINERS = (dict, list, tuple)


def _has_non_string_key(value: dict[Any, Any]) -> bool:
    # json.dumps silently turns int keys into strings, so {1: x} and {"1": x} would collide. This runs on
    # every append, so it walks without building paths; _bad_key_path explains a hit.
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    return True
                if isinstance(child, _CONTAINERS):
                    stack.append(child)
        else:
            for child in item:
                if isinstance(child, _CONTAINERS):
                    stack.append(child)
    return False


def _bad_key_path(value: Any, path: str) -> str | None:
    if isinstance(value, dict):
        for key, child in value.items():
            if not isinstance(key, str):
                return f"payload key {key!r} at {path} is not a string"
            found = _bad_key_path(child, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, list | tuple):
        for index, child in enumerate(value):
            found = _bad_key_path(child, f"{path}[{index}]")
            if found:
                return found
    return None


# One encoder for every payload: `json.dumps` with these options builds a JSONEncoder per call, a tenth of
# encoding a poll's decision. An encoder keeps no state between calls (each call has its own circular-reference
# markers), so threads share it.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def canonical_json(payload: Mapping[str, Any]) -> bytes:
    """Serialise a payload the same way every time, so a re-encoded payload produces the same bytes."""
    if not isinstance(payload, dict):
        if not isinstance(payload, Mapping):
            raise TypeError(f"payload must be a mapping, got {type(payload).__name__}")
        payload = dict(payload)
    if _has_non_string_key(payload):
        raise TypeError(_bad_key_path(payload, "$") or "payload has a key that is not a string")
    try:
        text = _CANONICAL(payload)
    except ValueError as exc:
        raise ValueError(f"payload is not canonical JSON ({exc}): NaN and infinities are not allowed") from None
    except TypeError as exc:
        raise TypeError(f"payload is not JSON-serialisable: {exc}") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate is not Unicode text and has no UTF-8 form. Inside a JSON string its escape reads
        # back as the same string, and only text that could not be encoded before changes, so the hashes of
        # every existing record stay as they were. Surrogates can appear only inside strings here.
        return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_fields(log_id: str, seq: int, at: str, kind: str) -> None:
    if not isinstance(log_id, str) or not log_id:
        raise ValueError("log_id must be a non-empty string")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= MAX_SEQ:
        raise ValueError(f"seq must be an integer from 1 to 2**63-1, got {seq!r}")
    if not isinstance(at, str):
        raise ValueError("at must be a string")
    if not isinstance(kind, str) or not kind:
        raise ValueError("kind must be a non-empty string")


def chain_hash(prev_hash: str, log_id: str, seq: int, at: str, kind: str, ciphertext: bytes) -> str:
    """SHA-256 that links a record to its predecessor; returned as 64 lowercase hex characters.

    Exact encoding (``lp(x)`` is ``len(x)`` as 8-byte big-endian, then ``x``)::

        SHA-256( lp(b"pollwarden-audit-v1")
               || lp(bytes.fromhex(prev_hash))      # 32 raw bytes; GENESIS_HASH for seq 1
               || lp(log_id.encode("utf-8"))
               || seq.to_bytes(8, "big")
               || lp(at.encode("utf-8"))
               || lp(kind.encode("utf-8"))
               || lp(ciphertext) )                  # nonce || AES-GCM ciphertext || tag

    Each variable-length field carries its length, so no two field tuples share an encoding; the domain
    tag keeps these hashes apart from any other SHA-256 use. This refines the ``prev_hash || seq ||
    ciphertext`` of issue 3: it also binds the log id (a record spliced from another log fails), the time
    and the kind (neither can be edited without detection).
    """
    if not is_hash_text(prev_hash):
        raise ValueError("prev_hash must be 64 lowercase hex characters")
    _check_fields(log_id, seq, at, kind)
    if not isinstance(ciphertext, bytes | bytearray | memoryview):
        raise ValueError("ciphertext must be bytes")
    return hash_fields_unchecked(prev_hash, log_id, seq, at, kind, ciphertext)


RecordRow = Sequence[Any]
"""One stored record as a database hands it over: seven values in `AuditRecord`'s field order (log_id, seq, at, kind,
prev_hash, ciphertext, this_hash). Every value is unchecked: the verifier judges each one."""

HASH_HEAD = length_prefixed(HASH_DOMAIN) + (32).to_bytes(8, "big")
"""What every chain hash message starts with: the framed domain tag, then the prev_hash frame's length."""


def log_frame(log_id: str) -> bytes:
    """``lp(log_id)``: the same for every record of a log, so a verifier builds it once per log."""
    raw = log_id.encode("utf-8")
    return len(raw).to_bytes(8, "big") + raw


def hash_message(prev_raw: bytes, frame: bytes, seq: int, at: str, kind: str, ciphertext: bytes) -> bytes:
    """The exact bytes `chain_hash` hashes, with the previous hash raw and the log's frame (`log_frame`)
    already built: the one place the encoding lives, built in one join so one SHA-256 call hashes it."""
    at_raw = at.encode("utf-8")
    kind_raw = kind.encode("utf-8")
    return b"".join(
        (
            HASH_HEAD,
            prev_raw,
            frame,
            _PACK_2(seq, len(at_raw)),  # the seq, then the time's length: two 8-byte big-endian integers
            at_raw,
            _PACK_1(len(kind_raw)),
            kind_raw,
            _PACK_1(len(ciphertext)),
            ciphertext,
        )
    )


# A verifier builds one message per record: a bound pack is cheaper than int.to_bytes(8, "big") per field.
_PACK_1 = struct.Struct(">Q").pack
_PACK_2 = struct.Struct(">QQ").pack


def hash_fields_unchecked(prev_hash: str, log_id: str, seq: int, at: str, kind: str, ciphertext: bytes) -> str:
    """`chain_hash` without argument checks, for the verifier's explanations of a bad record (and tests)."""
    message = hash_message(bytes.fromhex(prev_hash), log_frame(log_id), seq, at, kind, ciphertext)
    return hashlib.sha256(message).hexdigest()


_AAD_HEAD = length_prefixed(AAD_DOMAIN)


def record_aad(log_id: str, seq: int, at: str, kind: str) -> bytes:
    """Associated data for AES-GCM: a ciphertext moved to another log, seq, time or kind fails to open.

    ``lp(b"pollwarden-audit-aad-v1") || lp(log_id) || seq (8-byte big-endian) || lp(at) || lp(kind)``.
    prev_hash is deliberately left out: the chain already binds it, and keeping it out lets a store
    re-derive the AAD from the row alone.
    """
    return b"".join(
        (
            _AAD_HEAD,
            length_prefixed(log_id.encode("utf-8")),
            seq.to_bytes(8, "big"),
            length_prefixed(at.encode("utf-8")),
            length_prefixed(kind.encode("utf-8")),
        )
    )


def seal_record(
    cipher: AuditCipher,
    *,
    log_id: str,
    seq: int,
    at: str,
    kind: str,
    prev_hash: str,
    payload: Mapping[str, Any],
) -> AuditRecord:
    """Encrypt a payload and chain it after `prev_hash`.

    The caller must read the head (seq, this_hash) under the same lock or transaction that inserts the
    result, or two writers could both chain onto the same head and make the log look tampered.
    """
    _check_fields(log_id, seq, at, kind)
    check_utc_time(at)
    if not is_hash_text(prev_hash):
        raise ValueError("prev_hash must be 64 lowercase hex characters")
    if seq == 1 and prev_hash != GENESIS_HASH:
        raise ValueError("the first record (seq 1) must chain onto GENESIS_HASH")
    return seal_made(cipher, log_id, seq, at, kind, prev_hash, payload)


def seal_made(
    cipher: AuditCipher, log_id: str, seq: int, at: str, kind: str, prev_hash: str, payload: Mapping[str, Any]
) -> AuditRecord:
    """`seal_record` for a caller that made the fields itself (the store: seq one past the head it read in the
    same transaction, the time it formatted, that head's hash, an event's kind), so they are not checked again:
    the checks were about a tenth of sealing, on three records per poll. The payload is still checked
    (`canonical_json`): it holds what providers and people sent."""
    ciphertext = cipher.seal(canonical_json(payload), record_aad(log_id, seq, at, kind))
    return AuditRecord(
        log_id=log_id,
        seq=seq,
        at=at,
        kind=kind,
        prev_hash=prev_hash,
        ciphertext=ciphertext,
        this_hash=hash_fields_unchecked(prev_hash, log_id, seq, at, kind, ciphertext),
    )


def open_record(cipher: AuditCipher, record: AuditRecord) -> dict[str, Any]:
    """Decrypt one record; the AAD check also catches metadata (log id, seq, time, kind) edited in place."""
    where = f"record {record.seq} of log {record.log_id!r}"
    try:
        plaintext = cipher.open(record.ciphertext, record_aad(record.log_id, record.seq, record.at, record.kind))
    except AuditDecryptError as exc:
        raise AuditDecryptError(f"{where}: {exc}") from None
    try:
        payload = json.loads(plaintext.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise AuditError(f"{where} decrypted but is not UTF-8 JSON: it was written by an incompatible tool") from None
    if not isinstance(payload, dict):
        raise AuditError(f"{where} decrypted but is not a JSON object: it was written by an incompatible tool")
    return payload
