"""Properties over random payloads: sealed chains verify; any single flipped ciphertext byte is pinned; any
suffix of any log, or any whole log, deleted from a store with signed heads fails against the later head."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from pollwarden.audit import (
    GENESIS_HASH,
    AuditCipher,
    AuditRecord,
    Head,
    HeadFile,
    canonical_json,
    open_record,
    seal_record,
    sign_head,
    verify,
)

from .conftest import build_log

# One key for the module: hypothesis reruns the test body many times and a function fixture would not reset.
CIPHER = AuditCipher(os.urandom(32))
SIGNING_KEY = Ed25519PrivateKey.generate()

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
payloads = st.lists(st.dictionaries(st.text(max_size=8), json_values, max_size=6), min_size=1, max_size=8)
# A flipped byte is pinned whatever the plaintext was: only the log's length and its records' sizes matter there,
# and drawing nested values was nearly all of that test's CPU (hypothesis's, not the audit's).
flat_payloads = st.lists(
    st.dictionaries(st.text(max_size=8), st.text(max_size=60) | st.integers(), max_size=6), min_size=1, max_size=8
)


@settings(max_examples=60, deadline=None)
@given(payloads)
def test_sealed_chains_verify_and_open_to_their_payloads(items: list[dict[str, Any]]) -> None:
    log = build_log(CIPHER, "op_prop", len(items), payloads=items)
    report = verify(log, [], None)
    assert report.ok, report.problems
    assert report.records == len(items)
    for record, payload in zip(log, items, strict=True):
        assert canonical_json(open_record(CIPHER, record)) == canonical_json(payload)


@settings(max_examples=150, deadline=None)
@given(flat_payloads, st.data())
def test_any_single_flipped_ciphertext_byte_is_pinned_to_its_record(
    items: list[dict[str, Any]], data: st.DataObject
) -> None:
    log = build_log(CIPHER, "op_prop", len(items), payloads=items)
    index = data.draw(st.integers(min_value=0, max_value=len(log) - 1), label="record index")
    target = log[index]
    offset = data.draw(st.integers(min_value=0, max_value=len(target.ciphertext) - 1), label="byte offset")
    mask = data.draw(st.integers(min_value=1, max_value=255), label="xor mask")
    tampered = bytearray(target.ciphertext)
    tampered[offset] ^= mask
    log[index] = replace(target, ciphertext=bytes(tampered))

    report = verify(log, [], None)

    assert not report.ok
    assert len(report.problems) == 1
    problem = report.problems[0]
    assert (problem.log_id, problem.seq) == ("op_prop", index + 1)
    assert problem.what.startswith(f"record {index + 1}: hash mismatch")
    if index + 1 < len(log):
        assert "the record was modified" in problem.what


# -- signed heads: one per "transaction" of random appends across random logs, as the store writes them ----

LOG_IDS = ("op-0", "op-1", "op-2", "sessions")
transactions = st.lists(
    st.dictionaries(st.sampled_from(LOG_IDS), st.integers(min_value=1, max_value=3), min_size=1, max_size=3),
    min_size=1,
    max_size=6,
)


def _commit_history(txs: list[dict[str, int]]) -> tuple[dict[str, list[AuditRecord]], list[Head]]:
    """Records sealed per log and one signed head per transaction, with the store's changes and totals."""
    logs: dict[str, list[AuditRecord]] = {}
    heads: list[Head] = []
    for counter, tx in enumerate(txs, start=1):
        changes = []
        for log_id, count in sorted(tx.items()):
            chain = logs.setdefault(log_id, [])
            for _ in range(count):
                seq = len(chain) + 1
                prev = chain[-1].this_hash if chain else GENESIS_HASH
                chain.append(
                    seal_record(
                        CIPHER,
                        log_id=log_id,
                        seq=seq,
                        at="2025-03-01T10:00:00Z",
                        kind="decision",
                        prev_hash=prev,
                        payload={"seq": seq},
                    )
                )
            changes.append((log_id, len(chain), chain[-1].this_hash))
        heads.append(
            sign_head(
                SIGNING_KEY,
                counter=counter,
                prev_hash=heads[-1].head_hash if heads else GENESIS_HASH,
                changes=changes,
                logs=len(logs),
                records=sum(len(chain) for chain in logs.values()),
                at="2025-03-01T10:00:00Z",
            )
        )
    return logs, heads


@settings(max_examples=50, deadline=None)
@given(transactions, st.data())
def test_any_suffix_or_whole_log_deleted_fails_against_the_later_head(
    txs: list[dict[str, int]], data: st.DataObject
) -> None:
    logs, heads = _commit_history(txs)
    public = SIGNING_KEY.public_key()
    state = {log_id: (len(chain), chain[-1].this_hash) for log_id, chain in logs.items()}
    witnesses = (HeadFile(heads[-1], state), HeadFile(heads[-1]))  # with the state it fixes, and the head alone
    every = [record for log_id in sorted(logs) for record in logs[log_id]]
    assert verify(every, [], public, heads=heads).ok
    for witness in witnesses:
        assert verify(every, [], public, heads=heads, witness=witness).ok

    victim = data.draw(st.sampled_from(sorted(logs)), label="log")
    keep = data.draw(st.integers(min_value=0, max_value=len(logs[victim]) - 1), label="records kept (0: all gone)")
    tampered = [r for r in every if r.log_id != victim or r.seq <= keep]

    # Against the store's own heads: the log that lost records is named.
    report = verify(tampered, [], public, heads=heads)
    assert not report.ok
    assert victim in {p.log_id for p in report.problems}
    # Against a witness's head, whatever heads the store still has: none, or every one.
    for store_heads in (None, heads):
        for witness in witnesses:
            report = verify(tampered, [], public, heads=store_heads, witness=witness)
            assert not report.ok, (store_heads is None, witness.logs is None)
            named = {p.log_id for p in report.problems}
            assert victim in named or (witness.logs is None and "*" in named)
