"""The credential a contract's `[auth]` names, read, refreshed and applied to one request: the one place it is held.

Sources: an environment variable (read once, when the watch starts), a token command (an argv run without a
shell) or a token file, both reused for the contract's `token_ttl` and fetched again after it or after a 401;
Basic from two variables; AWS SigV4 from three, signed with botocore (the `aws` extra, imported only when a
contract uses it). Every value, in every form it is sent in, reaches the `Scrubber`, so an answer that echoes
a token (an old one included) never gets it stored or shown. A failure says which variable, file or command
(`argv[0]` and its exit status) failed, never what it printed: that output may be the token.
"""

from __future__ import annotations

import base64
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from .core.bounded import TooLarge, read_bounded
from .core.contract import Contract
from .core.contract_auth import Auth, AuthKind
from .core.scrub import Scrubber
from .errors import PollwardenError

TOKEN_COMMAND_TIMEOUT = 30.0
MAX_TOKEN_BYTES = 64 * 1024
"""Far longer than any bearer token or JWT; a command that prints more is printing something else."""

AWS_EXTRA = "pip install 'pollwarden[aws]'"


class CredentialError(PollwardenError):
    """The credential is missing or unusable here, or a request would carry it somewhere the contract does not name."""


def clean(value: str | None, where: str) -> str:
    """The credential as it will be sent, from `where` ("environment variable X", "the output of ...").

    Mounted secrets and command output usually end in a newline, so exactly one trailing "\\n" or "\\r\\n" is
    removed. Whatever is left must be printable ASCII (space to "~") with no space at either end: anything else
    cannot travel in a header unchanged (HTTP strips the spaces, latin-1 is the most a header holds and servers
    disagree even on that), and a value the server reads differently from what we hold is one our scrubber may
    miss."""
    if value is not None:
        value = value[:-2] if value.endswith("\r\n") else value[:-1] if value.endswith("\n") else value
    if not value:
        raise CredentialError(f"the credential in {where} is not set or empty; set it and run again")
    if any(not " " <= ch <= "~" for ch in value) or value != value.strip(" "):
        raise CredentialError(
            f"the credential in {where} holds a control character, a non-ASCII character,"
            " more than one trailing newline or a space at either end, and cannot be sent in a header unchanged;"
            " write it as printable ASCII (one trailing newline is fine) and run again"
        )
    return value


def _from_env(environ: Mapping[str, str], name: str, contract: str) -> str:
    value = environ.get(name) or ""
    if not (value[:-2] if value.endswith("\r\n") else value[:-1] if value.endswith("\n") else value):
        raise CredentialError(
            f"contract {contract!r} needs the credential in environment variable {name}, which is not set;"
            " export it and run again"
        )
    return clean(value, f"environment variable {name}")


def run_token_command(argv: tuple[str, ...], environ: Mapping[str, str], timeout: float) -> str:
    """The token a command prints: no shell, no stdin (it cannot prompt), stderr discarded (it may echo the token)."""
    name = os.path.basename(argv[0])
    try:
        done = subprocess.run(  # an argv list from the contract, never a shell string
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=dict(environ),
            timeout=timeout,
            check=False,
        )
    except (FileNotFoundError, NotADirectoryError):  # a path through a file is as missing as any
        raise CredentialError(f"[auth].token_command: {name!r} was not found; install it or fix the path") from None
    except PermissionError:
        raise CredentialError(f"[auth].token_command: {name!r} is not executable") from None
    except subprocess.TimeoutExpired:
        raise CredentialError(f"[auth].token_command: {name!r} did not finish within {timeout:g} s") from None
    except OSError as exc:
        raise CredentialError(f"[auth].token_command: {name!r} could not run ({exc.__class__.__name__})") from None
    if done.returncode != 0:
        raise CredentialError(
            f"[auth].token_command: {name!r} exited with status {done.returncode}; run it yourself to see why"
        )
    if len(done.stdout) > MAX_TOKEN_BYTES:
        raise CredentialError(f"[auth].token_command: {name!r} printed more than {MAX_TOKEN_BYTES} bytes")
    try:
        text = done.stdout.decode("ascii")
    except UnicodeDecodeError:
        text = "\x00"  # refused by `clean` with its usual message
    return clean(text, f"the output of token_command {name!r}")


def read_token_file(path: str) -> str:
    try:
        data = read_bounded(path, MAX_TOKEN_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        raise CredentialError(f"[auth].token_file: {path} does not exist") from None
    except OSError as exc:
        raise CredentialError(f"[auth].token_file: cannot read {path} ({exc.__class__.__name__})") from None
    except TooLarge:
        raise CredentialError(f"[auth].token_file: {path} is longer than {MAX_TOKEN_BYTES} bytes") from None
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        text = "\x00"
    return clean(text, f"token_file {path}")


@dataclass
class _Cached:
    value: str
    expires: float


_CACHE: dict[tuple[str, ...], _Cached] = {}
"""Per process, keyed by source: every client of one contract (a worker holds many) shares one token, and a 401
seen by one of them makes all fetch a new one."""
_CACHE_LOCK = threading.Lock()


class Credential:
    """Holds the secret so callers never have to; it leaves this object only as request headers (`apply`)."""

    def __init__(
        self,
        contract_name: str,
        auth: Auth,
        environ: Mapping[str, str] | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        command_timeout: float = TOKEN_COMMAND_TIMEOUT,
    ) -> None:
        self.contract_name = contract_name
        self.auth = auth
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._monotonic = monotonic
        self._command_timeout = command_timeout
        self._seen: set[tuple[str, str | None]] = set()
        self._scrubber: Scrubber | None = None
        self._static: str | None = None
        self._fixed: dict[str, str] | None = None
        """The values of a source read once (environment variables): read at `prime`, kept for the watch."""
        self._lock = threading.Lock()

    @classmethod
    def static(cls, contract: Contract, value: str) -> Credential:
        """A header credential whose value the caller already holds (tests, and callers of the older API)."""
        auth = contract.auth
        if auth is None or auth.kind is not AuthKind.HEADER:
            auth = Auth(secret_env="GIVEN")
        made = cls(contract.name, auth, {})
        made._static = value
        made._remember(value, auth.scheme or None)
        return made

    @property
    def refreshable(self) -> bool:
        return self._static is None and self.auth.refreshable

    def prime(self) -> None:
        """Read every value now, so a watch that cannot send its credential stops before anything is created."""
        auth = self.auth
        if auth.kind is AuthKind.SIGV4:
            _botocore()
            if auth.region is None or "{" in auth.region:
                raise CredentialError(f"[auth].region is {auth.region!r}; give the region (--var region=...)")
        self._values()

    def _key(self) -> tuple[str, ...] | None:
        if self.auth.token_command is not None:
            return ("command", *self.auth.token_command)
        if self.auth.token_file is not None:
            return ("file", self.auth.token_file)
        return None

    def _token(self) -> str:
        """The header kind's token: from the cache while it is fresh, else fetched again."""
        if self._static is not None:
            return self._static
        key = self._key()
        if key is None:
            return _from_env(self._environ, self.auth.secret_env or "", self.contract_name)
        with _CACHE_LOCK:
            cached = _CACHE.get(key)
            if cached is not None and self._monotonic() < cached.expires:
                return cached.value
        if self.auth.token_command is not None:
            value = run_token_command(self.auth.token_command, self._environ, self._command_timeout)
        else:
            value = read_token_file(self.auth.token_file or "")
        with _CACHE_LOCK:
            _CACHE[key] = _Cached(value, self._monotonic() + self.auth.token_ttl.total_seconds())
        return value

    def invalidate(self) -> None:
        """A 401: the next request fetches the token again (the core allows that once in a row)."""
        key = self._key()
        if key is not None and self._static is None:
            with _CACHE_LOCK:
                _CACHE.pop(key, None)

    def renew(self) -> None:
        """Read every value again at the next request: the token, and the variables read once for the watch."""
        self.invalidate()
        self._fixed = None

    def _values(self) -> dict[str, str]:
        """The values this credential sends now, each remembered for the scrubber before it is used."""
        if self._fixed is not None:
            return self._fixed
        values = self._read()
        if not self.refreshable:
            self._fixed = values
        return values

    def _read(self) -> dict[str, str]:
        auth = self.auth
        name = self.contract_name
        if auth.kind is AuthKind.BASIC:
            user = _from_env(self._environ, auth.username_env or "", name)
            password = _from_env(self._environ, auth.password_env or "", name)
            if ":" in user:
                raise CredentialError(f"environment variable {auth.username_env} holds ':', which Basic cannot carry")
            encoded = base64.b64encode(f"{user}:{password}".encode("ascii")).decode("ascii")
            self._remember(encoded, "Basic")
            self._remember(password, None)
            return {"basic": encoded}
        if auth.kind is AuthKind.SIGV4:
            values = {
                "access_key": _from_env(self._environ, auth.access_key_env or "", name),
                "secret_key": _from_env(self._environ, auth.secret_key_env or "", name),
            }
            if auth.session_token_env is not None:
                values["session_token"] = _from_env(self._environ, auth.session_token_env, name)
            self._remember(values["secret_key"], None)
            if "session_token" in values:
                self._remember(values["session_token"], None)
            return values
        token = self._token()
        self._remember(token, auth.scheme or None)
        return {"token": token}

    def _remember(self, value: str, scheme: str | None) -> None:
        with self._lock:
            if (value, scheme) not in self._seen:
                self._seen.add((value, scheme))
                self._scrubber = None

    def secret_pairs(self) -> list[tuple[str, str | None]]:
        """Every (value, scheme) held so far, old tokens included: an answer may echo any of them."""
        with self._lock:
            return sorted(self._seen, key=lambda pair: (pair[0], pair[1] or ""))

    def scrubber(self) -> Scrubber:
        with self._lock:
            if self._scrubber is None:
                self._scrubber = Scrubber.joined(self._seen)
            return self._scrubber

    def found_in(self, text: str) -> bool:
        return self.scrubber().found_in(text)

    def apply(self, method: str, url: str, headers: dict[str, str], body: bytes | None, now: datetime) -> None:
        """Add the credential to `headers` for exactly this request (SigV4 signs method, URL, headers and body)."""
        auth = self.auth
        values = self._values()
        if auth.kind is AuthKind.BASIC:
            headers["Authorization"] = f"Basic {values['basic']}"
        elif auth.kind is AuthKind.SIGV4:
            headers.update(sign_sigv4(auth, values, method, url, headers, body, now))
        else:
            token = values["token"]
            headers[auth.header] = f"{auth.scheme} {token}" if auth.scheme else token


def _botocore() -> None:
    try:
        import botocore.auth  # noqa: F401
    except ImportError:
        raise CredentialError(
            f"[auth] kind = 'sigv4' signs with botocore, which is not installed: {AWS_EXTRA}"
        ) from None


SIGV4_TIMESTAMP = "%Y%m%dT%H%M%SZ"


def sign_sigv4(
    auth: Auth,
    values: Mapping[str, str],
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes | None,
    now: datetime,
) -> dict[str, str]:
    """The headers SigV4 adds (Authorization, X-Amz-Date, X-Amz-Security-Token) for the request as sent.

    botocore's `SigV4Auth.add_auth` reads the wall clock itself; these are its steps with the time handed in, so
    the signature is reproducible (tests check AWS's published vectors) and dated by the clock the engine uses.
    The Host header is given as the transport writes it (`netloc`, port included when the URL has one)."""
    _botocore()
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    if auth.region is None or "{" in auth.region or auth.service is None:
        raise CredentialError(f"[auth].region is {auth.region!r}; give the region (--var region=...)")
    request = AWSRequest(method=method, url=url, data=body or b"", headers={**headers, "Host": urlsplit(url).netloc})
    signer = SigV4Auth(
        Credentials(values["access_key"], values["secret_key"], values.get("session_token")),
        auth.service,
        auth.region,
    )
    request.context["timestamp"] = now.astimezone(UTC).strftime(SIGV4_TIMESTAMP)
    signer._modify_request_before_signing(request)
    canonical = signer.canonical_request(request)
    signature = signer.signature(signer.string_to_sign(request, canonical), request)
    signer._inject_signature_to_request(request, signature)
    names = ("Authorization", "X-Amz-Date", "X-Amz-Security-Token")
    return {name: str(request.headers[name]) for name in names if name in request.headers}


def resolve_secret(contract: Contract, environ: Mapping[str, str] | None = None) -> Credential | None:
    """The contract's credential, read now (a command run, a file read, botocore looked for), or None for none."""
    if contract.auth is None:
        return None
    credential = Credential(contract.name, contract.auth, environ)
    credential.prime()
    return credential
