"""What `--db` (or POLLWARDEN_DB) names: a SQLite file or a PostgreSQL URL, checked before anything is opened, and
said back without its password. No backend is loaded here (`open` opens one; `postgres` names its URL so)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .base import StoreError

__all__ = ["check_target", "is_postgres_url", "redact_url"]

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
