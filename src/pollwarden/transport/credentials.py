"""The credential a contract's `[auth]` names, read, refreshed and applied to one request: the one place it is held.

Sources: an environment variable (read once, when the watch starts), a token command (an argv run without a
shell) or a token file, both reused for the contract's `token_ttl` and fetched again after it or after a 401, off
the caller's thread and ahead of need (`token_source`);
Basic from two variables; AWS SigV4 from three, signed with botocore (the `aws` extra, imported only when a
contract uses it). Every value, in every form it is sent in, reaches the `Scrubber`, so an answer that echoes
a token (an old one included) never gets it stored or shown. A failure says which variable, file or command
(`argv[0]` and its exit status) failed, never what it printed: that output may be the token.
"""

from __future__ import annotations

import base64
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from urllib.parse import urlsplit

from ..core.contract.auth import Auth, AuthKind
from ..core.contract.parse import Contract
from ..core.scrub import Scrubber
from .token_source import TOKEN_COMMAND_TIMEOUT, clean, read_token_file, ready_margin, run_token_command, slot_of
from .token_source import CredentialError as CredentialError

AWS_EXTRA = "pip install 'pollwarden[aws]'"


def _is_set(environ: Mapping[str, str], name: str) -> bool:
    """A variable holds a value: unset, empty and a lone line ending are all "not set"."""
    value = environ.get(name) or ""
    return bool(value[:-2] if value.endswith("\r\n") else value[:-1] if value.endswith("\n") else value)


def _from_env(environ: Mapping[str, str], name: str, contract: str) -> str:
    value = environ.get(name) or ""
    if not _is_set(environ, name):
        raise CredentialError(
            f"contract {contract!r} needs the credential in environment variable {name}, which is not set;"
            " export it and run again"
        )
    return clean(value, f"environment variable {name}")


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

    def prime(self, *, wait: bool = True) -> None:
        """Read every value now, so a watch that cannot send its credential stops before anything is created.
        `wait=False` (a worker, which must not wait on any one contract): a token command or file is only set
        running, off this thread (`ready` says when its token is in); everything else is read now, as ever."""
        auth = self.auth
        if auth.kind is AuthKind.SIGV4:
            _botocore()
            if auth.region is None or "{" in auth.region:
                raise CredentialError(f"[auth].region is {auth.region!r}; give the region (--var region=...)")
        if not wait and self._key() is not None and self._static is None:
            self.ready()
            return
        self._values()

    def _key(self) -> tuple[str, ...] | None:
        if self.auth.token_command is not None:
            return ("command", *self.auth.token_command)
        if self.auth.token_file is not None:
            return ("file", self.auth.token_file)
        return None

    def _fetch(self) -> str:
        """One run of this credential's slow source, on the thread its slot runs it on (`token_source`)."""
        if self.auth.token_command is not None:
            return run_token_command(self.auth.token_command, self._environ, self._command_timeout)
        return read_token_file(self.auth.token_file or "")

    def ready(self) -> bool:
        """Whether a request can have this credential now without waiting for a token command or file: its token is
        in (or the failure a request would meet is); if not, the run it waits for is under way. A token due for
        its refresh is refreshed in the background from here, ahead of need."""
        key = self._key()
        if key is None or self._static is not None:
            return True
        ttl = self.auth.token_ttl.total_seconds()
        return slot_of(key).look(self._fetch, self._monotonic, ttl, ready_margin(ttl)) is not None

    def _token(self) -> str:
        """The header kind's token: the one held while it is fresh, else the one its source's run brings (the run
        under way, or one started now)."""
        if self._static is not None:
            return self._static
        key = self._key()
        if key is None:
            return _from_env(self._environ, self.auth.secret_env or "", self.contract_name)
        return slot_of(key).wait(self._fetch, self._monotonic, self.auth.token_ttl.total_seconds())

    def invalidate(self) -> None:
        """A 401: the next request fetches the token again (the core allows that once in a row)."""
        key = self._key()
        if key is not None and self._static is None:
            slot_of(key).drop()

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
            token_env = auth.session_token_env
            # Long-term IAM keys have no session token: an optional one that is not set signs with the pair alone.
            if token_env is not None and (not auth.session_token_optional or _is_set(self._environ, token_env)):
                values["session_token"] = _from_env(self._environ, token_env, name)
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


def resolve_secret(
    contract: Contract, environ: Mapping[str, str] | None = None, *, wait: bool = True
) -> Credential | None:
    """The contract's credential, read now (a command run, a file read, botocore looked for), or None for none.
    `wait=False`: a token command or file is set running in the background instead (`Credential.prime`)."""
    if contract.auth is None:
        return None
    credential = Credential(contract.name, contract.auth, environ)
    credential.prime(wait=wait)
    return credential
