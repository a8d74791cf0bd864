"""One place that turns `--db` (or POLLWARDEN_DB) into a store, so every command accepts both backends.

Each backend is imported when a store of its kind is opened: a command on SQLite never loads psycopg, and one
that only names a target (`status`'s resume hint, `watch_command`) loads neither backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .base import Store, StoreError

if TYPE_CHECKING:
    from ..audit import AuditKeys
    from .witness import Witness

__all__ = ["is_postgres_url", "open_store", "redact_url"]

_SECRET_PARAMS = frozenset({"password", "sslpassword"})


def is_postgres_url(target: str | Path) -> bool:
    return isinstance(target, str) and target.lower().startswith(("postgresql://", "postgres://"))


def redact_url(url: str) -> str:
    """The URL without its password, for messages and `status` output (passwords never reach a log)."""
    if is_postgres_url(url):
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hosts = netloc.rpartition("@")
            user = userinfo.partition(":")[0]
            netloc = f"{user}@{hosts}" if user else hosts
        query = parts.query
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(key.lower() in _SECRET_PARAMS for key, _ in pairs):
            query = urlencode([(key, value) for key, value in pairs if key.lower() not in _SECRET_PARAMS])
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    # A libpq connection string (`host=db password=...`): only libpq's own parser reads it right.
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        return "the PostgreSQL database (unparseable connection string)"
    return make_conninfo("", **{key: value for key, value in params.items() if key not in _SECRET_PARAMS})


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
