"""Typed, strict reading of one contract's TOML tables: every complaint names the file and the exact key."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlsplit

from ...errors import PollwardenError
from .. import expr
from ..durations import DurationError, parse_duration


class ContractError(PollwardenError, ValueError):
    """A contract that cannot be used; the message names the file and the key."""


# Its public home: callers catch `pollwarden.core.contract.parse.ContractError`, and the name in a traceback says so.
ContractError.__module__ = "pollwarden.core.contract.parse"


_HOST_NAME = re.compile(r"[A-Za-z0-9.-]+")

ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
"""ASCII case folding: `str.lower` folds other letters too (and `İ` into two characters)."""
DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_key(scheme: str, host: str, port: int | None) -> str:
    """scheme://host[:port] with what RFC 3986 says does not matter taken out: the case of the scheme and the
    host, and the scheme's default port. Two URLs are on one origin when their keys are equal."""
    scheme, host = scheme.translate(ASCII_LOWER), host.translate(ASCII_LOWER)
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != DEFAULT_PORTS.get(scheme):
        netloc += f":{port}"
    return f"{scheme}://{netloc}"


def canonical_origin(url: str) -> str:
    """`origin_key` of a URL already known to parse (a contract's own, or one checked by the caller)."""
    parts = urlsplit(url)
    return origin_key(parts.scheme, parts.hostname or "", parts.port)


def quote_segment(value: str) -> str:
    """One path segment whatever the value holds (a job id, a result id): it can never add a path, a query or a
    host, and a lone `.` or `..` is escaped because a client would resolve that dot segment away."""
    quoted = quote(value, safe="")
    return quoted.replace(".", "%2E") if quoted in {".", ".."} else quoted


def check_url(r: Reader, key: str, url: str) -> None:
    """A URL the client can request exactly as written, refused at load so nothing is created or counted first.

    ASCII only, with no space or control character anywhere (a CR/LF would split the request, and a client
    that quietly re-encodes a URL requests something the contract does not name); http or https; a host name
    or IP literal; a port from 1 to 65535; no userinfo (credentials travel only through [auth])."""
    for ch in url:
        if ord(ch) < 32 or ord(ch) == 127:
            raise r.fail(key, f"holds the control character U+{ord(ch):04X}; a URL must be one printable line")
        if ch == " ":
            raise r.fail(key, "holds a space; percent-encode it as %20")
        if not ch.isascii():
            raise r.fail(key, f"holds the non-ASCII character {ch!r}; percent-encode it, and write an IDN host as xn--")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        detail = "its port is not a number from 1 to 65535" if "ort" in str(exc) else str(exc)
        raise r.fail(key, f"is not a valid URL ({detail}): {url!r}") from None
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise r.fail(key, f"must be an absolute http(s) URL, got {url!r}")
    if port == 0:
        raise r.fail(key, "its port is not a number from 1 to 65535")
    if parts.username is not None or parts.password is not None:
        raise r.fail(key, "must not carry credentials (user:password@); use [auth].secret_env")
    host = parts.hostname
    if parts.netloc.startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise r.fail(key, f"host {host!r} in brackets is not an IPv6 address") from None
    elif not _HOST_NAME.fullmatch(host):
        raise r.fail(key, f"host {host!r} may only use letters, digits, '.' and '-'")


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 (bracketed or not) and `localhost`, which RFC 6761 reserves for the loopback."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def in_clear(url: str) -> bool:
    """Whether a request to `url` would cross a network unencrypted: plain http to anything but the loopback."""
    parts = urlsplit(url)
    return parts.scheme == "http" and not is_loopback(parts.hostname or "")


PLAIN_HTTP_FIX = (
    "use https://, or, if this network is trusted with the credential in clear text, set allow_plain_http = true"
    " at the top of the contract"
)


def check_token(r: Reader, key: str, value: str) -> None:
    """Header names, auth schemes, variable names: ASCII letters (isalnum alone lets "é" in), digits, - and _."""
    if not value or any(not (ch.isascii() and (ch.isalnum() or ch in "-_")) for ch in value):
        raise ContractError(f"{r.source}: {r.where(key)}: {value!r} may only use letters, digits, '-' and '_'")


class Reader:
    """Typed access to one TOML table that names the exact key in every complaint."""

    def __init__(self, source: str, data: Mapping[str, Any], prefix: str) -> None:
        self.source = source
        self.data = data
        self.prefix = prefix

    def where(self, key: str) -> str:
        return f"[{self.prefix}].{key}" if self.prefix else key

    def fail(self, key: str, message: str) -> ContractError:
        return ContractError(f"{self.source}: {self.where(key)}: {message}")

    def only(self, allowed: set[str]) -> None:
        for key in self.data:
            if key not in allowed:
                hint = ", ".join(sorted(allowed))
                raise self.fail(key, f"unknown key; allowed here: {hint}")

    def _get(self, key: str, required: bool) -> Any:
        if key not in self.data:
            if required:
                raise self.fail(key, "required key is missing")
            return None
        return self.data[key]

    def table(self, key: str, required: bool = False) -> Reader:
        value = self._get(key, required)
        if value is None:
            return Reader(self.source, {}, key)
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a table like [{key}], got {type(value).__name__}")
        return Reader(self.source, value, key)

    def text(self, key: str, required: bool = False, allow_empty: bool = False) -> Any:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {type(value).__name__}")
        if not value and not allow_empty:
            raise self.fail(key, "must not be empty")
        return value

    def path(self, key: str, required: bool = False) -> str | None:
        """A file on this machine ([auth].token_file, [tls].ca_file): absolute, so it never depends on the directory a
        worker or a resume happens to run in, and one line."""
        value: str | None = self.text(key, required)
        if value is not None and (not value.startswith("/") or any(ord(ch) < 32 or ord(ch) == 127 for ch in value)):
            raise self.fail(key, f"must be an absolute path on one line, got {value!r}")
        return value

    def expression(self, key: str, required: bool = False) -> str | None:
        """A JMESPath expression over a JSON body (a dotted path is one), compiled now so a typo stops start-up."""
        text: str | None = self.text(key, required)
        if text is not None:
            try:
                expr.check(text)
            except expr.ExpressionError as exc:
                raise self.fail(key, f"{text[:200]!r} {exc}") from None
        return text

    def strings(self, key: str, required: bool = False) -> tuple[str, ...]:
        value = self._get(key, required)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(key, "must be a list of non-empty strings")
        if required and not value:
            raise self.fail(key, "must list at least one state")
        return tuple(value)

    def duration(self, key: str, default: timedelta, positive: bool = False) -> timedelta:
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.fail(key, f"must be a duration string like '90s', got {type(value).__name__}")
        try:
            parsed = parse_duration(value)
        except DurationError as exc:
            raise self.fail(key, str(exc)) from None
        if positive and parsed <= timedelta(0):
            raise self.fail(key, "must be longer than zero")
        return parsed

    def integer(self, key: str, default: int, minimum: int, maximum: int = 1_000_000) -> int:
        value = self._get(key, False)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be a whole number, got {type(value).__name__}")
        if value < minimum or value > maximum:
            raise self.fail(key, f"must be between {minimum} and {maximum}, got {value}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {type(value).__name__}")
        return value
