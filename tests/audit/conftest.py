"""Real keys and real chains for the audit tests: every tamper test starts from a log that verifies."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from pollwarden.audit import (
    AUDIT_KEY_ENV,
    GENESIS_HASH,
    SIGNING_KEY_ENV,
    AuditCipher,
    AuditRecord,
    Checkpoint,
    seal_record,
    sign_checkpoint,
)


def at_for(seq: int) -> str:
    return f"2025-03-01T10:{seq // 60 % 60:02d}:{seq % 60:02d}Z"


def decision(seq: int) -> dict[str, Any]:
    return {
        "event": "decision",
        "state": "running",
        "next_poll_at": at_for(seq + 1),
        "delay_source": "local_backoff",
        "requests_used": seq,
        "deadline_at": "2025-03-01T11:00:00Z",
    }


def build_log(
    cipher: AuditCipher, log_id: str, count: int, *, payloads: list[dict[str, Any]] | None = None
) -> list[AuditRecord]:
    records: list[AuditRecord] = []
    prev = GENESIS_HASH
    for seq in range(1, count + 1):
        payload = payloads[seq - 1] if payloads is not None else decision(seq)
        record = seal_record(
            cipher, log_id=log_id, seq=seq, at=at_for(seq), kind="decision", prev_hash=prev, payload=payload
        )
        records.append(record)
        prev = record.this_hash
    return records


@dataclass
class Signer:
    """Signs checkpoints with a store-wide monotonic counter, as the store will."""

    key: Ed25519PrivateKey
    counter: int = 0
    issued: list[Checkpoint] = field(default_factory=list)

    @property
    def public(self) -> Ed25519PublicKey:
        return self.key.public_key()

    def head(self, records: list[AuditRecord], seq: int | None = None) -> Checkpoint:
        at_seq = records[-1].seq if seq is None else seq
        record = next(r for r in records if r.seq == at_seq)
        self.counter += 1
        cp = sign_checkpoint(
            self.key,
            log_id=record.log_id,
            seq=record.seq,
            head_hash=record.this_hash,
            counter=self.counter,
            at="2025-03-01T12:00:00Z",
        )
        self.issued.append(cp)
        return cp


@pytest.fixture
def cipher() -> AuditCipher:
    return AuditCipher(os.urandom(32))


@pytest.fixture
def signer() -> Signer:
    return Signer(Ed25519PrivateKey.generate())


@pytest.fixture(autouse=True)
def _no_key_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # A developer's own keys in the environment must not leak into (or change) these tests.
    monkeypatch.delenv(AUDIT_KEY_ENV, raising=False)
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
    yield
