"""Encrypted, hash-chained, checkpointed audit log: pure functions, no storage."""

from pollwarden.audit.chain import (
    GENESIS_HASH,
    AuditRecord,
    canonical_json,
    chain_hash,
    open_record,
    record_aad,
    seal_record,
)
from pollwarden.audit.checkpoint import (
    Checkpoint,
    checkpoint_valid,
    key_id_of,
    load_public_key_text,
    public_key_text,
    sign_checkpoint,
)
from pollwarden.audit.crypto import AuditCipher, AuditDecryptError, AuditError, AuditKeyError
from pollwarden.audit.export import (
    ExportContents,
    ExportFormatError,
    load_export,
    read_checkpoint_file,
    read_export,
    write_checkpoint_file,
    write_export,
)
from pollwarden.audit.keys import (
    AUDIT_KEY_ENV,
    SIGNING_KEY_ENV,
    AuditKeys,
    load_or_create_keys,
    load_public_key,
    read_public_key_file,
    refuse_private_key,
)
from pollwarden.audit.verifier import ALL_LOGS, LogHead, Problem, VerifyReport, verify

__all__ = [
    "ALL_LOGS",
    "AUDIT_KEY_ENV",
    "GENESIS_HASH",
    "SIGNING_KEY_ENV",
    "AuditCipher",
    "AuditDecryptError",
    "AuditError",
    "AuditKeyError",
    "AuditKeys",
    "AuditRecord",
    "Checkpoint",
    "ExportContents",
    "ExportFormatError",
    "LogHead",
    "Problem",
    "VerifyReport",
    "canonical_json",
    "chain_hash",
    "checkpoint_valid",
    "key_id_of",
    "load_export",
    "load_or_create_keys",
    "load_public_key",
    "load_public_key_text",
    "open_record",
    "public_key_text",
    "read_checkpoint_file",
    "read_export",
    "read_public_key_file",
    "record_aad",
    "refuse_private_key",
    "seal_record",
    "sign_checkpoint",
    "verify",
    "write_checkpoint_file",
    "write_export",
]
