"""`[result]`: what a validated result looks like (its JSON type, non-empty) and how `fetch-result` gets it.

The result is any JSON value the provider sends where `[fields].result` points: a string reference (an
OpenAI file id, a presigned URL), an object (a Google operation's `response`), an array (Replicate's
`output`). It is judged here before success is declared (R17), so a success without a usable result is a
recorded stop (`result_invalid`), never a guess. The lookup of the value lives with `[fields]`; this module
only sees what was found, so the lookup can change without changing what is accepted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..expr import json_type
from .reader import (
    ASCII_LOWER,
    DEFAULT_PORTS,
    ContractError,
    Reader,
    canonical_origin,
    check_url,
    origin_key,
    quote_segment,
)

JSONValue = str | int | float | bool | None | list[Any] | dict[str, Any]
"""One JSON value as `json.loads` returns it (the order matters to events.py's coercion: int before float)."""

Counts = tuple[tuple[str, int | float], ...]
"""The provider's tallies of a job that ended (`[fields].counts`), in its order: what part of it the result covers.
Pairs, not a dict, so the record and the observation that hold them stay hashable values."""

RESULT_TYPES = ("string", "object", "array", "any")

MAX_RESULT_LENGTH = 4096
"""A string result is a reference (an id, a URL): longer than any real one, and short enough to show in a line."""

MAX_RESULT_JSON_BYTES = 64 * 1024
"""An object or array result is stored in the record and shown by status and MCP: bigger belongs in a file."""

FETCH_MAX_BYTES_DEFAULT = 1 << 30
FETCH_MAX_BYTES_LIMIT = 1 << 40

_PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]*(?::path)?)\}")


@dataclass(frozen=True)
class ResultSpec:
    """`[result]`; the defaults are today's meaning, so a contract without the table reads as it always did."""

    type: str = "string"
    non_empty: bool = True
    url: str | None = None
    """A template with `{result}` (quoted as one path segment); None: an absolute URL result is fetched as is."""
    credential: bool | None = None
    """Whether the fetch carries the credential; None only without a `[result]` table (today's rule: it goes
    along to the contract's own origin and nowhere else)."""
    max_bytes: int = FETCH_MAX_BYTES_DEFAULT
    hosts: tuple[str, ...] = ()
    """Hosts besides the status URL's origin a result may be fetched from: `host` (the scheme's default port),
    `host:port`, or `*.domain` (its subdomains, not itself). Lower case."""
    partial: tuple[str, ...] = ()
    """The categories besides success ("failure", "cancelled", "expired") whose answer may carry the finished part
    of the job (an expired OpenAI batch's output file): the result field is read there too, and a valid result
    is kept with the stop (and fetched by `fetch-result`); an absent one is no result, never a problem."""
    declared: bool = False

    def identity(self) -> dict[str, object] | None:
        """What of this table fixes the meaning of a poll (a success is judged by it); None when undeclared, so
        an old contract's fingerprint is unchanged. The fetch keys do not change what a poll means."""
        if not self.declared:
            return None
        identity: dict[str, object] = {"type": self.type, "non_empty": self.non_empty}
        if self.partial:  # only when used, so a contract without it keeps its fingerprint
            identity["partial"] = list(self.partial)
        return identity


def compact(value: JSONValue) -> str:
    """A non-string result in one line: compact JSON with its keys sorted, as status, watch and views show it."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def result_text(value: JSONValue) -> str | None:
    """How a result reads as text: a string as it is (today's output), anything else as compact JSON."""
    if value is None:
        return None
    return value if isinstance(value, str) else compact(value)


def counts_text(counts: Counts | None) -> str | None:
    """The provider's tallies as a person reads them, by name ("completed 9990, failed 0, total 10000"): the same
    line wherever it is read from, since a stored JSON object (the audit trail's) keeps no order."""
    if not counts:
        return None
    pairs = sorted(counts)
    return ", ".join(f"{name} {value:g}" if isinstance(value, float) else f"{name} {value}" for name, value in pairs)


def check_result(spec: ResultSpec, path: str, found: bool, value: object) -> tuple[JSONValue, str | None]:
    """(the result, None) when it is what `[result]` says, else (None, why) naming the field.

    Missing, null, the wrong JSON type and empty are told apart, because each sends a person somewhere else:
    a missing field is often a contract error, a null one a provider that has not finished writing it."""
    where = f"result field {path!r}"
    if not found:
        return None, f"{where} is missing"
    if value is None:
        return None, f"{where} is null"
    kind = json_type(value)
    wanted = spec.type
    if wanted != "any" and kind != wanted:
        article = "an" if wanted[0] in "aeiou" else "a"
        return None, f"{where} is a JSON {kind}, not {article} {wanted}"
    if isinstance(value, str):
        if spec.non_empty and not value.strip():
            return None, f"{where} is empty"
        if wanted == "string" and (
            len(value) > MAX_RESULT_LENGTH or any(ord(ch) < 32 or ord(ch) == 127 for ch in value)
        ):
            return None, f"{where} is not a usable reference (too long or control characters)"
        if len(value) > MAX_RESULT_JSON_BYTES:
            return None, f"{where} is a string of {len(value)} characters, more than {MAX_RESULT_JSON_BYTES}"
        return value, None
    if isinstance(value, list | dict):
        if spec.non_empty and not value:
            return None, f"{where} is an empty {kind}"
        size = len(compact(value).encode("utf-8"))
        if size > MAX_RESULT_JSON_BYTES:
            return None, (
                f"{where} is {size} bytes of JSON, more than the {MAX_RESULT_JSON_BYTES} a record holds;"
                " point [fields].result at a reference to it instead"
            )
        return value, None
    if isinstance(value, bool | int | float):
        return value, None
    return None, f"{where} is not a JSON value"  # pragma: no cover - json.loads makes nothing else


def fetch_url(spec: ResultSpec, result: JSONValue, job_id: str = "") -> tuple[str | None, str | None]:
    """(the URL `fetch-result` downloads, None), or (None, why not); (None, None): the result is written as JSON.

    The template quotes the result as one segment, so an id can never add a path, query or host. Without a
    template only an absolute http(s) URL, or a path on the contract's own origin (`/results/1`), is fetched:
    a bare id resolved against the status URL was the 404 of issue 11."""
    if spec.url is not None:
        url = spec.url.replace("{job_id}", quote_segment(job_id))
        if "{result}" not in spec.url:
            return url, None  # the job names its own results (Anthropic: /v1/messages/batches/{job_id}/results)
        if not isinstance(result, str):
            return None, f"the result is a JSON {json_type(result)}; [result].url needs a string to put in it"
        return url.replace("{result}", quote_segment(result)), None
    if not isinstance(result, str):
        return None, None
    try:
        parts = urlsplit(result)
    except ValueError:
        parts = None
    if parts is not None and parts.scheme in {"http", "https"} and parts.hostname:
        return result, None
    if result.startswith("/") and not result.startswith("//"):
        return result, None  # an absolute path: the caller joins it to the contract's origin
    return None, (
        f"the result {result[:200]!r} is not a URL and the contract has no [result].url template saying where"
        " to fetch it; nothing was sent"
    )


def result_url_problem(spec: ResultSpec, origin: str, url: str) -> str | None:
    """Why `fetch-result` must not download `url` (nothing is sent), or None: it is on the status URL's `origin`
    or on a host `[result].hosts` names. A result URL comes from the provider's answer, so without this a
    hostile or mistaken answer could point the download (and, through MCP, an agent's eyes) anywhere."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "the result URL is not a valid URL; nothing was sent"
    if parts.scheme.lower() not in DEFAULT_PORTS or not parts.hostname:
        return "the result URL is not an absolute http(s) URL; nothing was sent"
    if origin_key(parts.scheme, parts.hostname, port) == canonical_origin(origin):
        return None
    host = parts.hostname.translate(ASCII_LOWER)
    port = port if port is not None else DEFAULT_PORTS[parts.scheme.lower()]
    for entry in spec.hosts:
        name, _, entry_port = entry.rpartition(":") if _has_port(entry) else (entry, "", "")
        if entry_port and int(entry_port) != port:
            continue
        if not entry_port and port != DEFAULT_PORTS[parts.scheme.lower()]:
            continue
        name = name.strip("[]")  # urlsplit gives an IPv6 host without its brackets
        if name == host or (name.startswith("*.") and host.endswith(name[1:])):
            return None
    shown = origin_key(parts.scheme, parts.hostname, parts.port)
    named = ", ".join(spec.hosts) if spec.hosts else "none"
    return (
        f"the result is at {shown}, which is neither the status URL's origin {origin} nor a host the contract's"
        f" [result].hosts names ({named}); nothing was sent"
    )


def _has_port(entry: str) -> bool:
    """`host:port` or `[v6]:port`, not a bare IPv6 literal in brackets."""
    return entry.rpartition(":")[2].isdigit() and (not entry.startswith("[") or "]:" in entry)


_HOST_ENTRY = re.compile(r"(\*\.)?([a-z0-9-]+(\.[a-z0-9-]+)*|\[[0-9a-f:.]+\])(:[0-9]{1,5})?")


def _hosts(t: Reader) -> tuple[str, ...]:
    raw = t.data.get("hosts")
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(entry, str) for entry in raw):
        raise t.fail("hosts", 'must be a list of host names, like ["files.example.com"]')
    hosts: list[str] = []
    for entry in raw:
        lowered = entry.translate(ASCII_LOWER)
        match = _HOST_ENTRY.fullmatch(lowered)
        port = match.group(4) if match is not None else None
        if match is None or (port is not None and not 1 <= int(port[1:]) <= 65535):
            raise t.fail(
                "hosts",
                f"{entry!r} is not a host name, `host:port` or `*.domain` (letters, digits, '.' and '-'; an IPv6"
                " address in brackets)",
            )
        hosts.append(lowered)
    return tuple(hosts)


def parse_result(r: Reader, result_field: str | None) -> ResultSpec:
    """`[result]`, strictly: each complaint names the file and the key, and says what to write instead."""
    if "result" not in r.data:
        return ResultSpec()
    t = r.table("result")
    t.only({"type", "non_empty", "url", "credential", "max_bytes", "hosts", "partial"})
    if result_field is None:
        raise t.fail("type", "a [result] table needs [fields].result, the field that holds the result")
    kind = t.text("type") or "string"
    if kind not in RESULT_TYPES:
        raise t.fail("type", f"must be 'string', 'object', 'array' or 'any', got {kind!r}")
    url: str | None = t.text("url")
    if url is not None:
        if kind not in {"string", "any"}:
            raise t.fail("url", f"needs a string result to put in the URL; type is {kind!r}")
        _check_template(t, url)
    fetchable = url is not None or kind == "string"
    if fetchable and "credential" not in t.data:
        raise t.fail(
            "credential",
            "required key is missing: say whether fetch-result sends the credential (true: only to the"
            " contract's origin; false: never)",
        )
    credential = t.boolean("credential", False)
    return ResultSpec(
        type=kind,
        non_empty=t.boolean("non_empty", True),
        url=url,
        credential=credential,
        max_bytes=_max_bytes(t),
        hosts=_hosts(t),
        partial=_partial(t),
        declared=True,
    )


PARTIAL_CATEGORIES = ("failure", "cancelled", "expired")
"""The endings whose answer may still carry a result: the provider ended the job, and what finished is output."""


def _partial(t: Reader) -> tuple[str, ...]:
    raw = t.data.get("partial")
    if raw is None:
        return ()
    words = ", ".join(repr(c) for c in PARTIAL_CATEGORIES)
    if not isinstance(raw, list) or not raw or not all(isinstance(c, str) for c in raw):
        raise t.fail("partial", f"must be a non-empty list of the categories whose answer keeps a result ({words})")
    for category in raw:
        if category not in PARTIAL_CATEGORIES:
            raise t.fail(
                "partial", f"{category!r} is not one of {words}: a success always keeps its result, and a job that"
                " has not ended has no result to keep",
            )  # fmt: skip
    if len(set(raw)) != len(raw):
        raise t.fail("partial", "lists a category twice")
    return tuple(raw)


def _check_template(t: Reader, url: str) -> None:
    """`{result}` or `{job_id}` (or both), each at most once and not in the host; other `{name}`s are vars,
    expanded before this is read: a stand-in takes their place so the rest of the URL is still checked here."""
    counts = {name: url.count("{" + name + "}") for name in ("result", "job_id")}
    if not any(counts.values()) or any(count > 1 for count in counts.values()):
        raise t.fail("url", "must contain the placeholder {result} or {job_id} (or both), each at most once")
    host = url.partition("//")[2].partition("/")[0]
    if "{result}" in host or "{job_id}" in host:
        raise t.fail("url", "a placeholder may not be part of the host")
    stand_in = url.replace("{result}", "result").replace("{job_id}", "job")

    def var(match: re.Match[str]) -> str:
        return "https://var.invalid" if match.start() == 0 else "var"

    stand_in = _PLACEHOLDER.sub(var, stand_in)
    if "{" in stand_in or "}" in stand_in:
        raise t.fail("url", "holds a '{' or '}' that is not a placeholder like {result}; percent-encode it")
    check_url(t, "url", stand_in)


def _max_bytes(t: Reader) -> int:
    # Not Reader.integer: its 1,000,000 ceiling is far below the 1 GiB default of a file download.
    value = t.data.get("max_bytes")
    if value is None:
        return FETCH_MAX_BYTES_DEFAULT
    if isinstance(value, bool) or not isinstance(value, int):
        raise t.fail("max_bytes", f"must be a whole number of bytes, got {type(value).__name__}")
    if not 1 <= value <= FETCH_MAX_BYTES_LIMIT:
        raise t.fail("max_bytes", f"must be between 1 and {FETCH_MAX_BYTES_LIMIT} (1 TiB), got {value}")
    return value


__all__ = [
    "FETCH_MAX_BYTES_DEFAULT",
    "MAX_RESULT_JSON_BYTES",
    "MAX_RESULT_LENGTH",
    "PARTIAL_CATEGORIES",
    "RESULT_TYPES",
    "ContractError",
    "Counts",
    "JSONValue",
    "ResultSpec",
    "check_result",
    "compact",
    "counts_text",
    "fetch_url",
    "json_type",
    "parse_result",
    "result_text",
    "result_url_problem",
]
