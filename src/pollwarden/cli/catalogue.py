"""`pollwarden contracts`: the shipped contracts, and `contracts show NAME` for one's TOML."""

from __future__ import annotations

import argparse
import json
import sys

from ..catalogue import Shipped, shipped, shipped_text
from ..core.contract import ContractError
from .common import EXIT_OK, UsageError


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
    header = ["NAME", "PROVIDER", "CREDENTIALS", "NEEDS", "EXTRA", "DOCS"]
    rows = [header, *(_row(entry) for entry in entries)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1])
    print("\nUse one with: pollwarden watch --contract NAME --job ID [--var NAME=VALUE ...]")
    return EXIT_OK
