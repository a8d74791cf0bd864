"""The contract's `[auth]` table: which credential is sent, from where, and how (spec part 8, `[auth]`).

Three kinds: `header` (a token in one header, from an environment variable, a command or a file), `basic`
(user and password from two variables) and `sigv4` (AWS Signature Version 4). Only names live here, never a
value: the driver half (`pollwarden.transport.credentials`) reads and sends them, so the core stays pure and a contract
(which is stored with every operation) can never hold a secret.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from .reader import Reader, check_token

DEFAULT_TOKEN_TTL = timedelta(minutes=5)
MAX_TOKEN_TTL = timedelta(hours=24)
"""A token reused longer than a day is a token nobody refreshes; refused rather than trusted for ever."""

FRAMING_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
"""Headers only the HTTP client writes: neither the credential nor a static [headers] value may take their place."""


class AuthKind(StrEnum):
    HEADER = "header"
    BASIC = "basic"
    SIGV4 = "sigv4"


@dataclass(frozen=True)
class Auth:
    """Where the credential comes from and how it travels; `secret_env` first so `Auth(secret_env=...)` still reads
    as it did before the other kinds existed."""

    secret_env: str | None = None
    header: str = "Authorization"
    scheme: str = "Bearer"
    kind: AuthKind = AuthKind.HEADER
    token_command: tuple[str, ...] | None = None
    token_file: str | None = None
    token_ttl: timedelta = DEFAULT_TOKEN_TTL
    username_env: str | None = None
    password_env: str | None = None
    service: str | None = None
    region: str | None = None
    access_key_env: str | None = None
    secret_key_env: str | None = None
    session_token_env: str | None = None
    session_token_optional: bool = False
    """`session_token_optional = true`: long-term IAM keys have no session token; without the variable the request
    is signed with the key pair alone (with it, the token is sent and signed as before)."""

    @property
    def refreshable(self) -> bool:
        """A 401 may mean the token expired: only a command or a file can give a different one when asked again."""
        return self.token_command is not None or self.token_file is not None

    @property
    def env_names(self) -> tuple[str, ...]:
        """Every environment variable this credential is read from (for a scrubber that must know them all)."""
        names = (
            self.secret_env,
            self.username_env,
            self.password_env,
            self.access_key_env,
            self.secret_key_env,
            self.session_token_env,
        )
        return tuple(name for name in names if name is not None)

    @property
    def account(self) -> str:
        """The credential context in words that hold no secret: which variables, file or command, sent how.

        The header+secret_env form is exactly today's, because it is part of every stored fingerprint."""
        if self.kind is AuthKind.BASIC:
            return f"basic:env:{self.username_env},env:{self.password_env} via Authorization"
        if self.kind is AuthKind.SIGV4:
            token = f",env:{self.session_token_env}" if self.session_token_env else ""
            if self.session_token_env and self.session_token_optional:
                token += " if set"  # only when used, so the account (and fingerprint) of every older contract stays
            return f"sigv4:{self.service}/{self.region} env:{self.access_key_env},env:{self.secret_key_env}{token}"
        if self.token_command is not None:
            return f"command:{shlex.join(self.token_command)} via {self.header}"
        if self.token_file is not None:
            return f"file:{self.token_file} via {self.header}"
        return f"env:{self.secret_env} via {self.header}"


_HEADER_SOURCES = ("secret_env", "token_command", "token_file")
_KEYS = {
    AuthKind.HEADER: {"kind", "header", "scheme", *_HEADER_SOURCES, "token_ttl"},
    AuthKind.BASIC: {"kind", "username_env", "password_env"},
    AuthKind.SIGV4: {
        "kind",
        "service",
        "region",
        "access_key_env",
        "secret_key_env",
        "session_token_env",
        "session_token_optional",
    },
}
_SERVICE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_REGION = re.compile(r"[a-z0-9][a-z0-9-]{0,62}|\{[a-z][a-z0-9_]*\}")
"""A literal region (`us-east-1`) or one var (`{region}`), which the [vars] layer fills in and checks."""
MAX_ARGV = 64
MAX_ARG_LENGTH = 4096


def parse_auth(r: Reader) -> Auth | None:
    """The `[auth]` table, or None when the contract sends no credential; every bad combination names its key."""
    if "auth" not in r.data:
        return None
    a = r.table("auth")
    kind_text = a.text("kind") or AuthKind.HEADER.value
    if kind_text not in {k.value for k in AuthKind}:
        raise a.fail("kind", f"must be 'header', 'basic' or 'sigv4', got {kind_text!r}")
    kind = AuthKind(kind_text)
    for key in a.data:
        if key not in _KEYS[kind]:
            other = [k.value for k in AuthKind if key in _KEYS[k]]
            hint = f" (it belongs to kind = {other[0]!r})" if other else ""
            raise a.fail(key, f"unknown key for kind = {kind.value!r}{hint}; allowed: {', '.join(sorted(_KEYS[kind]))}")
    if kind is AuthKind.BASIC:
        return Auth(
            kind=kind,
            header="Authorization",
            scheme="Basic",
            username_env=_env_name(a, "username_env", required=True),
            password_env=_env_name(a, "password_env", required=True),
        )
    if kind is AuthKind.SIGV4:
        return _sigv4(a)
    return _header(a)


def _header(a: Reader) -> Auth:
    given = [key for key in _HEADER_SOURCES if key in a.data]
    if len(given) > 1:
        raise a.fail(given[1], f"give one credential source, not both {given[0]} and {given[1]}")
    if not given:
        raise a.fail(
            "secret_env",
            "required key is missing; name the credential's source: secret_env, token_command or token_file",
        )
    header = a.text("header") or "Authorization"
    check_token(a, "header", header)
    if header.lower() in FRAMING_HEADERS:
        raise a.fail("header", f"{header!r} is HTTP framing the client writes; send the credential in another header")
    scheme = a.text("scheme", allow_empty=True)
    if scheme:
        check_token(a, "scheme", scheme)
    command = _command(a) if "token_command" in a.data else None
    token_file = a.path("token_file")
    if "token_ttl" in a.data and command is None and token_file is None:
        raise a.fail("token_ttl", "applies only to token_command or token_file; an environment variable is read once")
    ttl = a.duration("token_ttl", DEFAULT_TOKEN_TTL, positive=True)
    if ttl > MAX_TOKEN_TTL:
        raise a.fail("token_ttl", "must be at most 24h; a token is fetched again after this long")
    return Auth(
        secret_env=_env_name(a, "secret_env") if "secret_env" in a.data else None,
        header=header,
        scheme="Bearer" if scheme is None else scheme,
        token_command=command,
        token_file=token_file,
        token_ttl=ttl,
    )


def _command(a: Reader) -> tuple[str, ...]:
    """An argv list run without a shell: a string would need one, and a shell is where injection lives."""
    value = a.data["token_command"]
    if isinstance(value, str):
        raise a.fail("token_command", 'must be a list of arguments like ["gcloud", "auth", "print-access-token"]')
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(arg, str) for arg in value)
        or not value[0]
        or len(value) > MAX_ARGV
    ):
        raise a.fail("token_command", f"must be a non-empty list of at most {MAX_ARGV} strings, the first not empty")
    for arg in value:
        if len(arg) > MAX_ARG_LENGTH or "\x00" in arg:
            raise a.fail("token_command", f"an argument is longer than {MAX_ARG_LENGTH} characters or holds NUL")
    return tuple(value)


def _sigv4(a: Reader) -> Auth:
    service = a.text("service", required=True)
    if not _SERVICE.fullmatch(service):
        raise a.fail("service", f"must be an AWS signing name like 'textract', got {service!r}")
    region = a.text("region", required=True)
    if not _REGION.fullmatch(region):
        raise a.fail("region", f"must be a region like 'us-east-1' or a var like '{{region}}', got {region!r}")
    return Auth(
        kind=AuthKind.SIGV4,
        header="Authorization",
        scheme="AWS4-HMAC-SHA256",
        service=service,
        region=region,
        access_key_env=_env_name(a, "access_key_env", required=True),
        secret_key_env=_env_name(a, "secret_key_env", required=True),
        session_token_env=_env_name(a, "session_token_env") if "session_token_env" in a.data else None,
        session_token_optional=_session_token_optional(a),
    )


def _session_token_optional(a: Reader) -> bool:
    optional = a.boolean("session_token_optional", False)
    if optional and "session_token_env" not in a.data:
        raise a.fail("session_token_optional", "says session_token_env may be unset; name session_token_env too")
    return optional


def _env_name(a: Reader, key: str, *, required: bool = False) -> str:
    name: str = a.text(key, required=required)
    check_token(a, key, name)
    return name
