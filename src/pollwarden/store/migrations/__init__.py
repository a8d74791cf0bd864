"""Versioned schema for both backends: `vNNN.sql` files applied in order, each in a transaction of its own.

The files are the one schema source. They are written once, with the column types that differ between
the backends as `{tokens}` (`DIALECTS` is the only place those differences are spelled out), and a
statement that only one backend has is marked with a `-- only <dialect>` line inside it.

PostgreSQL: a fleet shares one database, so the schema is never changed behind a running worker's back:
stores only check the version (`check`), and `pollwarden db upgrade` (`upgrade`) is the one thing that
changes it. A database newer than this code is refused rather than written, because an older worker could
break rules it does not know about (a new column it never sets, a new table it never fences).

SQLite: one machine, one file; the store applies what is pending when it opens the file (`sqlite.py`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from ...core.contract.vars import text_digest
from ..base import StoreError

if TYPE_CHECKING:
    # Only for annotations: the SQLite backend renders these files without loading the PostgreSQL driver.
    import psycopg
    from psycopg.rows import TupleRow

_FILE = re.compile(r"^v(\d{3})\.sql$")
_TOKEN = re.compile(r"\{(\w+)\}")
_ONLY = re.compile(r"^\s*--\s*only\s+(\w+)\s*$")

DIALECTS: dict[str, dict[str, str]] = {
    # Identifiers sort in byte order on both: "C" is what SQLite's default BINARY collation is.
    "postgresql": {
        "id": 'text COLLATE "C"',
        "time": "timestamptz",
        "int": "bigint",
        "float": "double precision",
        "bytes": "bytea",
        "strict": "",
    },
    # STRICT tables refuse a value of the wrong type instead of storing it; times are epoch seconds.
    "sqlite": {"id": "TEXT", "time": "REAL", "int": "INTEGER", "float": "REAL", "bytes": "BLOB", "strict": " STRICT"},
}

UPGRADE_COMMAND = "pollwarden db upgrade"

_LOCK_KEY = 0x706F6C6C_6D696772  # "pollmigr": one upgrader at a time, whatever the other one runs on

_CREATE_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    template: str

    def statements(self, dialect: str) -> list[str]:
        """This migration's statements as `dialect` runs them, in file order."""
        types = DIALECTS[dialect]
        found: list[str] = []
        # Comments go first, so that a ";" in one never splits a statement; the markers stay.
        kept = [line for line in self.template.splitlines() if _ONLY.match(line) or not line.lstrip().startswith("--")]
        for chunk in "\n".join(kept).split(";"):
            lines = chunk.splitlines()
            only = {m.group(1) for m in map(_ONLY.match, lines) if m}
            code = "\n".join(line for line in lines if not _ONLY.match(line)).strip()
            if not code or (only and dialect not in only):
                continue
            found.append(_TOKEN.sub(lambda m: _type(types, m.group(1), self.name), code))
        return found

    def sql(self, dialect: str) -> str:
        return ";\n".join(self.statements(dialect)) + ";\n"


def _type(types: dict[str, str], token: str, name: str) -> str:
    if token not in types:
        raise RuntimeError(f"pollwarden's schema migration {name} uses an unknown type token {{{token}}}")
    return types[token]


def migrations() -> list[Migration]:
    """Every migration shipped with this code, oldest first; gaps are a packaging bug, so they raise."""
    found: list[Migration] = []
    for entry in resources.files(__name__).iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"pollwarden's schema migrations are not numbered 1..n: {[m.name for m in found]}")
    return found


LATEST = len(migrations())
"""The schema version this code reads and writes."""

REGISTRY = 6
"""The migration that adds the contracts registry: once its statements ran, `adopt_stored_contracts` runs."""

ADOPTED_BY = "schema upgrade 6"
"""Who installed a contract the upgrade found on existing operations (`pollwarden contracts installed` shows it)."""


def adopt_stored_contracts(stored: Iterable[tuple[str, str]], insert: Callable[[str, str, str], object]) -> int:
    """Install each distinct (contract text, contract name) the operations hold, by its digest; returns how many.

    The fleet ran these texts before the registry existed; refusing them after the upgrade would stop every
    operation at once. An operator reviews them with `pollwarden contracts installed`."""
    seen: set[str] = set()
    for text, name in stored:
        digest = text_digest(text)
        if digest not in seen:
            seen.add(digest)
            insert(digest, name, text)
    return len(seen)


def refuse_newer(version: int, where: str) -> None:
    if version > LATEST:
        raise StoreError(
            f"{where} has schema version {version}, but this pollwarden knows only up to {LATEST}:"
            " it was upgraded by a newer pollwarden. Upgrade pollwarden on this machine; do not downgrade"
            " the database"
        )


# -- PostgreSQL ----------------------------------------------------------------------------------------


def applied_versions(conn: psycopg.Connection[TupleRow]) -> list[int] | None:
    """Versions recorded in the database, or None when it has never been upgraded (no table)."""
    row = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return None
    return [int(r[0]) for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]


def check(conn: psycopg.Connection[TupleRow], where: str) -> None:
    """Refuse to run on a database whose schema is missing, behind, or ahead of this code."""
    versions = applied_versions(conn)
    if versions is None:
        raise StoreError(
            f"{where} has no pollwarden schema yet. Create it with `{UPGRADE_COMMAND} --db URL`"
            " (run once per database, before starting workers)"
        )
    refuse_newer(max(versions, default=0), where)
    missing = sorted(set(range(1, LATEST + 1)) - set(versions))
    if missing:
        raise StoreError(
            f"{where} is at schema version {max(versions, default=0)}, this pollwarden needs {LATEST}."
            f" Run `{UPGRADE_COMMAND} --db URL` (stop the workers first if they run an older pollwarden)"
        )


def upgrade(conn: psycopg.Connection[TupleRow], where: str = "the database") -> list[int]:
    """Apply pending migrations, one transaction each; returns the versions applied (empty: up to date).

    `conn` must be in autocommit mode. An advisory lock makes two concurrent upgrades take turns; the
    second one finds nothing left to do.
    """
    if not conn.autocommit:
        raise ValueError("upgrade needs an autocommit connection: each migration is its own transaction")
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        conn.execute(_CREATE_TABLE)
        refuse_newer(max(applied_versions(conn) or [0]), where)
    applied: list[int] = []
    for migration in migrations():
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            if migration.version in (applied_versions(conn) or []):
                continue
            if migration.statements("postgresql"):  # a number reserved with no statement yet is only recorded
                # Only this package's own files get here: bytes keep psycopg's literal-string typing satisfied.
                conn.execute(migration.sql("postgresql").encode("utf-8"))
            if migration.version == REGISTRY:
                stored = conn.execute("SELECT DISTINCT contract, contract_name FROM operations").fetchall()
                adopt_stored_contracts(
                    ((str(text), str(name)) for text, name in stored),
                    lambda digest, name, text: conn.execute(
                        "INSERT INTO contracts (digest, name, text, installed_by, installed_at)"
                        " VALUES (%s, %s, %s, %s, now())",
                        (digest, name, text, ADOPTED_BY),
                    ),
                )
            conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (migration.version,))
            applied.append(migration.version)
    return applied
