"""`[vars]`, `use = "NAME"` and the stored envelope: how one contract text is made concrete before it is read.

A contract may declare variables (`[vars] base_url = "https://api.openai.com"`) and reference them as `{name}`
in exactly the keys listed in `EXPANDED`. The values are checked before they are substituted, so a var can
never add a query, a fragment, userinfo, a dot segment or a header line: a `*_url` var is an origin plus an
optional path, a `*_file` var an absolute path on this machine (used only where a file is named: `FILE_KEYS`),
any other var a plain path of safe characters. Expansion happens on the parsed TOML, before the
contract's own reader sees it, so every table's checks (origins, URL shape, JSON bodies) apply to the values
that will actually be sent.

A text stored with an operation must mean the same thing to the worker and to a resume years later, so when
vars or `use` are involved it is stored as a JSON envelope holding the complete TOML and every var's value.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .reader import ContractError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

VAR_NAME = re.compile(r"[a-z][a-z0-9_]*")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?::[A-Za-z_]+)?)\}")
RUNTIME = frozenset({"job_id", "job_id:path", "result"})
"""Placeholders filled per request, never by a var."""
POLL_HEADER_PLACEHOLDERS = frozenset({"reservation", "lease"})
"""Placeholders a `[headers]` value may hold, filled per status request: its reservation number and the fencing
token of the lease it is sent under. Headers that hold one are sent with status requests only."""

_PLAIN_VALUE = re.compile(r"[A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*")
_URL_CHARS = re.compile(r"[A-Za-z0-9._~:/\[\]%-]+")

EXPANDED: tuple[tuple[str, str | None], ...] = (
    ("status_url", None),
    ("status", "body"),
    ("headers", "*"),
    ("cancel", "url"),
    ("submit", "url"),
    ("result", "url"),
    ("escalation", "console_url"),
    ("auth", "region"),
    ("auth", "token_file"),
    ("tls", "ca_file"),
)
"""(table, key) pairs where `{var}` is substituted; (key, None) is a top-level key, (table, "*") every key."""

FILE_KEYS = frozenset({("auth", "token_file"), ("tls", "ca_file")})
"""The keys that name a file on this machine: the only places a `*_file` var may go (a path in a URL or a header
would send where the machine keeps its secrets to the provider)."""

USE_TABLES = frozenset({"schedule", "limits", "agent", "escalation", "not_found", "tls", "push"})
"""What a `use` file may tune, key by key: how often and how long, which CA bundle verifies the provider, and
how the provider's pushes wake it ([push]: its secret's variable, which events, how often); never what a state
or a URL means."""

MAX_FILE_VAR = 4096

ENVELOPE_VERSION = 1


def var_value_problem(name: str, value: object) -> str | None:
    """Why `value` cannot be the var `name`'s value, or None. The same rule for defaults and given values."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        return "holds a control character"
    if ".." in value:
        return "holds '..'; a var may not climb out of the path it is placed in"
    if is_file_var(name):
        if not value.startswith("/") or len(value) > MAX_FILE_VAR:
            return f"{value!r} must be an absolute path (starting with '/') of at most {MAX_FILE_VAR} characters"
        return None
    if name.endswith("_url"):
        if not _URL_CHARS.fullmatch(value):
            return (
                f"{value!r} must be an absolute http(s) URL with no query, fragment, userinfo, space or"
                " percent-unsafe character"
            )
        try:
            parts = urlsplit(value)
            port = parts.port
        except ValueError:
            return f"{value!r} is not a valid URL"
        if parts.scheme not in {"http", "https"} or not parts.hostname or port == 0 or "//" in parts.path:
            return f"{value!r} must be an absolute http(s) URL like https://api.example.com"
        if any(segment in {".", ".."} for segment in parts.path.split("/")):
            return f"{value!r} holds a dot segment"
        return None
    if not _PLAIN_VALUE.fullmatch(value):
        return (
            f"{value!r} may only use letters, digits, '.', '_', '~', '-' and '/' between non-empty segments"
            " (no space, '?', '#', '@' or '%')"
        )
    if any(segment in {".", ".."} for segment in value.split("/")):
        return f"{value!r} holds a dot segment"
    return None


def is_file_var(name: str) -> bool:
    """A var that names a file on this machine (`token_file`, `ca_file`): its value is an absolute path."""
    return name.endswith("_file")


def normal_value(name: str, value: str) -> str:
    """A `*_url` var loses its trailing slash, so `{base_url}/v1` never becomes `//v1`."""
    return value.rstrip("/") if name.endswith("_url") else value


def declared_vars(data: Mapping[str, Any], source: str) -> dict[str, str]:
    """The `[vars]` table as name -> raw default (possibly empty, possibly referencing one other var)."""
    raw = data.get("vars")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ContractError(f"{source}: vars: must be a table like [vars], got {type(raw).__name__}")
    declared: dict[str, str] = {}
    for name, default in raw.items():
        if not VAR_NAME.fullmatch(name):
            raise ContractError(
                f"{source}: [vars].{name}: a var name is lowercase letters, digits and '_', starting with a letter"
            )
        if name in RUNTIME:
            raise ContractError(f"{source}: [vars].{name}: {name} is filled per request and cannot be a var")
        if not isinstance(default, str):
            raise ContractError(
                f"{source}: [vars].{name}: must be a string default ('' means required), got {type(default).__name__}"
            )
        declared[name] = default
    return declared


def resolve_vars(declared: Mapping[str, str], given: Mapping[str, str] | None, source: str) -> dict[str, str]:
    """Every declared var's value: given, else its default (one level of `{other}` expanded), else an error."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(declared))
    if unknown:
        names = ", ".join(sorted(declared)) if declared else "none"
        raise ContractError(f"{source}: unknown var {', '.join(unknown)}; this contract declares: {names}")
    values: dict[str, str] = {}
    for name in declared:
        if name in given:
            value = given[name]
            if (problem := var_value_problem(name, value)) is not None:
                raise ContractError(f"{source}: var {name}: {problem}")
            values[name] = normal_value(name, value)
    for name, default in declared.items():
        if name in values:
            continue
        if not default:
            raise ContractError(f"{source}: var {name} is required: give it with --var {name}=VALUE")
        value = _default_value(name, default, declared, values, source)
        if (problem := var_value_problem(name, value)) is not None:
            raise ContractError(f"{source}: [vars].{name}: {problem}")
        values[name] = normal_value(name, value)
    return values


def _default_value(name: str, default: str, declared: Mapping[str, str], given: Mapping[str, str], source: str) -> str:
    def one(match: re.Match[str]) -> str:
        ref = match.group(1)
        if ref not in declared or ref == name:
            raise ContractError(f"{source}: [vars].{name}: {{{ref}}} names no other declared var")
        if ref in given:
            return given[ref]
        inner = declared[ref]
        if PLACEHOLDER.search(inner):
            raise ContractError(
                f"{source}: [vars].{name}: {{{ref}}} itself references a var; defaults expand one level only"
            )
        if not inner:
            raise ContractError(f"{source}: var {ref} is required (the default of {name} uses it): give --var {ref}=")
        return normal_value(ref, inner)

    return PLACEHOLDER.sub(one, default)


def expand(data: Mapping[str, Any], values: Mapping[str, str], source: str) -> dict[str, Any]:
    """The TOML data with every `{var}` in the EXPANDED keys replaced; an unknown `{x}` there is an error.

    In `[status].body`, a JSON template, a var becomes a JSON string literal (quotes included)."""
    out: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for table, key in EXPANDED:
        if key is None:
            if isinstance(out.get(table), str):
                out[table] = _substitute(out[table], values, source, table, json_literals=False, runtime=RUNTIME)
            continue
        section = out.get(table)
        if not isinstance(section, dict):
            continue  # absent, or the table's own reader says what is wrong with it
        keys = list(section) if key == "*" else [key]
        for name in keys:
            if isinstance(section.get(name), str):
                where = f"[{table}].{name}"
                runtime = RUNTIME | POLL_HEADER_PLACEHOLDERS if table == "headers" else RUNTIME
                section[name] = _substitute(
                    section[name],
                    values,
                    source,
                    where,
                    json_literals=(table == "status"),
                    runtime=runtime,
                    files=(table, name) in FILE_KEYS,
                )
    return out


def _substitute(
    text: str,
    values: Mapping[str, str],
    source: str,
    where: str,
    *,
    json_literals: bool,
    runtime: frozenset[str],
    files: bool = False,
) -> str:
    def one(match: re.Match[str]) -> str:
        ref = match.group(1)
        if ref in runtime:
            return match.group(0)
        if ref not in values:
            declared = ", ".join(sorted(values)) if values else "none"
            raise ContractError(
                f"{source}: {where}: {{{ref}}} names no declared var and no placeholder"
                f" ({', '.join(sorted(runtime))}); declared vars: {declared}"
            )
        if is_file_var(ref) and not files:
            raise ContractError(
                f"{source}: {where}: {{{ref}}} names a file on this machine; a *_file var may be used only in"
                " [auth].token_file and [tls].ca_file"
            )
        return json.dumps(values[ref]) if json_literals else values[ref]

    return PLACEHOLDER.sub(one, text)


# -- the stored envelope ------------------------------------------------------------------------------------


def text_digest(text: str) -> str:
    """A stored contract text's key in a store's contracts registry: its SHA-256, hex (`Contract.digest`)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def wrap(text: str, values: Mapping[str, str]) -> str:
    """The self-contained stored form: the complete TOML and every var's value."""
    return json.dumps(
        {"pollwarden_contract": ENVELOPE_VERSION, "text": text, "vars": dict(sorted(values.items()))},
        sort_keys=True,
        ensure_ascii=False,
    )


def unwrap(text: str, source: str) -> tuple[str, dict[str, str]] | None:
    """(TOML, vars) from an envelope; None for plain TOML (which can never start with '{')."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        envelope = json.loads(text)
    except (ValueError, RecursionError):  # json recurses once per nesting level
        raise ContractError(f"{source}: starts with '{{' but is not a JSON contract envelope") from None
    if not isinstance(envelope, dict) or set(envelope) != {"pollwarden_contract", "text", "vars"}:
        raise ContractError(f"{source}: a contract envelope holds exactly pollwarden_contract, text and vars")
    if envelope["pollwarden_contract"] != ENVELOPE_VERSION:
        raise ContractError(f"{source}: contract envelope version {envelope['pollwarden_contract']!r} is not 1")
    inner, given = envelope["text"], envelope["vars"]
    if not isinstance(inner, str) or not isinstance(given, dict):
        raise ContractError(f"{source}: a contract envelope's text is a string and its vars a table")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in given.items()):
        raise ContractError(f"{source}: a contract envelope's vars map names to strings")
    return inner, given


# -- shipped contracts and `use` ----------------------------------------------------------------------------


def shipped_names() -> list[str]:
    """The contracts shipped as package data (src/pollwarden/contracts/NAME.toml), sorted."""
    folder = _shipped_folder()
    if not folder.is_dir():
        return []
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))


def shipped_text(name: str, source: str = "--contract") -> str:
    """The TOML of one shipped contract; an unknown name lists the known ones."""
    known = shipped_names()
    if name not in known:
        raise ContractError(
            f"{source}: no shipped contract is named {name!r}; shipped: {', '.join(known) or 'none'}"
            " (a path must contain '/' or end in .toml)"
        )
    return (_shipped_folder() / f"{name}.toml").read_text(encoding="utf-8")


def _shipped_folder() -> Traversable:
    # importlib.resources (with tempfile, shutil and the compressors) loads when a shipped contract is named, not
    # with the core: a contract given as a file, and `import pollwarden`, never need it.
    from importlib import resources

    return resources.files("pollwarden") / "contracts"


def merge_use(
    data: Mapping[str, Any], source: str, shipped: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """A `use` file's data over the shipped contract's: (merged data, the file's var values)."""
    allowed = {"use", "name", "vars", "auth", *USE_TABLES}
    for key in data:
        if key not in allowed:
            raise ContractError(
                f"{source}: {key}: a file that says `use` may only set {', '.join(sorted(allowed))};"
                " states, fields and URLs are the shipped contract's meaning (copy it to change them)"
            )
    merged: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in shipped.items()}
    if "name" in data:
        if not isinstance(data["name"], str) or not data["name"]:
            raise ContractError(f"{source}: name: must be a non-empty string")
        merged["name"] = data["name"]
    for table in USE_TABLES & set(data):
        tuned = data[table]
        if not isinstance(tuned, dict):
            raise ContractError(f"{source}: {table}: must be a table like [{table}]")
        base = merged.get(table)
        merged[table] = {**(base if isinstance(base, dict) else {}), **tuned}
    if "auth" in data:
        # Where the credential comes from is the user's (a token command instead of a variable, an AAD bearer
        # instead of a key): the whole table is replaced, never mixed with the shipped one's keys. It still
        # goes only to the contract's origin, and the operation's account (and so its fingerprint) says which.
        if not isinstance(data["auth"], dict):
            raise ContractError(f"{source}: auth: must be a table like [auth]")
        merged["auth"] = dict(data["auth"])
    given = data.get("vars", {})
    if not isinstance(given, dict) or not all(isinstance(v, str) for v in given.values()):
        raise ContractError(f"{source}: [vars]: in a `use` file, each var's value is a string")
    return merged, dict(given)


# -- a TOML writer for the merged `use` data (the standard library only reads TOML) -------------------------


def dump_toml(data: Mapping[str, Any]) -> str:
    """TOML for parsed contract data: scalars and lists first, then tables and arrays of tables."""
    lines: list[str] = []
    _dump_table(data, [], lines)
    return "\n".join(lines) + "\n"


def _dump_table(data: Mapping[str, Any], path: list[str], lines: list[str]) -> None:
    tables = [(k, v) for k, v in data.items() if isinstance(v, dict)]
    arrays = [(k, v) for k, v in data.items() if _is_table_array(v)]
    for key, value in data.items():
        if not isinstance(value, dict) and not _is_table_array(value):
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in tables:
        lines.append(f"\n[{'.'.join(_key(k) for k in [*path, key])}]")
        _dump_table(value, [*path, key], lines)
    for key, items in arrays:
        for item in items:
            lines.append(f"\n[[{'.'.join(_key(k) for k in [*path, key])}]]")
            _dump_table(item, [*path, key], lines)


def _is_table_array(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _string(key)


def _string(text: str) -> str:
    # JSON escapes are TOML basic-string escapes, except that TOML also forbids a raw DEL.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("nan" if math.isnan(value) else f"{value:+}".lower())
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise ContractError(f"a contract value of type {type(value).__name__} cannot be stored")
