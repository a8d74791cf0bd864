"""One test per kind of tampering; each pins the reported record and a phrase of the message."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Iterator
from dataclasses import replace

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from pollwarden.audit import (
    GENESIS_HASH,
    AuditCipher,
    AuditRecord,
    Problem,
    VerifyReport,
    chain_hash,
    seal_record,
    verify,
)

from .conftest import Signer, at_for, build_log


def only_problem(report: VerifyReport) -> Problem:
    assert not report.ok
    assert len(report.problems) == 1, report.problems
    return report.problems[0]


def flip(record: AuditRecord, index: int = 5) -> AuditRecord:
    data = bytearray(record.ciphertext)
    data[index] ^= 0x40
    return replace(record, ciphertext=bytes(data))


def test_intact_log_verifies_and_counts(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 6)
    cps = [signer.head(log, 3), signer.head(log)]
    report = verify(log, cps, signer.public)
    assert report.ok
    assert report.problems == ()
    assert (report.records, report.logs, report.checkpoints) == (6, 1, 2)
    assert report.bytes_verified == sum(len(r.ciphertext) for r in log)


def test_interleaved_logs_verify(cipher: AuditCipher, signer: Signer) -> None:
    a, b = build_log(cipher, "op_a", 5), build_log(cipher, "op_b", 4)
    mixed = [r for pair in zip(a, b, strict=False) for r in pair] + a[4:]
    report = verify(mixed, [signer.head(a), signer.head(b)], signer.public)
    assert report.ok
    assert (report.records, report.logs) == (9, 2)


def test_verify_consumes_a_one_pass_stream(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 5)
    cp = signer.head(log)

    def stream() -> Iterator[AuditRecord]:
        yield from log

    assert verify(stream(), [cp], signer.public).ok


def test_flipped_ciphertext_byte(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 6)
    log[2] = flip(log[2])
    problem = only_problem(verify(log, [signer.head(log, 2)], signer.public))
    assert (problem.log_id, problem.seq) == ("op_1", 3)
    assert problem.what.startswith("record 3: hash mismatch")
    assert "the record was modified" in problem.what


def test_changed_stored_hash(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 6)
    log[2] = replace(log[2], this_hash="ab" * 32)
    problem = only_problem(verify(log, [], signer.public))
    assert problem.seq == 3
    assert "stored hash changed" in problem.what
    assert "abababababab…" in problem.what


def test_changed_stored_hash_of_the_last_record_is_told_apart_by_its_checkpoint(
    cipher: AuditCipher, signer: Signer
) -> None:
    log = build_log(cipher, "op_1", 4)
    cp = signer.head(log)
    log[3] = replace(log[3], this_hash="ab" * 32)
    problem = only_problem(verify(log, [cp], signer.public))
    assert problem.seq == 4
    assert "stored hash changed" in problem.what
    assert f"checkpoint #{cp.counter}" in problem.what


def test_last_record_mismatch_without_evidence_says_both_are_possible(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 4)
    log[3] = flip(log[3])
    problem = only_problem(verify(log, [], signer.public))
    assert problem.seq == 4
    assert "the record or its stored hash was modified" in problem.what


def test_changed_clear_metadata_is_a_hash_mismatch(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 5)
    log[1] = replace(log[1], kind="approval")
    problem = only_problem(verify(log, [], signer.public))
    assert problem.seq == 2
    assert "hash mismatch" in problem.what


def test_dropped_record(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 7)
    del log[4]
    problem = only_problem(verify(log, [], signer.public))
    assert problem.seq == 5
    assert problem.what == "record 5 missing: seq jumps from 4 to 6"


def test_several_dropped_records(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 9)
    del log[3:6]
    problem = only_problem(verify(log, [], signer.public))
    assert problem.seq == 4
    assert problem.what == "records 4–6 missing: seq jumps from 3 to 7"


def test_dropped_first_record(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 3)
    problem = only_problem(verify(log[1:], [], signer.public))
    assert problem.seq == 1
    assert problem.what == "record 1 missing: the log starts at seq 2"


def test_dropped_record_with_the_rest_renumbered(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 6)
    renumbered = log[:2] + [replace(r, seq=r.seq - 1) for r in log[3:]]
    problem = only_problem(verify(renumbered, [], signer.public))
    assert problem.seq == 3
    assert "out of order: its hash verifies as record 4 of this log" in problem.what


def test_two_records_swapped_in_storage_order(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 6)
    log[2], log[3] = log[3], log[2]
    problem = only_problem(verify(log, [], signer.public))
    assert problem.seq == 4
    assert problem.what == "record 4 out of order: it is stored before record 3 (records swapped or reordered)"


def test_two_records_swapped_with_their_seq_numbers(cipher: AuditCipher, signer: Signer) -> None:
    # What swapping two rows' contents in a table ordered by seq looks like.
    log = build_log(cipher, "op_1", 6)
    log[2], log[3] = replace(log[3], seq=3), replace(log[2], seq=4)
    problem = only_problem(verify(log, [], signer.public))
    assert problem.seq == 3
    assert "out of order: its hash verifies as record 4 of this log, not at seq 3" in problem.what
    assert "prev_hash link broken" in problem.what


def test_record_stored_twice(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 4)
    log.insert(2, log[1])
    problem = only_problem(verify(log, [], signer.public))
    assert problem.seq == 2
    assert "record 2 duplicated" in problem.what


def test_record_moved_backwards(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 5)
    moved = [log[0], log[1], log[2], log[0], log[3], log[4]]
    problem = only_problem(verify(moved, [], signer.public))
    assert problem.seq == 1
    assert "record 1 out of order: it is stored after record 3" in problem.what


def test_record_spliced_from_another_log(cipher: AuditCipher, signer: Signer) -> None:
    a, b = build_log(cipher, "op_a", 6), build_log(cipher, "op_b", 6)
    spliced = [*a[:3], replace(b[2], log_id="op_a", seq=4), *a[4:]]
    problem = only_problem(verify(b + spliced, [], signer.public))
    assert (problem.log_id, problem.seq) == ("op_a", 4)
    assert "spliced from log 'op_b': its hash verifies as record 3 of that log" in problem.what
    assert "prev_hash link broken" in problem.what


def test_first_record_spliced_from_another_log_is_caught_by_its_log_id(cipher: AuditCipher, signer: Signer) -> None:
    # Every log's first record links to GENESIS_HASH, so only the log id in the hash gives it away.
    a, b = build_log(cipher, "op_a", 3), build_log(cipher, "op_b", 3)
    spliced = [replace(b[0], log_id="op_a"), *a[1:]]
    problem = only_problem(verify(b + spliced, [], signer.public))
    assert (problem.log_id, problem.seq) == ("op_a", 1)
    assert "spliced from log 'op_b' (log id mismatch" in problem.what


def test_spliced_record_is_caught_even_when_its_log_is_not_being_verified(cipher: AuditCipher, signer: Signer) -> None:
    a, b = build_log(cipher, "op_a", 6), build_log(cipher, "op_b", 6)
    spliced = [*a[:3], replace(b[2], log_id="op_a", seq=4), *a[4:]]
    problem = only_problem(verify(spliced, [], signer.public))
    assert problem.seq == 4
    assert "prev_hash link broken" in problem.what
    assert "the record was replaced" in problem.what


def test_inserted_self_consistent_record(cipher: AuditCipher, signer: Signer) -> None:
    # Someone with the AES key forges a well-formed record but cannot make it link to the real chain.
    log = build_log(cipher, "op_1", 4)
    forged = seal_record(
        cipher, log_id="op_1", seq=3, at=at_for(3), kind="decision", prev_hash="cd" * 32, payload={"x": 1}
    )
    problem = only_problem(verify([*log[:2], forged, *log[3:]], [], signer.public))
    assert problem.seq == 3
    assert "the record is intact but does not follow record 2" in problem.what


def test_changed_prev_hash(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 4)
    log[2] = replace(log[2], prev_hash="ef" * 32)
    problem = only_problem(verify(log, [], signer.public))
    assert problem.seq == 3
    assert "prev_hash link broken" in problem.what


def test_malformed_stored_hash(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 3)
    log[1] = replace(log[1], this_hash="not-a-hash")
    problem = only_problem(verify(log, [], signer.public))
    assert problem.seq == 2
    assert "malformed stored hash" in problem.what


def test_only_the_first_bad_record_of_a_log_is_reported(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 8)
    log[2], log[6] = flip(log[2]), flip(log[6])
    problem = only_problem(verify(log, [], signer.public))
    assert problem.seq == 3


def test_each_damaged_log_gets_its_own_problem(cipher: AuditCipher, signer: Signer) -> None:
    a, b, c = build_log(cipher, "op_a", 4), build_log(cipher, "op_b", 4), build_log(cipher, "op_c", 4)
    a[1], c[3] = flip(a[1]), flip(c[3])
    report = verify(a + b + c, [], signer.public)
    assert [(p.log_id, p.seq) for p in report.problems] == [("op_a", 2), ("op_c", 4)]
    assert report.records == 12


def test_cut_tail_is_caught_by_the_checkpoint(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 8)
    cp = signer.head(log)
    problem = only_problem(verify(log[:5], [cp], signer.public))
    assert problem.seq == 6
    assert problem.what == (
        f"truncated: checkpoint #{cp.counter} covers seq 8 but the log ends at seq 5 (records 6–8 cut from the end)"
    )


def test_log_emptied_is_caught_by_its_checkpoint(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 3)
    problem = only_problem(verify([], [signer.head(log)], signer.public))
    assert (problem.log_id, problem.seq) == ("op_1", 1)
    assert "truncated" in problem.what
    assert "the log has no records" in problem.what


def test_cut_tail_after_the_last_checkpoint_is_not_detectable(cipher: AuditCipher, signer: Signer) -> None:
    # The documented limit: records written after the last checkpoint can be cut without trace.
    log = build_log(cipher, "op_1", 8)
    cp = signer.head(log, 5)
    assert verify(log[:6], [cp], signer.public).ok


def test_log_rewritten_after_a_checkpoint(cipher: AuditCipher, signer: Signer) -> None:
    # An attacker with the AES key (not the signing key) rebuilds the chain from record 3 on: the chain is
    # consistent again, but record 4 no longer matches its signed checkpoint.
    log = build_log(cipher, "op_1", 6)
    cp = signer.head(log, 4)
    rewritten = log[:2]
    for seq in range(3, 7):
        rewritten.append(
            seal_record(
                cipher,
                log_id="op_1",
                seq=seq,
                at=at_for(seq),
                kind="decision",
                prev_hash=rewritten[-1].this_hash,
                payload={"forged": seq},
            )
        )
    problem = only_problem(verify(rewritten, [cp], signer.public))
    assert problem.seq == 4
    assert problem.what.startswith(f"checkpoint #{cp.counter} (seq 4): head_hash differs from record 4")
    assert "rewritten after the checkpoint was signed" in problem.what


def test_checkpoint_with_altered_field_has_bad_signature(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 6)
    cp = signer.head(log, 4)
    forged = replace(cp, seq=6, head_hash=log[5].this_hash)
    problem = only_problem(verify(log, [forged], signer.public))
    assert problem.seq == 6
    assert "bad signature" in problem.what
    assert "altered or forged" in problem.what


def test_checkpoint_signed_by_another_key(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 3)
    other = Signer(Ed25519PrivateKey.generate())
    problem = only_problem(verify(log, [other.head(log)], signer.public))
    assert "bad signature: signed by key" in problem.what


def test_badly_signed_checkpoint_is_not_trusted_for_truncation(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 3)
    fake = replace(signer.head(log), seq=9)
    report = verify(log, [fake], signer.public)
    assert [p.what for p in report.problems if "truncated" in p.what] == []


def test_rollback_to_an_older_valid_log(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 4)
    old_records, old_cps = list(log), [signer.head(log)]
    prev = log[-1].this_hash
    for seq in range(5, 9):
        record = seal_record(
            cipher, log_id="op_1", seq=seq, at=at_for(seq), kind="decision", prev_hash=prev, payload={"n": seq}
        )
        log.append(record)
        prev = record.this_hash
    newest = signer.head(log)
    assert verify(log, [*old_cps, newest], signer.public, trusted_checkpoint=newest).ok
    problem = only_problem(verify(old_records, old_cps, signer.public, trusted_checkpoint=newest))
    assert problem.seq == 5
    assert problem.what.startswith(f"rollback: the log is older than checkpoint #{newest.counter} kept elsewhere")
    assert f"the newest checkpoint in the log is #{old_cps[0].counter}" in problem.what
    assert "it covers seq 8 but the log ends at seq 4" in problem.what


def test_rollback_with_only_the_counter_as_evidence(cipher: AuditCipher, signer: Signer) -> None:
    # Checkpoints of another log advanced the counter; the log under test did not change but its newest
    # checkpoints were removed.
    a, b = build_log(cipher, "op_a", 3), build_log(cipher, "op_b", 3)
    cp_a = signer.head(a)
    cp_b = signer.head(b)
    problem = only_problem(verify(a + b, [cp_a], signer.public, trusted_checkpoint=cp_b))
    assert problem.log_id == "op_b"
    assert problem.seq is None
    assert f"rollback: the log is older than checkpoint #{cp_b.counter} kept elsewhere" in problem.what


def test_rollback_to_a_fork_of_the_same_length(signer: Signer) -> None:
    key = os.urandom(32)
    real = build_log(AuditCipher(key), "op_1", 4)
    trusted = signer.head(real)
    fork = build_log(AuditCipher(key), "op_1", 4)
    fork_cp = signer.head(fork)  # a later, validly signed checkpoint of the replacement log
    problem = only_problem(verify(fork, [fork_cp], signer.public, trusted_checkpoint=trusted))
    assert problem.seq == 4
    assert problem.what.startswith(f"rollback: the log does not match checkpoint #{trusted.counter} kept elsewhere")


def test_trusted_checkpoint_pins_the_public_key(cipher: AuditCipher, signer: Signer) -> None:
    # A forger who rewrote a whole export re-signs it with a fresh key; the checkpoint kept elsewhere does
    # not verify under that key.
    log = build_log(cipher, "op_1", 3)
    trusted = signer.head(log)
    forger = Signer(Ed25519PrivateKey.generate())
    forged_log = build_log(cipher, "op_1", 3)
    problem = only_problem(verify(forged_log, [forger.head(forged_log)], forger.public, trusted_checkpoint=trusted))
    assert problem.what.startswith(f"the checkpoint #{trusted.counter} kept elsewhere: bad signature: signed by key")
    assert "the log's key was replaced" in problem.what


def test_without_a_public_key_checkpoints_are_a_problem(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 3)
    problem = only_problem(verify(log, [signer.head(log)], None))
    assert (problem.log_id, problem.seq) == ("op_1", None)
    assert "no public key was given" in problem.what


def test_without_a_public_key_and_without_checkpoints_the_chain_alone_verifies(cipher: AuditCipher) -> None:
    log = build_log(cipher, "op_1", 3)
    assert verify(log, [], None).ok
    log[1] = flip(log[1])
    assert only_problem(verify(log, [], None)).seq == 2


def test_checkpoint_of_an_empty_log_at_seq_zero(signer: Signer) -> None:
    from pollwarden.audit import sign_checkpoint

    cp = sign_checkpoint(signer.key, log_id="op_1", seq=0, head_hash=GENESIS_HASH, counter=1, at="2025-03-01T12:00:00Z")
    assert verify([], [cp], signer.public).ok


def test_report_to_json(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 3)
    del log[1]
    data = verify(log, [], signer.public).to_json()
    assert data == {
        "ok": False,
        "heads": 0,
        "records": 2,
        "logs": 1,
        "checkpoints": 0,
        "rows": 0,
        "rows_not_yet_vouched_for": 0,
        "witnesses": 0,
        "bytes_verified": len(log[0].ciphertext),
        "problems": [{"log_id": "op_1", "seq": 2, "what": "record 2 missing: seq jumps from 1 to 3"}],
    }


def test_verify_needs_no_cipher(signer: Signer) -> None:
    # Built with a key that is then thrown away: verification only ever sees ciphertext and the public key.
    log = build_log(AuditCipher(os.urandom(32)), "op_1", 3)
    assert verify(log, [signer.head(log)], signer.public).ok
    assert log[2].this_hash == chain_hash(
        log[2].prev_hash, log[2].log_id, log[2].seq, log[2].at, log[2].kind, log[2].ciphertext
    )


def test_verify_streams_without_keeping_ciphertexts(cipher: AuditCipher, signer: Signer) -> None:
    count, padding = 3000, "x" * 1000

    def lazily() -> Iterator[AuditRecord]:
        prev = GENESIS_HASH
        for seq in range(1, count + 1):
            record = seal_record(
                cipher,
                log_id="op_big",
                seq=seq,
                at=at_for(seq),
                kind="decision",
                prev_hash=prev,
                payload={"pad": padding},
            )
            prev = record.this_hash
            yield record

    tracemalloc.start()
    try:
        report = verify(lazily(), [], signer.public)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.ok
    assert report.bytes_verified > 3_000_000
    assert peak < report.bytes_verified / 10


def test_seq_beyond_the_encodable_range_is_malformed_not_a_crash(cipher: AuditCipher, signer: Signer) -> None:
    log = build_log(cipher, "op_1", 2)
    log.append(replace(log[1], seq=2**64))
    problem = only_problem(verify(log, [], signer.public))
    assert "malformed seq" in problem.what


def test_explanations_stop_at_the_probe_budget(
    cipher: AuditCipher, signer: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The search for where a bad record came from is shared across one verification, so a file full of
    # broken logs cannot make verify crawl; past the budget the message is simply less specific.
    import pollwarden.audit.chains as verifier_module

    a, b = build_log(cipher, "op_a", 6), build_log(cipher, "op_b", 6)
    spliced = [*a[:3], replace(b[2], log_id="op_a", seq=4), *a[4:]]
    assert "spliced from log 'op_b'" in only_problem(verify(b + spliced, [], signer.public)).what
    monkeypatch.setattr(verifier_module, "_PROBE_BUDGET", 10)
    problem = only_problem(verify(b + spliced, [], signer.public))
    assert problem.seq == 4
    assert "the record was replaced" in problem.what
