"""The rows the audit vouches for, as the store writes and reads them (the hashing itself: `audit/vouch.py`).

Two tables' rows are vouched for, each under the log that tells its story:

- `operations`, under the operation's log. Identity: job id, contract name, the contract text (by its SHA-256)
  and the creation time, written once by the commit that makes the row. State: phase, next poll, deadline,
  status requests used, their budget and the record, written by every fenced write. The lease columns
  (owner, token, expiry, watcher) change on every claim without an event and are not vouched for, nor is
  `unreadable`, the mark a claim leaves on a row it could not decode.
- `audit_settings`, under the setting's own log (`@audit/witness`): its value and when it was set.
- `contracts` (the registry of installed versions), under the version's own log (`@contract/<digest>`):
  identity its digest, state its name, text, installer and time. A row written behind the engine's back (a
  version nobody installed, "installed" by an INSERT) is one no head vouches for.

The writer hashes what it writes, from the values it sends (a time as the database will give it back); the
verifier hashes what it reads. Both meet in one function per part, so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ..audit.vouch import Vouch, row_hash
from ..core.contract.vars import text_digest
from .common import Moment
from .records import CONTRACT_LOG_PREFIX

OPERATIONS = "operations"
SETTINGS = "audit_settings"
CONTRACTS = "contracts"

VOUCHED_OPERATION_COLUMNS = (
    "operation_id, phase, next_poll_at, deadline_at, status_requests_used, max_status_requests, record,"
    " job_id, contract_name, contract, created_at"
)
"""What a verifier reads of each operation row, in the order `operation_vouch_of_row` takes."""

VOUCHED_SETTING_COLUMNS = "log_id, value, at"

VOUCHED_CONTRACT_COLUMNS = "digest, name, text, installed_by, installed_at"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def time_value(moment: datetime) -> int:
    """A time as hashed: whole microseconds since 1970-01-01 UTC (what both backends give back exactly), exact
    integer arithmetic on the aware datetime, never a float."""
    return (moment - _EPOCH) // _MICROSECOND


def operation_state(
    operation_id: str,
    phase: str,
    next_poll_at: datetime,
    deadline_at: datetime,
    used: int,
    budget: int,
    record_text: str,
) -> str:
    values = (phase, time_value(next_poll_at), time_value(deadline_at), used, budget, record_text)
    return row_hash(OPERATIONS, "state", operation_id, values)


def operation_identity(
    operation_id: str, job_id: str, contract_name: str, contract_sha256: str, created_at: datetime
) -> str:
    """`contract_sha256`: `text_digest` of the contract text (a bulk enqueue hashes its one text once)."""
    values = (job_id, contract_name, contract_sha256, time_value(created_at))
    return row_hash(OPERATIONS, "identity", operation_id, values)


def state_of_values(operation_id: str, values: Sequence[Any], moment: Moment) -> str:
    """The state hash of a row about to be written with `record_values(...)` (times as the database stores them,
    read back through `moment`, so the writer hashes exactly what a verifier will read)."""
    phase, next_stamp, deadline_stamp, used, budget, record_text = values
    return operation_state(operation_id, phase, moment(next_stamp), moment(deadline_stamp), used, budget, record_text)


def operation_vouch_of_row(row: Sequence[Any], moment: Moment) -> Vouch:
    """What a row read in `VOUCHED_OPERATION_COLUMNS` order hashes to: (log id, state, identity)."""
    op, phase, next_poll_at, deadline_at, used, budget, record_text, job, name, contract, created = row
    op = str(op)
    when, deadline = moment(next_poll_at), moment(deadline_at)
    state = operation_state(op, str(phase), when, deadline, int(used), int(budget), str(record_text))
    identity = operation_identity(op, str(job), str(name), text_digest(str(contract)), moment(created))
    return op, state, identity


def setting_vouch(log_id: str, value: str, at: str) -> Vouch:
    """A setting row's vouch; its identity is its log id alone (the row is the setting)."""
    return log_id, row_hash(SETTINGS, "state", log_id, (value, at)), row_hash(SETTINGS, "identity", log_id, ())


def contract_vouch(digest: str, name: str, text: str, installed_by: str, installed_at: datetime) -> Vouch:
    """An installed contract version's vouch, under its log `@contract/<digest>`: the text by its own SHA-256 (a
    row whose text does not hash to its key is one the state hash cannot match)."""
    log_id = CONTRACT_LOG_PREFIX + digest
    state = row_hash(CONTRACTS, "state", log_id, (name, text_digest(text), installed_by, time_value(installed_at)))
    return log_id, state, row_hash(CONTRACTS, "identity", log_id, (digest,))


def contract_vouch_of_row(row: Sequence[Any], moment: Moment) -> Vouch:
    """What a row read in `VOUCHED_CONTRACT_COLUMNS` order hashes to."""
    digest, name, text, installed_by, installed_at = row
    return contract_vouch(str(digest), str(name), str(text), str(installed_by), moment(installed_at))
