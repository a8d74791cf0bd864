"""One place that turns `--db` (or POLLWARDEN_DB) into a store, so every command accepts both backends.

Each backend is imported when a store of its kind is opened: a command on SQLite never loads psycopg, and one
that only names a target (`status`'s resume hint, `watch_command`) loads neither backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .base import Store, StoreError
from .target import check_target, is_postgres_url, redact_url

if TYPE_CHECKING:
    from ..audit import AuditKeys
    from .witness import Witness

__all__ = ["check_target", "is_postgres_url", "open_store", "redact_url"]


def open_store(
    target: str | Path,
    *,
    keys: AuditKeys | None = None,
    trusted_checkpoint_path: Path | None = None,
    pool_size: int = 4,
    witness: Witness | None = None,
) -> Store:
    """Either backend, behind the one protocol callers type against.

    A `postgresql://` or `postgres://` URL opens the shared database; anything else is a SQLite file.

    A URL is never mistaken for a path: a typo like `postgresq://` would otherwise quietly create a file
    of that name, so only those two schemes are URLs and the rest must look like a path a person meant.
    """
    check_target(target)
    if is_postgres_url(target):
        assert isinstance(target, str)
        from .postgres import PostgresStore

        return PostgresStore(
            target, keys=keys, trusted_checkpoint_path=trusted_checkpoint_path, max_size=pool_size, witness=witness
        )
    if "://" in str(target):
        # Not echoed: a mistyped URL may carry a password.
        scheme = str(target).partition("://")[0]
        raise StoreError(
            f"the database {scheme}://… is a URL of an unknown kind: only postgresql:// and postgres:// URLs"
            " are databases; give one of those, or a path to a SQLite file"
        )
    from .sqlite import SQLiteStore

    return SQLiteStore(Path(target), keys=keys, trusted_checkpoint_path=trusted_checkpoint_path, witness=witness)
