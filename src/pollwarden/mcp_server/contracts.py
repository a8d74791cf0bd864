"""The contracts an MCP server serves: DIR/*.toml, named by their `name`, never by a path.

A file may be a whole contract or `use = "NAME"` plus `[vars]`: a shipped contract with this server's values
(the agent names the contract; the person who wrote the directory chose where it points)."""

from __future__ import annotations

from pathlib import Path

from ..core.contract.parse import Contract, ContractError, load_contract


def load_contracts(directory: Path) -> tuple[dict[str, Contract], list[str]]:
    """Contracts by name from DIR/*.toml; unusable files and ambiguous names are reported, not served."""
    found: dict[str, Contract] = {}
    problems: list[str] = []
    ambiguous: set[str] = set()
    for path in sorted(directory.glob("*.toml")):
        try:
            contract = load_contract(path)  # a `use` file resolves to the shipped contract with its [vars]
        except ContractError as exc:
            problems.append(str(exc))
            continue
        if contract.name in found:
            ambiguous.add(contract.name)
            problems.append(f"{path}: contract name {contract.name!r} is used by two files; neither is served")
            continue
        found[contract.name] = contract
    for name in ambiguous:
        found.pop(name, None)
    return found, problems
