"""The id rules: one for a provider's job id, one for an operation id, and the one generator of each, the same
words on every interface (admission checks with them; the MCP tools, the CLI and the submissions name ids by
them)."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from datetime import datetime

from .record import OPERATION_ID

MAX_JOB_ID_CHARS = 512


def job_id_problem(job_id: object) -> str | None:
    """Why this cannot be a provider's job id, or None. The same words on every interface."""
    if not isinstance(job_id, str) or not job_id.strip():
        return "must be the provider's job id, not empty"
    if len(job_id) > MAX_JOB_ID_CHARS:
        return f"is {len(job_id)} characters long; at most {MAX_JOB_ID_CHARS} are accepted"
    for ch in job_id:
        # Cc: controls (forge lines on a terminal), Cs: lone surrogates (cannot be encoded), Cf: bidi overrides
        # and other invisible formatting (make one id look like another).
        if unicodedata.category(ch) in ("Cc", "Cs", "Cf", "Zl", "Zp"):
            return (
                f"contains the invisible or control character U+{ord(ch):04X}; give the id as the provider printed it"
            )
    return None


def operation_id_problem(operation_id: object) -> str | None:
    if not isinstance(operation_id, str) or not OPERATION_ID.match(operation_id):
        return "use 1-128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit"
    return None


def new_operation_id(contract_name: str, now: datetime, token: str) -> str:
    """`<contract>-<UTC time>-<token>`: sortable, readable, and unique by the caller's random token."""
    return f"{_id_prefix(contract_name)}-{now.strftime('%Y%m%d-%H%M%S')}-{token}"


def submission_operation_id(contract_name: str, request_fingerprint: str) -> str:
    """`<contract>-submit-<digest>`: the one operation a request (contract and fingerprint) may create, so the
    same submission asked for again finds its operation instead of sending a second job."""
    digest = hashlib.sha256(f"{contract_name}\n{request_fingerprint}".encode()).hexdigest()[:24]
    return f"{_id_prefix(contract_name)}-submit-{digest}"


def _id_prefix(contract_name: str) -> str:
    prefix = re.sub(r"[^A-Za-z0-9._:-]", "-", contract_name)[:40].strip("-.:_")
    return prefix if prefix and prefix[0].isalnum() else "op"
