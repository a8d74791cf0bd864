"""What each schema since 6 added, undone, in one table: tests that upgrade a store an older pollwarden left build
it by undoing the newer schemas (`undone_after`), so a new schema adds its undoing here once, not in every test."""

from __future__ import annotations

UNDO: dict[int, tuple[str, ...]] = {
    15: ("DROP INDEX decisions_operation", "DROP INDEX operations_held", "DROP INDEX decisions_answered"),
    14: ("DROP INDEX learnt_samples_contract_recent",),
    13: ("DROP INDEX operations_newest_active",),
    12: ("DROP TABLE learnt_samples",),
    11: ("DROP INDEX operations_paced", "ALTER TABLE operations DROP COLUMN paced_until"),
    10: ("DROP TABLE push_deliveries",),
    9: (
        "DROP INDEX operations_console",
        "DROP INDEX operations_unreadable_contract",
        "DROP INDEX decisions_open_reason",
        "ALTER TABLE decisions DROP COLUMN reason",
    ),
    8: (
        "ALTER TABLE audit_heads DROP COLUMN vouches",
        "DROP TABLE audit_vouches_pending",
        "DROP TABLE audit_key_rotations",
        "DROP TABLE audit_settings",
        "DROP INDEX operations_unreadable",
        "ALTER TABLE operations DROP COLUMN unreadable",
    ),
    7: ("DROP TABLE outbox",),
    6: ("DROP TABLE contracts",),
}
"""Schema version -> the statements that take out what it added (on SQLite and PostgreSQL alike)."""


def undone_after(version: int) -> tuple[str, ...]:
    """The statements that leave a store as schema `version` left it (its version number aside), newest first."""
    assert version + 1 in UNDO or version >= max(UNDO), f"no undoing written for schema {version + 1}"
    return tuple(statement for schema in sorted(UNDO, reverse=True) if schema > version for statement in UNDO[schema])
