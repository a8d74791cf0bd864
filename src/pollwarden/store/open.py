"""One place that turns `--db` (or POLLWARDEN_DB) into a store, so every command accepts both backends.

Each backend is imported when a store of its kind is opened: a command on SQLite never loads psycopg, and one
that only names a target (`status`'s resume hint, `watch_command`) loads neither backend.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .base import Store, StoreError

if TYPE_CHECKING:
    from ..audit import AuditKeys
    from .witness import Witness

__all__ = ["check_target", "is_postgres_url", "open_store", "redact_url"]

_SECRET_PARAMS = frozenset({"password", "sslpassword"})


def is_postgres_url(target: str | Path) -> bool:
    return isinstance(target, str) and target.lower().startswith(("postgresql://", "postgres://"))


_PERCENT_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def check_target(target: str | Path) -> None:
    """Refuse, before anything is opened, a database that cannot be one: an empty name, or a postgresql:// URL
    that does not parse (an unclosed `[`, a host in brackets that is no IPv6 address, a port that is no number
    from 1 to 65535, a `%` that escapes nothing). The URL is never repeated: it may carry a password."""
    if not str(target).strip():
        raise StoreError("the database is empty: give a SQLite file or a postgresql:// URL, or leave it out")
    if not is_postgres_url(target):
        return
    assert isinstance(target, str)
    fix = "write it as postgresql://user@host:port/database"
    try:
        parts = urlsplit(target)
        port = parts.port
    except ValueError as exc:  # its words are not repeated either: some quote the host
        said = str(exc)
        why = (
            "its port is not a number from 1 to 65535"
            if "ort" in said
            else "a [ in its host is not closed"
            if "Invalid IPv6" in said
            else "its host in brackets is not an IPv6 address"
        )
        raise StoreError(f"the PostgreSQL URL is malformed: {why}; {fix}") from None
    host = parts.netloc.rpartition("@")[2]
    if host.startswith("[") and not _ipv6(host[1 : host.find("]")]):
        raise StoreError(f"the PostgreSQL URL is malformed: its host in brackets is not an IPv6 address; {fix}")
    if port == 0:
        raise StoreError(f"the PostgreSQL URL is malformed: its port is not a number from 1 to 65535; {fix}")
    if _PERCENT_ESCAPE.search(target):
        raise StoreError(f"the PostgreSQL URL is malformed: a % is not followed by two hex digits (write %25); {fix}")


def _ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def redact_url(url: str) -> str:
    """The URL without its password, for messages and `status` output (passwords never reach a log)."""
    if is_postgres_url(url):
        try:
            check_target(url)
        except StoreError:
            return "the PostgreSQL database (a malformed URL)"
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
