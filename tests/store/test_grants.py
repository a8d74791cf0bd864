"""Agent approvals: requested, decided once, revocable, each step audited in the session's log."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from pollwarden.audit import load_or_create_keys
from pollwarden.store import Grant, SQLiteStore, agent_log_id

T0 = datetime(2026, 4, 18, 10, 20, tzinfo=UTC)


def test_grant_lifecycle_is_once_only_and_audited(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db", keys=load_or_create_keys(tmp_path / "home"))
    try:
        log = agent_log_id("sess-1")
        grant = Grant("g1", "session", "sess-1", "exports", "pending", T0, {"client": "agent"})
        store.request_grant(grant, log)
        assert store.get_grant("g1") == grant
        assert store.grants(kind="session", status="pending") == [grant]
        assert store.decide_grant("g1", expect="pending", status="approved", by="alice", at=T0, log_id=log)
        assert not store.decide_grant("g1", expect="pending", status="refused", by="bob", at=T0, log_id=log)
        later = T0 + timedelta(minutes=5)
        assert store.decide_grant("g1", expect="approved", status="revoked", by="alice", at=later, log_id=log)
        final = store.get_grant("g1")
        assert final is not None and final.status == "revoked" and final.decided_at == later
        kinds = [e.kind for e in store.events(log)]
        assert kinds == ["session_approval_requested", "approval_approved", "approval_revoked"]
        assert store.get_grant("nope") is None
    finally:
        store.close()
