from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from pollwarden.audit import (
    GENESIS_HASH,
    AuditCipher,
    AuditDecryptError,
    canonical_json,
    chain_hash,
    open_record,
    record_aad,
    seal_record,
)

from .conftest import at_for, build_log


def _lp(data: bytes) -> bytes:
    return len(data).to_bytes(8, "big") + data


def test_canonical_json_is_sorted_compact_and_utf8() -> None:
    assert canonical_json({"b": 1, "a": {"d": [1, 2], "c": "é"}}) == '{"a":{"c":"é","d":[1,2]},"b":1}'.encode()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_canonical_json_rejects_nan_and_infinity(bad: float) -> None:
    with pytest.raises(ValueError, match="NaN"):
        canonical_json({"x": bad})


def test_canonical_json_rejects_non_string_keys_that_json_would_silently_convert() -> None:
    with pytest.raises(TypeError, match=r"key 1 at \$\.outer"):
        canonical_json({"outer": {1: "x"}})


def test_canonical_json_rejects_unserialisable_values() -> None:
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        canonical_json({"x": b"bytes"})


def test_canonical_json_escapes_a_lone_surrogate_and_keeps_every_other_string_as_before(cipher: AuditCipher) -> None:
    # Item 6, defence in depth: text that is not Unicode must not crash sealing. Only such text changes form
    # (to the JSON escape that reads back as the same string); the bytes, and so the hashes, of all else stay.
    assert canonical_json({"s": "\ud800", "t": "é"}) == b'{"s":"\\ud800","t":"\xc3\xa9"}'
    assert canonical_json({"\udfffk": ["a\udc80b"]}) == b'{"\\udfffk":["a\\udc80b"]}'
    assert canonical_json({"pair": "\U0001f600"}) == '{"pair":"\U0001f600"}'.encode()
    payload = {"state": "\ud800x"}
    record = seal_record(
        cipher, log_id="op", seq=1, at="2025-01-01T00:00:00Z", kind="k", prev_hash=GENESIS_HASH, payload=payload
    )
    assert open_record(cipher, record) == payload


def test_chain_hash_matches_the_documented_encoding() -> None:
    ciphertext = bytes(range(40))
    prev = hashlib.sha256(b"prev").hexdigest()
    expected = hashlib.sha256(
        _lp(b"pollwarden-audit-v1")
        + _lp(bytes.fromhex(prev))
        + _lp("op_ü".encode())
        + (7).to_bytes(8, "big")
        + _lp(b"2025-03-01T10:00:00Z")
        + _lp(b"decision")
        + _lp(ciphertext)
    ).hexdigest()
    assert chain_hash(prev, "op_ü", 7, "2025-03-01T10:00:00Z", "decision", ciphertext) == expected


def test_chain_hash_covers_every_field() -> None:
    base = (GENESIS_HASH, "op", 1, "2025-03-01T10:00:00Z", "decision", b"ct")
    reference = chain_hash(*base)
    variants = [
        ("1" * 64, "op", 1, "2025-03-01T10:00:00Z", "decision", b"ct"),
        (GENESIS_HASH, "oq", 1, "2025-03-01T10:00:00Z", "decision", b"ct"),
        (GENESIS_HASH, "op", 2, "2025-03-01T10:00:00Z", "decision", b"ct"),
        (GENESIS_HASH, "op", 1, "2025-03-01T10:00:01Z", "decision", b"ct"),
        (GENESIS_HASH, "op", 1, "2025-03-01T10:00:00Z", "response", b"ct"),
        (GENESIS_HASH, "op", 1, "2025-03-01T10:00:00Z", "decision", b"cu"),
    ]
    assert len({chain_hash(*v) for v in variants} | {reference}) == len(variants) + 1


def test_chain_hash_field_boundaries_are_unambiguous() -> None:
    # Without length prefixes, moving a character between adjacent fields would keep the hash.
    one = chain_hash(GENESIS_HASH, "op", 1, "2025-03-01T10:00:00Z", "decisionX", b"ct")
    two = chain_hash(GENESIS_HASH, "op", 1, "2025-03-01T10:00:00Z", "decision", b"Xct")
    assert one != two


@pytest.mark.parametrize("prev", ["0" * 63, "A" * 64, "g" * 64, ""])
def test_chain_hash_rejects_malformed_prev_hash(prev: str) -> None:
    with pytest.raises(ValueError, match="prev_hash"):
        chain_hash(prev, "op", 1, "2025-03-01T10:00:00Z", "decision", b"")


@pytest.mark.parametrize("seq", [0, -1, 2**63, True])
def test_chain_hash_rejects_out_of_range_seq(seq: int) -> None:
    with pytest.raises(ValueError, match="seq"):
        chain_hash(GENESIS_HASH, "op", seq, "2025-03-01T10:00:00Z", "decision", b"")


def test_seal_and_open_round_trip(cipher: AuditCipher) -> None:
    records = build_log(cipher, "op_1", 3)
    assert [r.seq for r in records] == [1, 2, 3]
    assert records[0].prev_hash == GENESIS_HASH
    for before, after in itertools.pairwise(records):
        assert after.prev_hash == before.this_hash
    payload = open_record(cipher, records[1])
    assert payload["requests_used"] == 2
    assert records[1].this_hash == chain_hash(
        records[1].prev_hash, "op_1", 2, records[1].at, "decision", records[1].ciphertext
    )


def test_payload_is_not_visible_in_the_record(cipher: AuditCipher) -> None:
    secret = "sk-live-7f3a9c1e"
    record = seal_record(
        cipher,
        log_id="op",
        seq=1,
        at=at_for(1),
        kind="call",
        prev_hash=GENESIS_HASH,
        payload={"token": secret},
    )
    assert secret.encode() not in record.ciphertext
    assert secret not in repr(record)


@pytest.mark.parametrize(
    "change",
    [
        {"log_id": "other"},
        {"seq": 2},
        {"at": "2025-03-01T10:59:59Z"},
        {"kind": "approval"},
    ],
)
def test_ciphertext_moved_to_other_metadata_fails_to_decrypt(cipher: AuditCipher, change: dict[str, object]) -> None:
    record = build_log(cipher, "op_1", 1)[0]
    moved = replace(record, **change)  # type: ignore[arg-type]
    with pytest.raises(AuditDecryptError, match=r"record .* of log"):
        open_record(cipher, moved)


def test_wrong_key_cannot_open_a_record(cipher: AuditCipher) -> None:
    record = build_log(cipher, "op_1", 1)[0]
    with pytest.raises(AuditDecryptError, match="wrong audit key"):
        open_record(AuditCipher(os.urandom(32)), record)


def test_aad_binds_the_metadata_fields_without_ambiguity() -> None:
    assert record_aad("op", 1, "a", "bc") != record_aad("op", 1, "ab", "c")


@pytest.mark.parametrize("at", ["2025-03-01 10:00:00", "2025-03-01T10:00:00+01:00", "2025-03-01T10:00:00", "now"])
def test_seal_refuses_times_that_are_not_rfc3339_utc(cipher: AuditCipher, at: str) -> None:
    with pytest.raises(ValueError, match="at"):
        seal_record(cipher, log_id="op", seq=1, at=at, kind="decision", prev_hash=GENESIS_HASH, payload={})


def test_first_record_must_start_from_genesis(cipher: AuditCipher) -> None:
    with pytest.raises(ValueError, match="GENESIS_HASH"):
        seal_record(cipher, log_id="op", seq=1, at=at_for(1), kind="decision", prev_hash="1" * 64, payload={})


def test_open_record_returns_exactly_the_sealed_payload(cipher: AuditCipher) -> None:
    payload = {"z": [1, 2.5, None, True], "a": {"nested": "ünïcode"}}
    record = seal_record(
        cipher, log_id="op", seq=1, at=at_for(1), kind="decision", prev_hash=GENESIS_HASH, payload=payload
    )
    assert open_record(cipher, record) == json.loads(json.dumps(payload))


def test_canonical_json_from_many_threads_at_once_is_what_json_dumps_gives_each() -> None:
    # One encoder serves every caller: a worker's lanes and the API's watches seal on their own threads.
    payloads = [{"n": n, "nested": {"z": [n, "é" * (n % 5)], "a": {"x": n / 3}}, "s": str(n)} for n in range(400)]
    expected = [
        json.dumps(p, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        for p in payloads
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        for _ in range(5):
            assert list(pool.map(canonical_json, payloads)) == expected
