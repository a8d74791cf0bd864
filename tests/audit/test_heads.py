"""Signed heads and their replay, driven directly: the encoding, the fast paths, every way a chain of heads breaks."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from pollwarden.audit import GENESIS_HASH, Head, StoredHeads, head_valid, replay, sign_head
from pollwarden.audit.chain import MAX_SEQ, is_hash_text
from pollwarden.audit.heads import (
    changes_text,
    changes_value,
    checked_each,
    head_hash_of,
    head_hash_ok,
    parse_changes,
    parse_changes_json,
)

AT = "2025-03-01T12:00:00.000Z"
H1, H2, H3 = "1" * 64, "2" * 64, "a" * 64


def lp(data: bytes) -> bytes:
    return len(data).to_bytes(8, "big") + data


def chain(key: Ed25519PrivateKey, commits: list[list[tuple[str, int, str]]]) -> list[Head]:
    """Heads as the store signs them: one per commit, totals carried forward."""
    heads: list[Head] = []
    state: dict[str, int] = {}
    for changes in commits:
        for log_id, seq, _ in changes:
            state[log_id] = seq
        prev = heads[-1].head_hash if heads else GENESIS_HASH
        heads.append(
            sign_head(
                key,
                counter=len(heads) + 1,
                prev_hash=prev,
                changes=changes,
                logs=len(state),
                records=sum(state.values()),
                at=AT,
            )
        )
    return heads


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def test_the_head_hash_is_the_documented_encoding(key: Ed25519PrivateKey) -> None:
    (head,) = chain(key, [[("op_b", 2, H2), ("op_a", 1, H1)]])
    assert head.changes == f'[["op_a",1,"{H1}"],["op_b",2,"{H2}"]]'  # sorted by log id, no spaces
    expected = hashlib.sha256(
        lp(b"pollwarden-head-v1")
        + (1).to_bytes(8, "big")
        + lp(bytes.fromhex(GENESIS_HASH))
        + lp(head.changes.encode())
        + (2).to_bytes(8, "big")
        + (3).to_bytes(8, "big")
        + lp(AT.encode())
    ).hexdigest()
    assert (
        head.head_hash
        == expected
        == head_hash_of(counter=1, prev_hash=GENESIS_HASH, changes=head.changes, logs=2, records=3, at=AT)
    )
    assert head_valid(head, key.public_key())
    assert not head_valid(head, Ed25519PrivateKey.generate().public_key())


@pytest.mark.parametrize(
    "field, value",
    [("changes", f'[["op_a",2,"{H1}"]]'), ("logs", 5), ("records", 9), ("at", "2025-03-01T12:00:01.000Z")],
)
def test_any_field_changed_breaks_the_hash_and_the_signature(key: Ed25519PrivateKey, field: str, value: object) -> None:
    (head,) = chain(key, [[("op_a", 1, H1)]])
    edited = head._replace(**{field: value})  # type: ignore[arg-type]
    assert not head_hash_ok(edited) and not head_valid(edited, key.public_key())


def test_sign_head_refuses_what_no_store_writes(key: Ed25519PrivateKey) -> None:
    with pytest.raises(ValueError, match="counter 1"):
        sign_head(key, counter=0, prev_hash=GENESIS_HASH, changes=[], logs=0, records=0, at=AT)
    with pytest.raises(ValueError, match="GENESIS_HASH only for head 1"):
        sign_head(key, counter=2, prev_hash=GENESIS_HASH, changes=[], logs=0, records=0, at=AT)
    with pytest.raises(ValueError, match="twice"):
        changes_text([("op_a", 1, H1), ("op_a", 2, H2)])
    with pytest.raises(ValueError, match="UTC"):
        sign_head(key, counter=1, prev_hash=GENESIS_HASH, changes=[], logs=0, records=0, at="2025-03-01T12:00:00+01:00")


@pytest.mark.parametrize(
    "value, ok",
    [
        ("0" * 64, True),
        ("0123456789abcdef" * 4, True),
        ("A" * 64, False),
        ("0" * 63, False),
        ("0" * 65, False),
        (" " + "0" * 63, False),
        ("g" + "0" * 63, False),
        ("0" * 63 + "\n", False),
        (b"0" * 64, False),
        (None, False),
    ],
)
def test_is_hash_text_accepts_only_64_lowercase_hex(value: object, ok: bool) -> None:
    assert is_hash_text(value) is ok


_log_ids = st.text(min_size=1, max_size=12).filter(lambda s: s.strip() == s or True)
_hashes = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


_changes = st.lists(
    st.tuples(st.text(min_size=1, max_size=12), st.integers(min_value=1, max_value=MAX_SEQ), _hashes),
    min_size=1,
    max_size=20,
    unique_by=lambda change: change[0],
)


@settings(max_examples=200, deadline=None)
@given(changes=_changes)
def test_the_canonical_fast_path_reads_what_json_reads(changes: list[tuple[str, int, str]]) -> None:
    text = changes_text(changes)
    assert parse_changes(text) == sorted(changes)
    assert parse_changes(text) == [tuple(item) for item in json.loads(text)]


def _outcome(parse: Callable[[str], list[tuple[str, int, str]]], text: str) -> list[tuple[str, int, str]] | str:
    """What a parser reads from `text`, or the words it refuses it with."""
    try:
        return parse(text)
    except ValueError as exc:
        return str(exc)


def _as_documented(text: str) -> list[tuple[str, int, str]]:
    """The rules of a head's changes, one change at a time: what every faster path must read (or refuse) alike."""
    return checked_each(changes_value(text))


def _reads_as_documented(text: str) -> None:
    expected = _outcome(_as_documented, text)
    assert _outcome(parse_changes, text) == expected
    assert _outcome(parse_changes_json, text) == expected


_near_canonical = st.lists(
    st.tuples(
        st.one_of(st.text(max_size=6), st.sampled_from(['a"b', "a\\b", "a\x00", "op_a"])),
        st.one_of(st.integers(min_value=-2, max_value=MAX_SEQ + 2), st.sampled_from([MAX_SEQ, 10**19, 10**20])),
        st.one_of(_hashes, st.sampled_from(["A" * 64, "0" * 63, H1])),
    ),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(changes=_near_canonical, spaced=st.booleans())
def test_the_fast_path_accepts_nothing_the_general_path_refuses(
    changes: list[tuple[str, int, str]], spaced: bool
) -> None:
    """Texts close to the canonical form (escapes, quotes, control characters, out-of-range seqs, bad hashes,
    spacing): the fast path either reads exactly what json.loads and the checks read, or both refuse."""
    text = json.dumps(
        [list(change) for change in changes], ensure_ascii=False, separators=None if spaced else (",", ":")
    )
    _reads_as_documented(text)


_A, _B = f'["op_a",1,"{H1}"]', f'["op_b",2,"{H2}"]'


@pytest.mark.parametrize(
    "text",
    [
        f"[{_A},{_B}]",
        f"[{_A}, {_B}]",
        f"x[{_A},{_B}]",
        f"[{_A},{_B}]x",
        f"[{_A}{_B}]",
        f"[{_A};{_B}]",
        f"[{_A},,{_B}]",
        f"[{_A}],[{_B}]",
        f"[[{_A},{_B}]]",
        f"[{_A},{_B},]",
        f'[{_A},["op_c",{MAX_SEQ + 1},"{H3}"]]',
        f'[{_A},["op_c",01,"{H3}"]]',
        f'[{_A},["op_c",true,"{H3}"]]',
        f'[{_A},["op_c",3.0,"{H3}"]]',
        f'[{_A},["op_c",0,"{H3}"]]',
        f'[{_A},["op_c",3,"{H3.upper()}"]]',
        f'[{_A},["op_c",3,"{H3[:-2]} 0"]]',
        f'[{_A},["op_c",3,"{H3[:-1]}\u0130"]]',
        f'[{_A},["op_c",3,"{H3[:-1]}"]]',
        f'[["op_a",1,"{H1[:-1]}"],["op_b",2,"{H2}0"]]',
        f'[{_A},["",3,"{H3}"]]',
        f'[{_A},[3,3,"{H3}"]]',
        f'[{_A},["op_c",3,7]]',
        f'[{_A},["op_c",3]]',
        f'[{_A},"x"]',
        f'[{_A},[["op_c",3,"{H3}"]]]',
        f'[ {_A} , ["op_c", 3, "{H3}"] ]',
        "[]",
        f'[{_A},["op_\\u0063",3,"{H3}"]]',
    ],
)
def test_text_around_the_changes_is_read_as_json_reads_it(text: str) -> None:
    """Near misses of the canonical form and of each rule, around and inside a batch of changes: every path
    reads (or refuses, in the same words) what the rules one change at a time read."""
    _reads_as_documented(text)


@pytest.mark.parametrize(
    "text, phrase",
    [
        ("not json", "not JSON"),
        ("{}", "not a JSON list"),
        ('[["op_a",1]]', "triple"),
        (f'[["",1,"{H1}"]]', "names no log"),
        (f'[["op_a",0,"{H1}"]]', "malformed seq"),
        (f'[["op_a",{MAX_SEQ + 1},"{H1}"]]', "malformed seq"),
        (f'[["op_a",true,"{H1}"]]', "malformed seq"),
        ('[["op_a",1,"ABC"]]', "malformed hash"),
        ("[" * 100_000, "not JSON"),
    ],
)
def test_malformed_changes_say_what_is_wrong(text: str, phrase: str) -> None:
    with pytest.raises(ValueError, match=phrase):
        parse_changes(text)


def test_head_from_json_names_the_bad_field(key: Ed25519PrivateKey) -> None:
    (head,) = chain(key, [[("op_a", 1, H1)]])
    assert Head.from_json(head.to_json()) == head
    with pytest.raises(ValueError, match=r"lacks field.*signature"):
        Head.from_json({k: v for k, v in head.to_json().items() if k != "signature"})
    with pytest.raises(ValueError, match="'counter' must be a non-negative integer"):
        Head.from_json({**head.to_json(), "counter": True})
    with pytest.raises(ValueError, match="'changes' must be a string"):
        Head.from_json({**head.to_json(), "changes": []})


# -- replay -------------------------------------------------------------------------------------------------


def test_replay_gives_every_logs_last_seq_and_checks_only_the_newest_signature(key: Ed25519PrivateKey) -> None:
    heads = chain(key, [[("op_a", 1, H1)], [("op_a", 3, H3), ("op_b", 1, H2)], [("op_b", 2, H3)]])
    journal = replay(heads, key.public_key(), snapshot_at=[2])
    assert journal.findings == [] and journal.count == 3 and journal.newest == heads[-1]
    assert journal.state == {"op_a": (3, H3), "op_b": (2, H3)}
    assert journal.snapshots[2] == {"op_a": (3, H3), "op_b": (1, H2)}
    # An earlier head's signature is not what proves it: the chain to the newest does.
    heads[0] = heads[0]._replace(signature="00" * 64)
    assert replay(heads, key.public_key()).findings == []
    heads[-1] = heads[-1]._replace(signature="00" * 64)
    (finding,) = replay(heads, key.public_key()).findings
    assert "the newest head (#3): bad signature" in finding.what


def _finding(heads: list[Head], key: Ed25519PrivateKey) -> str:
    journal = replay(heads, key.public_key())
    # The first break is named; a forged newest head also fails its signature, said separately.
    assert journal.broken and journal.findings
    return journal.findings[0].what


def test_each_break_of_the_head_chain_is_named(key: Ed25519PrivateKey) -> None:
    commits = [[("op_a", 1, H1)], [("op_a", 2, H2)], [("op_a", 3, H3)], [("op_b", 1, H1)]]
    heads = chain(key, commits)
    assert "heads #2–#3 missing" in _finding([heads[0], heads[3]], key)
    assert "head #2 missing" in _finding([heads[0], heads[2], heads[3]], key)
    assert "head #2 is stored out of order" in _finding([heads[0], heads[1], heads[1], heads[2], heads[3]], key)
    other = chain(key, [[("op_z", 1, H1)], [("op_z", 2, H2)]])
    assert "does not follow head #1" in _finding([heads[0], other[1], heads[2], heads[3]], key)
    forged = heads[1]._replace(head_hash="f" * 64)
    assert "head #2: its hash does not match its fields" in _finding([heads[0], forged, heads[2], heads[3]], key)


def test_heads_that_rewrite_history_are_caught_even_when_signed(key: Ed25519PrivateKey) -> None:
    back = chain(key, [[("op_a", 3, H1)], [("op_a", 2, H2)]])
    assert "moves log 'op_a' back from seq 3 to 2" in _finding(back, key)
    wrong_total = [
        sign_head(key, counter=1, prev_hash=GENESIS_HASH, changes=[("op_a", 2, H1)], logs=1, records=5, at=AT)
    ]
    assert "claims 1 logs and 5 records" in _finding(wrong_total, key)
    garbled = [
        wrong_total[0]._replace(
            changes="[",
            head_hash=head_hash_of(counter=1, prev_hash=GENESIS_HASH, changes="[", logs=1, records=5, at=AT),
        )
    ]
    assert "malformed: its changes are not JSON" in _finding(garbled, key)


# -- replay of a store's rows -------------------------------------------------------------------------------


def test_stored_rows_replay_as_the_heads_they_are(key: Ed25519PrivateKey) -> None:
    """A store hands over seven columns per head and the newest whole: the replay is the one of the heads."""
    heads = chain(key, [[("op_a", 1, H1)], [("op_a", 3, H3), ("op_b", 1, H2)], [("op_b", 2, H3)]])
    stored = StoredHeads([head.replayed() for head in heads], heads[-1])
    journal = replay(stored, key.public_key(), snapshot_at=[2])
    assert journal == replay(heads, key.public_key(), snapshot_at=[2])
    assert journal.findings == [] and journal.newest == heads[-1] and journal.count == 3


def test_a_newest_head_that_is_not_the_last_row_replayed_is_a_finding(key: Ed25519PrivateKey) -> None:
    """The signature checked must be the one over the chain replayed; one head read twice must agree."""
    heads = chain(key, [[("op_a", 1, H1)], [("op_a", 2, H2)]])
    rows = [head.replayed() for head in heads]
    for newest in (heads[0], None):
        journal = replay(StoredHeads(rows, newest), key.public_key())
        assert journal.newest is None
        assert ["the newest head read whole is not the last head replayed" in f.what for f in journal.findings] == [
            True
        ]
    journal = replay(StoredHeads([], heads[-1]), key.public_key())
    assert journal.newest is None and "not the last head replayed" in journal.findings[0].what


@pytest.mark.parametrize("position", [0, 3, 4])
def test_a_stored_head_whose_numbers_are_not_integers_is_malformed(key: Ed25519PrivateKey, position: int) -> None:
    """A database hands over what a column holds: text where a number belongs is a finding, not a traceback."""
    heads = chain(key, [[("op_a", 1, H1)], [("op_a", 2, H2)]])
    rows = [head.replayed() for head in heads]
    bad = list(rows[1])
    bad[position] = str(bad[position])
    rows[1] = tuple(bad)
    journal = replay(StoredHeads(rows, Head._make([*bad, heads[1].key_id, heads[1].signature])), None)
    assert journal.broken
    assert "malformed: its counter, logs and records must be integers" in journal.findings[0].what


def test_after_a_break_the_later_heads_changes_still_replay(key: Ed25519PrivateKey) -> None:
    """One deleted head is one finding: the logs of the heads after it stay covered, not all reported again."""
    heads = chain(key, [[("op_a", 1, H1)], [("op_a", 2, H2)], [("op_b", 1, H1)], [("op_c", 1, H3)]])
    journal = replay([heads[0], heads[2], heads[3]], key.public_key())
    assert [f.what for f in journal.findings] == ["head #2 missing: the heads jump to #3 (heads were deleted)"]
    assert journal.state == {"op_a": (1, H1), "op_b": (1, H1), "op_c": (1, H3)}
