"""`pollwarden contracts`: the shipped contracts, `contracts show NAME` for one's TOML, and the store's registry:
`contracts install` (audited) and `contracts installed`."""

from __future__ import annotations

import argparse
import json
import sys

from ..catalogue import Shipped, shipped, shipped_text
from ..core.contract.parse import ContractError
from ..core.durations import format_rfc3339
from ..shown import shown
from .common import EXIT_OK, UsageError
from .terminal import Column, table, table_width

SHIPPED_COLUMNS = (
    Column("NAME"),
    Column("PROVIDER", drop=2, limit=24),
    Column("CREDENTIALS", drop=3, limit=24),
    Column("NEEDS", drop=1, limit=40),
    Column("EXTRA", drop=4, limit=24),
    Column("DOCS", drop=5),
)
"""`contracts`: a narrow terminal loses the docs link first, then the extra, the credentials, the provider."""

INSTALLED_COLUMNS = (
    Column("NAME", limit=32),
    Column("VERSION"),
    Column("INSTALLED", drop=2),
    Column("BY", drop=1, limit=20),
    Column("SENDS TO", drop=3, limit=48),
)


def _row(entry: Shipped) -> list[str]:
    extra = ""
    if entry.extra is not None:
        extra = entry.extra if entry.installed else f"{entry.extra} (missing: pip install 'pollwarden[{entry.extra}]')"
    needs = " ".join(f"--var {name}=..." for name in entry.required_vars)
    return [entry.name, entry.provider, ", ".join(entry.credentials) or "-", needs or "-", extra or "-", entry.docs]


def cmd_contracts(args: argparse.Namespace) -> int:
    if getattr(args, "contracts_command", None) == "show":
        try:
            sys.stdout.write(shipped_text(args.name, "contracts show"))
        except ContractError as exc:
            raise UsageError(str(exc)) from None
        return EXIT_OK
    entries = shipped()
    if args.json:
        print(json.dumps([entry.to_json() for entry in entries], sort_keys=True))
        return EXIT_OK
    table(SHIPPED_COLUMNS, [_row(entry) for entry in entries], table_width(sys.stdout)).print(sys.stdout)
    print("\nUse one with: pollwarden watch --contract NAME --job ID [--var NAME=VALUE ...]")
    return EXIT_OK


def cmd_contracts_install(args: argparse.Namespace) -> int:
    """Install one version into the store's registry, audited; the same text again changes nothing."""
    from ..actions.decisions import person_problem
    from ..clock import utcnow
    from ..engine.installed import install, short
    from ..store.base import StoreError
    from .common import _load_contract, _open_store, vars_of

    if (problem := person_problem(args.by)) is not None:
        raise UsageError(f"--{problem[0]} {problem[1]}; nothing was installed")
    contract = _load_contract(args.contract, vars_of(args))
    store = _open_store(args.home)
    try:
        try:
            found, added = install(
                store, contract, by=args.by, via="pollwarden contracts install", source=args.contract, now=utcnow()
            )
        except StoreError as exc:
            raise UsageError(
                f"cannot install contract {contract.name!r} into {store.path}: {exc}. On PostgreSQL installing needs a"
                " role with INSERT on the contracts table (GRANT SELECT, INSERT ON contracts TO ...); nothing was"
                " installed"
            ) from None
    finally:
        store.close()
    if args.json:
        print(json.dumps({**found.to_json(), "installed": added, "origin": contract.origin}, sort_keys=True))
    elif added:
        print(
            f"installed {shown(contract.name)} version {short(found.digest)}: its requests and credential"
            f" ({shown(contract.account)}) go to {shown(contract.origin)}"
        )
    else:
        print(
            f"{shown(contract.name)} version {short(found.digest)} was installed already, by"
            f" {shown(found.installed_by)} at {format_rfc3339(found.installed_at)}; nothing changed"
        )
    return EXIT_OK


def cmd_contracts_installed(args: argparse.Namespace) -> int:
    """The registry: every installed version, who installed it and when, and where it sends its requests."""
    from ..core.contract.parse import parse_contract
    from ..engine.installed import short
    from .common import _open_store

    store = _open_store(args.home, keys="none")
    try:
        versions = store.installed_contracts(args.name)
    finally:
        store.close()
    rows: list[dict[str, str | None]] = []
    for one in versions:
        try:
            contract = parse_contract(one.text, source=f"installed contract {one.digest}")
            origin, account = contract.origin, contract.account
        except ContractError:  # an installed text this version cannot read: listed, never run
            origin, account = None, None
        rows.append({**one.to_json(), "origin": origin, "account": account})
    if args.json:
        print(json.dumps(rows, sort_keys=True))
        return EXIT_OK
    if not rows:
        print("no contract is installed" + (f" under the name {shown(args.name)}" if args.name else ""))
        print("Install one with: pollwarden contracts install FILE|NAME --by YOUR_NAME")
        return EXIT_OK
    cells = []
    for row in rows:
        at = str(row["installed_at"])[:19] + "Z"
        sends = str(row["origin"]) if row["origin"] else "(cannot be read by this version)"
        cells.append([shown(str(row["name"])), short(str(row["digest"])), at, shown(str(row["installed_by"])), sends])
    table(INSTALLED_COLUMNS, cells, table_width(sys.stdout)).print(sys.stdout)
    return EXIT_OK
