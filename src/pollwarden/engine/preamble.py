"""What every interface does before a watch starts, written once (issue 25): `ready`, before any store is opened,
then `admit`, on the store. The CLI's `watch` and `enqueue`, the Python API, the MCP server's `start_watch` and
`submit_job` (and so the broker, which serves them) call these and only say a `Refused` in their own words
(`Refused.said`): an exit-2 message naming their flags, a `WatchError`, an agent's `ToolFailure`.

- `ready`: the contract may be watched at all (`core.watchability`: its status request is safe to repeat), its
  credential is there (`Credentials`: read now, held if it is there, or given by the caller), and admission's
  `check` passes with that credential (no job id or status URL holds it; the caps; the origin rule). Nothing
  has been opened, created or sent when it refuses. The Python API asks the same questions but the credential's
  as a `Watch` is built (`core.watchability.checked`, the core alone), and `ready` when it runs.
- `admit`: on the store, the contract installed when its caller runs it with their own credential (`Installing`;
  a store that may not install it raises `NotInstalled`, as every installer's does), then the engine admits:
  create, resume or narrow the operation, or refuse (`Refused` with admission's refusal).
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass, replace
from enum import Enum

from ..core.admission import HeldSecret, WatchRequest, held_secret
from ..core.watchability import Refused, checked, watchable
from ..transport.http import Credential, CredentialError, resolve_secret
from .admitting import AdmissionError, Admitted
from .driver import Engine
from .installed import install_as_caller


class Credentials(Enum):
    """Where the credential a watch is checked against (and polls with) comes from."""

    READ = "read"
    """This process polls with it: read now (a token command runs), and a watch without it is refused."""
    HELD = "held"
    """Another process polls with it (a worker): taken only when a value is there to read (never a command's), so
    a job id that holds it is still refused here; never a refusal when it is not there."""
    GIVEN = "given"
    """The request carries it already (an MCP session: every credential it keeps, `Scrubber`)."""


@dataclass(frozen=True)
class Ready:
    """A request `check` passed, with the credential it was checked against (and that this process polls with)."""

    request: WatchRequest
    secret: Credential | None


@dataclass(frozen=True)
class Installing:
    """A caller who runs the contract with their own credential installs it as the watch starts (audited): `via`,
    the interface; `source`, where the contract came from (a file, a name)."""

    via: str
    source: str


def credential_of(request: WatchRequest, credentials: Credentials) -> str | HeldSecret | None:
    """The contract may be watched (asked first: no credential is read for one that may not), and its credential
    as `credentials` says; Refused when not, or when it must be read and cannot."""
    watchable(request)
    contract = request.contract
    if credentials is Credentials.READ:
        try:
            return resolve_secret(contract)
        except CredentialError as exc:
            raise Refused(str(exc)) from None
    # Only a value that is read, never one that is made: a token command runs only where its contract is run.
    if credentials is Credentials.HELD and contract.auth is not None and contract.auth.token_command is None:
        with suppress(CredentialError):
            return held_secret(contract, resolve_secret(contract))
    return request.credential


def ready(request: WatchRequest, credentials: Credentials = Credentials.READ) -> Ready:
    """Everything that needs no store, before one is opened: whether the contract may be watched, its credential
    (`credential_of`), and admission's `check` of the request against it. Refused when not; nothing was created or
    sent."""
    credential = credential_of(request, credentials)
    request = checked(replace(request, credential=credential))
    return Ready(
        request, credential if isinstance(credential, Credential) and credentials is Credentials.READ else None
    )


def admit(ready: Ready, engine: Engine, installing: Installing | None = None) -> Admitted:
    """On the engine's store: the contract installed for a caller who runs it (`installing`), then admitted:
    the operation created, resumed or narrowed. Refused with admission's refusal; NotInstalled when this store may
    not install it."""
    if installing is not None:
        install_as_caller(
            engine.store, ready.request.contract, via=installing.via, source=installing.source, now=engine.clock()
        )
    try:
        return engine.admit(ready.request)
    except AdmissionError as exc:
        raise Refused(str(exc), exc.refusal) from None


__all__ = ["Credentials", "Installing", "Ready", "Refused", "admit", "credential_of", "ready"]
