"""The store contract: durable records, fenced leases, events written with the change they describe.

Every test that takes `store` runs on SQLite and on PostgreSQL (see conftest.py): the backends must be
indistinguishable to their callers. Tests of one backend's own machinery (schema versions, URLs) follow.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from pollwarden import events as ev
from pollwarden.audit import HeadFile, StoredHeads, read_kept_file, verify
from pollwarden.core.contract.parse import parse_contract
from pollwarden.core.decide import reserve
from pollwarden.core.escalation import DecisionRequest, build_request
from pollwarden.core.reasons import Phase, StopReason
from pollwarden.core.record import OperationRecord, new_record
from pollwarden.store import agent_log_id
from pollwarden.store.base import DecisionTaken, Grant, OperationExists, Resolution, Store, StoreError, Submission
from pollwarden.store.migrations import LATEST
from pollwarden.store.open import open_store
from pollwarden.store.owner import process_owner, this_host
from pollwarden.store.postgres import PostgresStore, redact_url, upgrade_database
from pollwarden.store.sqlite import SQLiteStore

from .conftest import AnyStore, Backend, run_threads

CONTRACT = """
name = "exports"
status_url = "http://127.0.0.1:9/jobs/{job_id}"
[states]
pending = ["running"]
success = ["succeeded"]
failure = ["failed"]
[fields]
state = "state"
"""
T0 = datetime(2026, 4, 18, 10, 20, tzinfo=UTC)
TTL = timedelta(seconds=10)


def _record(op: str = "op", *, now: datetime = T0) -> OperationRecord:
    """A new operation of a job of its own (a job has one operation: a second is refused)."""
    return new_record(parse_contract(CONTRACT), operation_id=op, job_id=f"exp-{op}", now=now)


def _stopped(record: OperationRecord) -> OperationRecord:
    return record.stopped(StopReason.DEADLINE_EXCEEDED, "deadline passed", T0)


def _request(record: OperationRecord, decision_id: str) -> DecisionRequest:
    return build_request(_stopped(record), parse_contract(CONTRACT), T0, decision_id=decision_id)


def test_both_backends_satisfy_the_store_protocol(store: AnyStore) -> None:
    typed: Store = store  # mypy checks the structure; the run checks the attribute is there
    assert typed.keys is not None


def test_create_persists_before_any_poll(store: AnyStore, backend: Backend) -> None:
    record = _record()
    store.create(record, CONTRACT, ev.Created.prepared({"hello": 1}))
    reopened = backend.open()
    stored = reopened.get("op")
    assert stored is not None
    assert stored.record == record
    assert stored.contract_text == CONTRACT
    assert stored.lease_owner is None and stored.lease_token == 0 and stored.lease_expires_at is None
    assert [e.kind for e in reopened.events("op")] == ["created"]
    with pytest.raises(OperationExists):
        store.create(record, CONTRACT, ev.Created.prepared({}))
    assert [e.kind for e in store.events("op")] == ["created"]


def test_get_of_a_missing_operation_is_none_and_all_lists_in_creation_order(store: AnyStore) -> None:
    assert store.get("ghost") is None
    assert store.all() == []
    store.create(_record("later", now=T0 + timedelta(seconds=1)), CONTRACT, ev.Created.prepared({}))
    store.create(_record("first"), CONTRACT, ev.Created.prepared({}))
    assert [s.record.operation_id for s in store.all()] == ["first", "later"]


def test_claim_is_exclusive_until_expiry_and_tokens_only_grow(store: AnyStore) -> None:
    store.create(_record(), CONTRACT, ev.Created.prepared({}))
    first = store.claim("op", "hostA:1:a", T0, TTL)
    assert first is not None and first[0].token == 1
    assert first[0].expires_at == T0 + TTL
    assert store.claim("op", "hostB:2:b", T0 + timedelta(seconds=5), TTL) is None
    second = store.claim("op", "hostB:2:b", T0 + timedelta(seconds=11), TTL)
    assert second is not None and second[0].token == 2
    assert [e.kind for e in store.events("op")][-1] == "lease_taken_over"
    assert store.events("op")[-1].data == {"previous_owner": "hostA:1:a", "owner": "hostB:2:b", "token": 2}
    stored = store.get("op")
    assert stored is not None and stored.lease_owner == "hostB:2:b" and stored.lease_token == 2
    assert stored.lease_expires_at == T0 + timedelta(seconds=21)
    assert stored.lease_expires_at is not None and stored.lease_expires_at.utcoffset() == timedelta(0)


def test_a_lease_expires_exactly_at_its_expiry_time(store: AnyStore) -> None:
    store.create(_record(), CONTRACT, ev.Created.prepared({}))
    assert store.claim("op", "hostA:1:a", T0, TTL) is not None
    assert store.claim("op", "hostB:2:b", T0 + TTL - timedelta(microseconds=1), TTL) is None
    assert store.claim("op", "hostB:2:b", T0 + TTL, TTL) is not None


def test_the_holder_may_claim_again_and_release_frees_the_row(store: AnyStore) -> None:
    store.create(_record(), CONTRACT, ev.Created.prepared({}))
    first = store.claim("op", "hostA:1:a", T0, TTL)
    assert first is not None
    again = store.claim("op", "hostA:1:a", T0 + timedelta(seconds=1), TTL)
    assert again is not None and again[0].token == 2
    store.release(first[0])  # stale token: releases nothing
    stored = store.get("op")
    assert stored is not None and stored.lease_owner == "hostA:1:a"
    store.release(again[0])
    stored = store.get("op")
    assert stored is not None and stored.lease_owner is None and stored.lease_token == 2
    assert [e.kind for e in store.events("op")] == ["created"]  # no takeover, no event
    assert store.claim("op", "hostB:2:b", T0 + timedelta(seconds=2), TTL) is not None


def test_stale_token_write_changes_nothing(store: AnyStore) -> None:
    record = _record()
    store.create(record, CONTRACT, ev.Created.prepared({}))
    claimed = store.claim("op", "hostA:1:a", T0, TTL)
    assert claimed is not None
    old_lease, current = claimed
    newer = store.claim("op", "hostB:2:b", T0 + timedelta(seconds=11), TTL)
    assert newer is not None
    events_before = store.events("op")
    reserved = reserve(current, T0)
    assert not store.write(old_lease, reserved, [ev.Reserved.prepared({"n": 1})], T0, release=True)
    stored = store.get("op")
    assert stored is not None
    assert stored.record.status_requests_used == 0
    assert stored.lease_owner == "hostB:2:b"
    assert store.events("op") == events_before
    assert store.write(newer[0], reserve(newer[1], T0), [ev.Reserved.prepared({"n": 1})], T0, release=True)
    stored = store.get("op")
    assert stored is not None and stored.record.status_requests_used == 1 and stored.lease_owner is None


def test_a_write_with_the_right_token_but_another_owner_is_refused(store: AnyStore) -> None:
    store.create(_record(), CONTRACT, ev.Created.prepared({}))
    claimed = store.claim("op", "hostA:1:a", T0, TTL)
    assert claimed is not None
    lease, current = claimed
    forged = type(lease)(lease.operation_id, "hostZ:9:z", lease.token, lease.expires_at)
    assert not store.write(forged, reserve(current, T0), [], T0, release=False)
    assert store.write(lease, reserve(current, T0), [ev.Reserved.prepared({})], T0, release=False)
    stored = store.get("op")
    assert stored is not None and stored.lease_owner == "hostA:1:a" and stored.record.status_requests_used == 1


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_a_dead_holder_on_this_host_is_not_waited_out(store: AnyStore) -> None:
    store.create(_record(), CONTRACT, ev.Created.prepared({}))
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(proc.stdout)
    assert store.claim("op", process_owner("watch", pid=dead_pid), T0, TTL) is not None
    # Still inside the ttl, but the holder's process is gone (this host, boot and PID namespace): take over now.
    taken = store.claim("op", process_owner("watch", pid=999999999), T0 + timedelta(seconds=1), TTL)
    assert taken is not None and taken[0].token == 2


def test_a_live_holder_elsewhere_is_respected(store: AnyStore) -> None:
    store.create(_record(), CONTRACT, ev.Created.prepared({}))
    assert store.claim("op", "some-other-host:1:x", T0, TTL) is not None
    assert store.claim("op", f"{this_host()}:1:y", T0 + timedelta(seconds=1), TTL) is None


def test_a_claim_records_its_owner_as_the_watcher_which_outlives_the_release(store: AnyStore) -> None:
    """Schema 5: between polls no lease is held, so the watcher and since when are what status shows."""
    store.create(_record(), CONTRACT, ev.Created.prepared({}))
    stored = store.get("op")
    assert stored is not None and (stored.watcher, stored.watcher_since) == (None, None)
    claimed = store.claim("op", "watch/hostA:1:a", T0, TTL)
    assert claimed is not None
    store.release(claimed[0])
    again = store.claim("op", "watch/hostA:1:a", T0 + timedelta(seconds=30), TTL)
    assert again is not None
    store.release(again[0])
    stored = store.get("op")
    assert stored is not None and stored.lease_owner is None
    assert (stored.watcher, stored.watcher_since) == ("watch/hostA:1:a", T0)  # the same owner keeps its clock
    other = store.claim("op", "worker/hostB:2:b", T0 + timedelta(seconds=40), TTL)
    assert other is not None
    stored = store.get("op")
    assert stored is not None
    assert (stored.watcher, stored.watcher_since) == ("worker/hostB:2:b", T0 + timedelta(seconds=40))
    (_due,) = store.claim_due("worker/hostC:3:c", T0 + timedelta(minutes=5), TTL, 10)
    stored = store.get("op")
    assert stored is not None and stored.watcher == "worker/hostC:3:c"


def test_event_sequence_is_per_operation_and_gapless(store: AnyStore) -> None:
    store.create(_record("a"), CONTRACT, ev.Created.prepared({}))
    store.create(_record("b"), CONTRACT, ev.Created.prepared({}))
    for i in range(3):
        store.append("a", ev.Paced.prepared({"i": i}), T0)
    store.append("b", ev.Paced.prepared({"i": 9}), T0)
    assert [e.seq for e in store.events("a")] == [1, 2, 3, 4]
    assert [e.seq for e in store.events("b")] == [1, 2]
    assert [e.data.get("i") for e in store.events("a")][1:] == [0, 1, 2]
    assert store.events("a")[1].at == T0 and store.events("a")[1].operation_id == "a"


def test_claim_of_a_missing_operation_is_an_error(store: AnyStore) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        store.claim("ghost", "h:1:x", T0, TTL)


def test_agent_session_logs_are_chained_and_verifiable(store: AnyStore) -> None:
    # R49: an agent session's log is chained and verifies with the public key alone.
    log = agent_log_id("sess-1")
    store.append(log, ev.SessionStarted.prepared({"client": "test-agent"}), T0)
    store.append(log, ev.CallResult.prepared({"tool": "check_operation", "operation": "op"}), T0 + timedelta(seconds=1))
    assert [e.kind for e in store.events(log)] == ["session_started", "call_result"]
    assert store.events(log)[1].data == {"tool": "check_operation", "operation": "op"}
    assert store.keys is not None
    store.checkpoint_heads(T0 + timedelta(seconds=2))
    report = verify(store.audit_records(), store.audit_checkpoints(), store.keys.public_key)
    assert report.ok and report.logs == 1
    with pytest.raises(ValueError):
        agent_log_id("")


# -- decisions ---------------------------------------------------------------------------------------------


def _stop_with_decision(store: AnyStore, op: str, decision_id: str) -> DecisionRequest:
    store.create(_record(op), CONTRACT, ev.Created.prepared({}))
    claimed = store.claim(op, "hostA:1:a", T0, TTL)
    assert claimed is not None
    request = _request(claimed[1], decision_id)
    assert store.write(
        claimed[0], _stopped(claimed[1]), [ev.Escalated.prepared({})], T0, release=True, decision=request
    )
    return request


def test_fleet_counts_per_contract_active_due_overdue_open_decisions_and_the_oldest_due(store: AnyStore) -> None:
    """The worker's gauges: counted by the database, so a scrape of a 50,000-operation fleet reads no records."""
    ttl = timedelta(seconds=65)
    for op, due_in in (("a", -120.0), ("b", -10.0), ("c", 300.0)):
        store.create(
            replace(_record(op), next_poll_at=T0 + timedelta(seconds=due_in)), CONTRACT, ev.Created.prepared({})
        )
    _stop_with_decision(store, "stopped", "d-9")
    leased = store.claim("b", "worker/hostA:1:a", T0, TTL)
    assert leased is not None  # polling now: due, but not overdue however late
    asked: list[str] = []

    def ttl_of(text: str) -> timedelta:
        asked.append(text)
        return ttl

    (counts,) = store.fleet_counts(T0, ttl_of)
    assert (counts.contract, counts.active, counts.due, counts.overdue) == ("exports", 3, 2, 1)
    (waiting,) = store.open_decision_counts()
    assert (waiting.contract, waiting.reason, waiting.count, waiting.oldest) == ("exports", "deadline_exceeded", 1, T0)
    holders = {(h.holder, h.count) for h in store.active_holders(T0)}
    assert holders == {(None, 2), ("worker/hostA:1:a", 1)}  # b's lease runs: its holder; a and c: nobody yet
    assert counts.oldest_due == T0 - timedelta(seconds=120) and asked == [CONTRACT]
    assert store.fleet_counts(T0 - timedelta(hours=1), ttl_of)[0].due == 0


def test_a_decision_is_written_with_the_stop_and_decided_once(store: AnyStore) -> None:
    request = _stop_with_decision(store, "op", "d-1")
    assert [d.request for d in store.decisions()] == [request]
    assert [d.status for d in store.decisions("op", open_only=True)] == ["open"]
    assert store.decisions("other") == []
    assert store.get_decision("nope") is None
    assert [e.kind for e in store.events("op")] == ["created", "escalated", "decision_requested"]

    first = store.claim("op", "hostB:2:b", T0 + timedelta(seconds=1), TTL)
    assert first is not None
    at = T0 + timedelta(minutes=1)
    assert store.resolve_decision(
        first[0], Resolution("d-1", "refused", "ana", "not worth it", 2), record=None, events=[], now=at
    )
    decided = store.get_decision("d-1")
    assert decided is not None
    assert (decided.status, decided.decided_by, decided.decided_at, decided.option, decided.note) == (
        "refused",
        "ana",
        at,
        2,
        "not worth it",
    )
    assert store.decisions(open_only=True) == []

    second = store.claim("op", "hostC:3:c", at, TTL)
    assert second is not None
    with pytest.raises(DecisionTaken):
        store.resolve_decision(
            second[0],
            Resolution("d-1", "decided", "bo", option=1),
            record=None,
            events=[ev.Paced.prepared({})],
            now=at,
        )
    # Rolled back whole: the lease the failed decider held is still held, no event was written.
    stored = store.get("op")
    assert stored is not None and stored.lease_owner == "hostC:3:c"
    assert "x" not in [e.kind for e in store.events("op")]


def test_resolving_with_a_stale_lease_changes_nothing(store: AnyStore) -> None:
    _stop_with_decision(store, "op", "d-1")
    old = store.claim("op", "hostB:2:b", T0, TTL)
    assert old is not None
    assert store.claim("op", "hostC:3:c", T0 + TTL, TTL) is not None
    assert not store.resolve_decision(
        old[0], Resolution("d-1", "decided", "ana", option=1), record=None, events=[], now=T0
    )
    decision = store.get_decision("d-1")
    assert decision is not None and decision.status == "open"


def test_a_new_record_from_a_decision_voids_the_other_open_questions(store: AnyStore) -> None:
    request = _stop_with_decision(store, "op", "d-1")
    lease, current = store.claim("op", "hostB:2:b", T0, TTL) or pytest.fail("claim")
    assert store.write(lease, current, [], T0, release=False, decision=_request(current, "d-2"))
    resumed = replace(current, phase=Phase.ACTIVE, reason=None, detail=None, finished_at=None)
    assert store.resolve_decision(
        lease,
        Resolution("d-2", "decided", "ana", option=1),
        record=resumed,
        events=[ev.Extended.prepared({})],
        now=T0,
    )
    statuses = {d.request.decision_id: d.status for d in store.decisions("op")}
    assert statuses == {request.decision_id: "expired", "d-2": "decided"}
    stored = store.get("op")
    assert stored is not None and stored.record.phase is Phase.ACTIVE and stored.lease_owner is None


# -- submissions -------------------------------------------------------------------------------------------


def _submission(op: str = "sub", state: str = "sending") -> Submission:
    return Submission(op, "sha256:abc", "idem-1", b"\x00{body}\xff", state, None, None, T0)


def test_a_submission_survives_and_becomes_an_operation_once_accepted(store: AnyStore, backend: Backend) -> None:
    submission = _submission()
    store.record_submission(submission, ev.SubmissionIntent.from_json({"fingerprint": "sha256:abc"}))
    assert backend.open().get_submission("sub") == submission
    assert store.get_submission("ghost") is None
    with pytest.raises(OperationExists):
        store.record_submission(submission, ev.SubmissionIntent.from_json({}))
    record = replace(_record("sub"), job_id="exp_71c", status_location="http://127.0.0.1:9/jobs/j-1")
    store.accept_submission(submission, record, CONTRACT, ev.Submitted.from_json({"job": "exp_71c"}))
    accepted = store.get_submission("sub")
    assert accepted is not None
    assert (accepted.state, accepted.job_id, accepted.status_location) == (
        "accepted",
        "exp_71c",
        "http://127.0.0.1:9/jobs/j-1",
    )
    stored = store.get("sub")
    assert stored is not None and stored.record == record
    assert [e.kind for e in store.events("sub")] == ["submission_intent", "submitted"]


def test_a_submission_cannot_reuse_an_operation_id(store: AnyStore) -> None:
    store.create(_record("taken"), CONTRACT, ev.Created.prepared({}))
    with pytest.raises(OperationExists):
        store.record_submission(_submission("taken"), ev.SubmissionIntent.from_json({}))
    assert store.get_submission("taken") is None


def test_an_unknown_submission_is_marked_and_logged(store: AnyStore) -> None:
    store.record_submission(_submission(), ev.SubmissionIntent.from_json({}))
    store.mark_submission("sub", ev.SubmissionUnknown.from_json({"why": "timeout"}), T0 + timedelta(seconds=3))
    marked = store.get_submission("sub")
    assert marked is not None and marked.state == "unknown"
    events = store.events("sub")
    assert [(e.kind, e.at) for e in events] == [
        ("submission_intent", T0),
        ("submission_unknown", T0 + timedelta(seconds=3)),
    ]


# -- grants -------------------------------------------------------------------------------------------------


def test_a_grant_is_decided_once_and_every_step_is_audited(store: AnyStore) -> None:
    log = agent_log_id("sess-1")
    grant = Grant("g1", "session", "sess-1", "exports", "pending", T0, {"client": "agent", "n": 1})
    store.request_grant(grant, log)
    store.request_grant(Grant("g0", "call", "sess-2", "op", "pending", T0, {}), agent_log_id("sess-2"))
    assert store.get_grant("g1") == grant and store.get_grant("nope") is None
    assert [g.grant_id for g in store.grants()] == ["g0", "g1"]
    assert store.grants(kind="session", status="pending", subject="sess-1") == [grant]
    assert store.grants(kind="call", subject="sess-1") == []
    assert store.decide_grant("g1", expect="pending", status="approved", by="alice", at=T0, log_id=log)
    assert not store.decide_grant("g1", expect="pending", status="refused", by="bob", at=T0, log_id=log)
    later = T0 + timedelta(minutes=5)
    assert store.decide_grant("g1", expect="approved", status="revoked", by="alice", at=later, log_id=log, note="x")
    final = store.get_grant("g1")
    assert final is not None and (final.status, final.decided_by, final.decided_at) == ("revoked", "alice", later)
    assert [e.kind for e in store.events(log)] == [
        "session_approval_requested",
        "approval_approved",
        "approval_revoked",
    ]


def test_concurrent_deciders_of_one_grant_have_one_winner(store: AnyStore, backend: Backend) -> None:
    log = agent_log_id("sess-1")
    store.request_grant(Grant("g1", "call", "sess-1", "op", "pending", T0, {}), log)
    deciders = [backend.open() for _ in range(4)]
    won: list[bool] = [False] * 4

    def decide(index: int) -> None:
        won[index] = deciders[index].decide_grant(
            "g1", expect="pending", status="approved", by=f"p{index}", at=T0, log_id=log
        )

    run_threads(4, decide)
    assert won.count(True) == 1
    assert [e.kind for e in store.events(log)] == ["call_approval_requested", "approval_approved"]


# -- the audit trail ---------------------------------------------------------------------------------------


def test_every_commit_signs_one_head_over_every_log_and_outcomes_go_to_the_trusted_file(
    store: AnyStore, backend: Backend, tmp_path: Path
) -> None:
    trusted = tmp_path / "trusted.json"
    writer = backend.open(trusted=trusted)
    writer.create(_record(), CONTRACT, ev.Created.prepared({}))
    for i in range(40):
        writer.append("op", ev.Paced.prepared({"i": i}), T0)
    writer.append("other", ev.SucceededEvent.prepared({}), T0)
    heads = writer.audit_heads()
    # One head per transaction (the create, 40 appends, the outcome), dense, each over every log.
    assert [head.counter for head in heads] == list(range(1, 43))
    assert (heads[-1].logs, heads[-1].records) == (2, 42)
    assert writer.audit_checkpoints() == []  # per-log checkpoints are only made for one operation's export
    kept = read_kept_file(trusted)
    assert isinstance(kept, HeadFile) and kept.head == heads[-1]  # an outcome goes elsewhere at once
    assert store.keys is not None
    with store.audit_snapshot() as snapshot:
        report = verify(
            snapshot.records(), snapshot.checkpoints(), store.keys.public_key, heads=snapshot.heads(), witness=kept
        )
    assert report.ok, report.problems
    assert report.records == 42 and report.heads == 42
    # What `audit verify` reads instead: the heads as the seven columns replay needs, the newest whole.
    with store.audit_snapshot() as snapshot:
        stored = snapshot.stored_heads()
        assert stored.newest == heads[-1]
        rows = list(stored.rows)
        assert [tuple(row) for row in rows] == [head.replayed() for head in heads]
        assert snapshot.head_key_ids() == [heads[-1].key_id]
        rows_report = verify(
            snapshot.rows(), [], store.keys.public_key, heads=StoredHeads(rows, stored.newest), witness=kept
        )
    assert rows_report == report
    made = writer.checkpoint_heads(T0, log_ids=["op"])
    assert [(cp.log_id, cp.seq) for cp in made] == [("op", 41)]


def test_audit_records_come_in_log_then_seq_order(store: AnyStore) -> None:
    for name in ("b", "a", "B", "a-1"):
        store.append(name, ev.Paced.prepared({}), T0)
        store.append(name, ev.Paced.prepared({}), T0)
    order = [(r.log_id, r.seq) for r in store.audit_records()]
    assert order == sorted(order)  # byte order of the ids, as SQLite sorts, then seq
    assert [r.seq for r in store.audit_records("a")] == [1, 2]
    assert all(type(r.ciphertext) is bytes for r in store.audit_records())


def test_a_store_without_keys_reads_records_but_neither_writes_nor_decrypts(store: AnyStore, backend: Backend) -> None:
    store.create(_record(), CONTRACT, ev.Created.prepared({}))
    keyless = backend.open(keyless=True)
    assert keyless.get("op") is not None
    assert len(list(keyless.audit_records())) == 1
    with pytest.raises(StoreError, match="no audit encryption key") as caught:
        keyless.events("op")
    assert "keys/audit.key" in str(caught.value)
    with pytest.raises(StoreError, match="no audit encryption key"):
        keyless.append("op", ev.Paced.prepared({}), T0)
    assert len(list(store.audit_records())) == 1


def test_concurrent_writers_never_fork_one_log(store: AnyStore, backend: Backend) -> None:
    """4 threads x 50 appends to one log, each thread with a store of its own (a process, in a fleet)."""
    writers = [backend.open() for _ in range(4)]

    def append_many(index: int) -> None:
        for i in range(50):
            writers[index].append("shared", ev.Paced.prepared({"writer": index, "i": i}), T0)

    run_threads(4, append_many)
    records = list(store.audit_records("shared"))
    assert [r.seq for r in records] == list(range(1, 201))
    assert store.keys is not None
    report = verify(store.audit_records(), [], store.keys.public_key, heads=store.audit_heads())
    assert report.ok, report.problems
    heads = store.audit_heads()  # four writers on one log never fork the heads either
    assert [head.counter for head in heads] == list(range(1, len(heads) + 1)) and heads[-1].records == 200
    if backend.kind == "postgres":
        assert len(heads) == 200  # one transaction, one head
    else:  # one process's stores of one file commit together: one head per committed batch, at most 200
        assert 1 <= len(heads) <= 200


# -- PostgreSQL only: the schema, the URL, the server --------------------------------------------------------


def test_a_database_that_was_never_upgraded_is_refused(empty_pg_url: str) -> None:
    with pytest.raises(StoreError, match="pollwarden db upgrade") as caught:
        PostgresStore(empty_pg_url)
    assert "no pollwarden schema" in str(caught.value)
    assert upgrade_database(empty_pg_url) == list(range(1, LATEST + 1))
    assert upgrade_database(empty_pg_url) == []
    PostgresStore(empty_pg_url).close()


def test_a_database_behind_this_code_is_refused(empty_pg_url: str) -> None:
    upgrade_database(empty_pg_url)
    with psycopg.connect(empty_pg_url, autocommit=True) as conn:
        conn.execute("DELETE FROM schema_migrations WHERE version = %s", (LATEST,))
    with pytest.raises(StoreError, match="pollwarden db upgrade"):
        PostgresStore(empty_pg_url)


def test_a_database_newer_than_this_code_is_refused_and_not_upgraded(empty_pg_url: str) -> None:
    upgrade_database(empty_pg_url)
    with psycopg.connect(empty_pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (LATEST + 1,))
    for attempt in (lambda: PostgresStore(empty_pg_url), lambda: upgrade_database(empty_pg_url)):
        with pytest.raises(StoreError, match=r"(?i)upgrade pollwarden") as caught:
            attempt()
        assert f"schema version {LATEST + 1}" in str(caught.value)


def test_concurrent_upgrades_apply_each_migration_once(empty_pg_url: str) -> None:
    results: list[list[int]] = [[], [], []]

    def upgrade(index: int) -> None:
        results[index] = upgrade_database(empty_pg_url)

    run_threads(3, upgrade)
    assert sorted(v for applied in results for v in applied) == list(range(1, LATEST + 1))


def test_the_schema_has_the_partial_due_index(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'operations_due_order'").fetchone()
    assert row is not None and "WHERE (phase = 'active'::text)" in row[0]


def test_the_url_is_shown_without_its_password(pg_url: str) -> None:
    assert redact_url("postgresql://ana:s3cret@db.example:5432/pw?sslmode=require&password=x") == (
        "postgresql://ana@db.example:5432/pw?sslmode=require"
    )
    assert redact_url("postgres://:s3cret@db/x") == "postgres://db/x"
    assert "s3cret" not in redact_url("host=db password=s3cret dbname=x")
    for malformed in ("postgresql://u:s3cret@[::1", "postgresql://u:s3cret@h:99999/x", "postgresql://u:s3cret@[zz]/x"):
        assert redact_url(malformed) == "the PostgreSQL database (a malformed URL)"  # issue 23: it raised
    with_password = pg_url.replace("://postgres@", "://postgres:s3cret@")
    store = PostgresStore(with_password)  # trust auth ignores the password
    try:
        assert "s3cret" not in store.path and store.path.endswith(pg_url.rsplit("/", 1)[1])
        with pytest.raises(StoreError, match="no audit encryption key") as caught:
            store.events("op")  # keyless: the message names the database
        assert store.path in str(caught.value) and "s3cret" not in str(caught.value)
    finally:
        store.close()


def test_an_unreachable_server_is_a_store_error_that_names_it_without_the_password() -> None:
    with pytest.raises(StoreError, match="cannot open the state database") as caught:
        PostgresStore("postgresql://ana:s3cret@127.0.0.1:1/nowhere?connect_timeout=2")
    assert "127.0.0.1:1/nowhere" in str(caught.value) and "s3cret" not in str(caught.value)
    with pytest.raises(StoreError, match="not a usable PostgreSQL URL") as caught:
        PostgresStore("postgresql://ana:s3cr%zzet@127.0.0.1/x")  # a parse error would quote the password
    assert "s3cr" not in str(caught.value)


def test_open_store_picks_the_backend_from_the_target(pg_url: str, tmp_path: Path) -> None:
    stores = [open_store(pg_url), open_store(pg_url.replace("postgresql://", "postgres://", 1))]
    stores.append(open_store(tmp_path / "a.db"))
    stores.append(open_store(str(tmp_path / "b.db")))
    try:
        assert [type(s) for s in stores] == [PostgresStore, PostgresStore, SQLiteStore, SQLiteStore]
    finally:
        for s in stores:
            s.close()
    with pytest.raises(StoreError, match="unknown kind") as caught:
        open_store("postgresq://ana:s3cret@db/x")
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize("blank", ["", " ", "\t", "  \n"], ids=["empty", "space", "tab", "spaces-newline"])
def test_a_blank_database_name_is_refused_and_creates_no_file(
    blank: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--db " "` once opened a SQLite file named " " (and its " -writer.lock") in the working directory: two such
    files were committed at the repository's root. A name of blanks only is a mistake, never a file."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match="the database is empty"):
        open_store(blank)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_db_now_is_the_database_clock(pg_url: str, tmp_path: Path) -> None:
    store = PostgresStore(pg_url)
    lite = SQLiteStore(tmp_path / "x.db")
    try:
        for db_now in (store.db_now, lite.db_now):
            before = datetime.now(UTC)
            now = db_now()
            after = datetime.now(UTC)
            assert now.utcoffset() == timedelta(0)
            # This machine's clock, read between the two readings here (1 s of room for the server's own
            # rounding); a slow machine only widens the bracket.
            assert before - timedelta(seconds=1) <= now <= after + timedelta(seconds=1)
    finally:
        store.close()
        lite.close()
