"""Encrypted, hash-chained, checkpointed audit log: pure functions, no storage.

The face is lazy (`pollwarden.lazy`): importing the package, or its error types in `crypto`, loads no
cryptography; a name's module is imported when the name is first used (a store opening its keys, a verify).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_face

if TYPE_CHECKING:
    from .chain import GENESIS_HASH, AuditRecord, canonical_json, chain_hash, open_record, record_aad, seal_record
    from .chains import StoredRows
    from .checkpoint import (
        CHECKPOINTED_KINDS,
        Checkpoint,
        checkpoint_valid,
        key_id_of,
        load_public_key_text,
        public_key_text,
        sign_checkpoint,
    )
    from .crypto import AuditCipher, AuditDecryptError, AuditError, AuditKeyError
    from .export import (
        ExportContents,
        ExportFormatError,
        load_export,
        read_checkpoint_file,
        read_export,
        read_head_file,
        read_kept_file,
        write_checkpoint_file,
        write_export,
        write_head_file,
    )
    from .heads import Head, head_valid, sign_head
    from .journal import HeadFile, StoredHeads, replay
    from .keys import (
        AUDIT_KEY_ENV,
        SIGNING_KEY_ENV,
        AuditKeys,
        load_or_create_keys,
        load_public_key,
        read_public_key_file,
        refuse_private_key,
    )
    from .verifier import ALL_LOGS, LogHead, Problem, VerifyReport, verify

__all__ = [
    "ALL_LOGS",
    "AUDIT_KEY_ENV",
    "CHECKPOINTED_KINDS",
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
    "Head",
    "HeadFile",
    "LogHead",
    "Problem",
    "StoredHeads",
    "StoredRows",
    "VerifyReport",
    "canonical_json",
    "chain_hash",
    "checkpoint_valid",
    "head_valid",
    "key_id_of",
    "load_export",
    "load_or_create_keys",
    "load_public_key",
    "load_public_key_text",
    "open_record",
    "public_key_text",
    "read_checkpoint_file",
    "read_export",
    "read_head_file",
    "read_kept_file",
    "read_public_key_file",
    "record_aad",
    "refuse_private_key",
    "replay",
    "seal_record",
    "sign_checkpoint",
    "sign_head",
    "verify",
    "write_checkpoint_file",
    "write_export",
    "write_head_file",
]

__getattr__, __dir__ = lazy_face(
    __name__,
    {
        ".chain": "GENESIS_HASH AuditRecord canonical_json chain_hash open_record record_aad seal_record",
        ".chains": "StoredRows",
        ".checkpoint": "CHECKPOINTED_KINDS Checkpoint checkpoint_valid key_id_of load_public_key_text public_key_text"
        " sign_checkpoint",
        ".crypto": "AuditCipher AuditDecryptError AuditError AuditKeyError",
        ".export": "ExportContents ExportFormatError load_export read_checkpoint_file read_export read_head_file"
        " read_kept_file write_checkpoint_file write_export write_head_file",
        ".heads": "Head head_valid sign_head",
        ".journal": "HeadFile StoredHeads replay",
        ".keys": "AUDIT_KEY_ENV SIGNING_KEY_ENV AuditKeys load_or_create_keys load_public_key"
        " read_public_key_file refuse_private_key",
        ".verifier": "ALL_LOGS LogHead Problem VerifyReport verify",
    },
)
