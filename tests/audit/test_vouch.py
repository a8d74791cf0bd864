"""Rows the audit vouches for, driven directly: the row hash, the vouches a head carries and their encoding, the
replay of what heads vouched for, and the comparison of stored rows with it."""

from __future__ import annotations

import hashlib
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from pollwarden.audit import GENESIS_HASH, Head, head_valid, replay, sign_head
from pollwarden.audit.heads import head_hash_of
from pollwarden.audit.vouch import Vouch, compare_rows, parse_vouches, row_hash, vouches_text

AT = "2025-03-01T12:00:00.000Z"
S1, S2, I1 = "1" * 64, "2" * 64, "a" * 64


def lp(data: bytes) -> bytes:
    return len(data).to_bytes(8, "big") + data


def test_the_row_hash_matches_the_documented_encoding() -> None:
    expected = hashlib.sha256(
        lp(b"pollwarden-row-v1")
        + lp(b"operations")
        + lp(b"state")
        + lp(b"op-a")
        + (3).to_bytes(8, "big")
        + b"s"
        + lp(b"active")
        + b"i"
        + lp(b"12")
        + b"n"
    ).hexdigest()
    assert row_hash("operations", "state", "op-a", ("active", 12, None)) == expected


def test_row_hashes_tell_apart_what_a_concatenation_would_not() -> None:
    assert row_hash("t", "state", "op", ("ab", "c")) != row_hash("t", "state", "op", ("a", "bc"))
    assert row_hash("t", "state", "op", ("1",)) != row_hash("t", "state", "op", (1,))
    assert row_hash("t", "state", "op", (None,)) != row_hash("t", "state", "op", ("",))
    assert row_hash("t", "state", "op", ()) != row_hash("t", "identity", "op", ())
    with pytest.raises(TypeError):
        row_hash("t", "state", "op", (True,))


def test_a_head_without_vouches_hashes_exactly_as_before_schema_8() -> None:
    before = hashlib.sha256(
        lp(b"pollwarden-head-v1")
        + (1).to_bytes(8, "big")
        + lp(bytes(32))
        + lp(b"[]")
        + (0).to_bytes(8, "big")
        + (0).to_bytes(8, "big")
        + lp(AT.encode())
    ).hexdigest()
    fields = {"prev_hash": GENESIS_HASH, "changes": "[]", "at": AT}
    assert head_hash_of(counter=1, logs=0, records=0, **fields) == before
    message = lp(b"pollwarden-head-v1") + (1).to_bytes(8, "big") + lp(bytes(32)) + lp(b"[]")
    message += (0).to_bytes(8, "big") + (0).to_bytes(8, "big") + lp(AT.encode())
    with_vouches = hashlib.sha256(message + lp(b"vouches") + lp(b"[]")).hexdigest()
    assert head_hash_of(counter=1, logs=0, records=0, **fields, vouches="[]") == with_vouches != before


def test_vouches_are_canonical_and_parse_back_by_both_paths() -> None:
    text = vouches_text([("op-b", S2, None), ("op-a", S1, I1)])
    assert text == f'[["op-a","{S1}","{I1}"],["op-b","{S2}",null]]'
    assert parse_vouches(text) == [("op-a", S1, I1), ("op-b", S2, None)]
    one = vouches_text([("op-a", S1, None)])
    assert parse_vouches(one) == [("op-a", S1, None)]  # the fast path
    assert parse_vouches(" " + one) == [("op-a", S1, None)]  # the general path
    assert parse_vouches("") == []
    for bad in ("{", "{}", "[[1,2,3]]", f'[["op","{S1}"]]', f'[["op","{S1[:-1]}",null]]', f'[["", "{S1}", null]]'):
        with pytest.raises(ValueError):
            parse_vouches(bad)
    with pytest.raises(ValueError):
        vouches_text([("op-a", S1, None), ("op-a", S2, None)])


@given(st.lists(st.tuples(st.text(min_size=1, max_size=8), st.sampled_from([S1, S2]), st.sampled_from([I1, None]))))
def test_any_vouches_round_trip(vouches: list[Vouch]) -> None:
    unique = list({log_id: (log_id, state, identity) for log_id, state, identity in vouches}.values())
    assert parse_vouches(vouches_text(unique)) == sorted(unique, key=lambda vouch: vouch[0])


def _heads(key: Ed25519PrivateKey, commits: list[list[Vouch] | None]) -> list[Head]:
    heads: list[Head] = []
    for index, vouches in enumerate(commits, 1):
        prev = heads[-1].head_hash if heads else GENESIS_HASH
        changes = [(f"log-{index}", 1, "f" * 64)]
        heads.append(
            sign_head(key, counter=index, prev_hash=prev, changes=changes, logs=index, records=index, at=AT,
                      vouches=vouches)
        )  # fmt: skip
    return heads


def test_replay_keeps_the_last_state_and_identity_vouched_for_each_row() -> None:
    key = Ed25519PrivateKey.generate()
    heads = _heads(key, [None, [("op-a", S1, I1)], [("op-a", S2, None)]])
    assert heads[0].vouches == "" and head_valid(heads[-1], key.public_key())
    journal = replay(heads, key.public_key())
    assert journal.findings == [] and journal.vouching_since == 2
    vouched = journal.vouched["op-a"]
    assert (vouched.state, vouched.state_at, vouched.identity, vouched.identity_at) == (S2, 3, I1, 2)


def test_a_vouch_dropped_from_a_head_breaks_the_chain() -> None:
    key = Ed25519PrivateKey.generate()
    heads = _heads(key, [[("op-a", S1, I1)], [("op-a", S2, None)]])
    forged = [heads[0], heads[1]._replace(vouches=vouches_text([("op-a", S1, None)]))]
    first = replay(forged, key.public_key()).findings[0]
    assert first.what.startswith("head #2: its hash does not match its fields"), first


def test_malformed_vouches_are_a_finding_not_a_crash() -> None:
    key = Ed25519PrivateKey.generate()
    (head,) = _heads(key, [[]])
    bad = "[[1]]"
    fields = {name: getattr(head, name) for name in ("counter", "prev_hash", "changes", "logs", "records", "at")}
    rehashed = head._replace(vouches=bad, head_hash=head_hash_of(**fields, vouches=bad))
    (finding,) = replay([rehashed], None).findings
    assert "malformed" in finding.what


def test_stored_rows_are_compared_with_what_the_heads_vouched_for() -> None:
    key = Ed25519PrivateKey.generate()
    journal = replay(_heads(key, [[("op-a", S1, I1), ("op-b", S1, I1), ("op-gone", S1, I1)]]), key.public_key())
    found = compare_rows(
        [("op-a", S1, I1), ("op-b", S2, I1), ("op-new", S1, I1)], journal.vouched, journal.vouching_since
    )
    assert (found.rows, found.unvouched) == (3, 0)
    problems = dict(found.problems or [])
    assert set(problems) == {"op-b", "op-new", "op-gone"}
    assert "differs from what head #1 vouched for" in problems["op-b"]
    assert "no signed head vouches for its row" in problems["op-new"]
    assert problems["op-gone"].startswith("deleted:")


def test_before_any_head_vouched_rows_are_counted_not_reported() -> None:
    found = compare_rows([("op-a", S1, I1), ("op-b", S2, I1)], {}, None)
    assert (found.rows, found.unvouched, found.problems) == (2, 2, [])


def test_a_head_file_keeps_its_vouches_and_older_ones_read_as_before(tmp_path: object) -> None:
    key = Ed25519PrivateKey.generate()
    legacy, vouching = _heads(key, [None, [("op-a", S1, I1)]])
    assert "vouches" not in legacy.to_json() and Head.from_json(legacy.to_json()) == legacy
    assert Head.from_json(json.loads(json.dumps(vouching.to_json()))) == vouching
