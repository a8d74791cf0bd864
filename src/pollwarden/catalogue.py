"""The shipped contracts (src/pollwarden/contracts/NAME.toml): what `pollwarden contracts` lists and how
`--contract NAME` is resolved.

`--contract` names a path when it contains `/` or ends in `.toml`, else a shipped contract; an unknown name
lists the known ones. A listing reads each file's TOML only (a shipped contract with a required var cannot be
built until the var is given), so a listing never needs a credential or a var.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .core.contract.parse import Contract, ContractError, load_contract, parse_contract
from .core.contract.vars import shipped_names, shipped_text

__all__ = ["Shipped", "is_path", "resolve_contract", "shipped", "shipped_contract", "shipped_names", "shipped_text"]

EXTRAS = {"aws": "botocore"}
"""Each optional extra and the module whose presence says it is installed."""

_CREDENTIAL_KEYS = (
    "secret_env",
    "username_env",
    "password_env",
    "access_key_env",
    "secret_key_env",
    "session_token_env",
)


@dataclass(frozen=True)
class Shipped:
    name: str
    provider: str
    docs: str
    credentials: tuple[str, ...]
    """Where [auth] reads the credential: environment variables, and `file:PATH` for a token file (no value, ever)."""
    extra: str | None
    """The pip extra the contract needs (`aws` for SigV4), or None."""
    installed: bool
    vars: tuple[tuple[str, str], ...]
    """Declared vars and their defaults ("" = required)."""

    @property
    def required_vars(self) -> tuple[str, ...]:
        return tuple(name for name, default in self.vars if not default)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "provider": self.provider,
            "docs": self.docs,
            "credentials": list(self.credentials),
            "extra": self.extra,
            "extra_installed": self.installed,
            "vars": dict(self.vars),
            "required_vars": list(self.required_vars),
        }


def is_path(argument: str) -> bool:
    return "/" in argument or argument.endswith(".toml")


def _installed(extra: str | None) -> bool:
    return extra is None or importlib.util.find_spec(EXTRAS[extra]) is not None


def _describe(name: str, data: Mapping[str, Any]) -> Shipped:
    auth = data.get("auth") if isinstance(data.get("auth"), dict) else {}
    assert isinstance(auth, dict)
    credentials = tuple(str(auth[key]) for key in _CREDENTIAL_KEYS if isinstance(auth.get(key), str))
    extra = "aws" if auth.get("kind") == "sigv4" else None
    raw_vars = data.get("vars") if isinstance(data.get("vars"), dict) else {}
    assert isinstance(raw_vars, dict)
    token_file = auth.get("token_file")
    if isinstance(token_file, str):
        # A file read at each request (a service account's token): its path, the var's default filled in.
        credentials += (
            "file:" + re.sub(r"\{([a-z][a-z0-9_]*)\}", lambda m: str(raw_vars.get(m[1], m[0])), token_file),
        )
    return Shipped(
        name=name,
        provider=str(data.get("provider", name)),
        docs=str(data.get("docs", "")),
        credentials=credentials,
        extra=extra,
        installed=_installed(extra),
        vars=tuple((str(k), str(v)) for k, v in raw_vars.items()),
    )


def shipped() -> list[Shipped]:
    """Every shipped contract, by name."""
    return [_describe(name, tomllib.loads(shipped_text(name))) for name in shipped_names()]


def shipped_contract(name: str, vars: Mapping[str, str] | None = None) -> Contract:
    return parse_contract(shipped_text(name), source=f"shipped contract {name}", vars=vars)


def resolve_contract(argument: str, vars: Mapping[str, str] | None = None) -> Contract:
    """`--contract` as the spec says: a path if it contains `/` or ends in .toml, else a shipped name."""
    if is_path(argument):
        return load_contract(Path(argument).expanduser(), vars)
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", argument):
        known = ", ".join(shipped_names()) or "none"
        raise ContractError(
            f"--contract {argument!r}: not a shipped contract name (shipped: {known}); a path must contain '/' or"
            " end in .toml"
        )
    return shipped_contract(argument, vars)
