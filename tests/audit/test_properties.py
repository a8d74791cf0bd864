"""Properties over random payloads: sealed chains verify; any single flipped ciphertext byte is pinned."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pollwarden.audit import AuditCipher, canonical_json, open_record, verify

from .conftest import build_log

# One key for the module: hypothesis reruns the test body many times and a function fixture would not reset.
CIPHER = AuditCipher(os.urandom(32))

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
@given(payloads, st.data())
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
