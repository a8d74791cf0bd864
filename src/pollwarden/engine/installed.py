"""Installed contracts only (issue 23): the one rule for what may create an operation and what may run one.

An operation runs with the credential and the token command of whoever runs it (a worker, a person's `decide`),
not of whoever enqueued it. So an operator installs each contract version into the store's registry
(`pollwarden contracts install`, audited), and:
- admission creates an operation only for an installed version (`not_installed`, asked by `Engine`): `enqueue`
  never installs, so an enqueuer cannot choose where the workers' credential goes;
- whatever runs a stored operation runs its text only when exactly that text is installed (`runnable`): a row
  whose contract was swapped, or that was written behind the engine's back, is refused before its text is even
  parsed, and so before any credential is read or any token command runs.
Interfaces that run with their caller's own environment (a `watch --contract FILE`, the Python API, `submit`, an
MCP server for its contracts directory) install what they are given as they start (`install`), audited with who.
"""

from __future__ import annotations

import os
from datetime import datetime

from ..core.admission import Problem, Refusal, Refuse
from ..core.contract.parse import Contract, parse_contract
from ..core.contract.vars import text_digest
from ..errors import PollwardenError
from ..events import ContractInstalled
from ..store.base import InstalledContract, Store, StoreError
from ..store.roles import Contracts

INSTALL_COMMAND = "pollwarden contracts install"

NOT_INSTALLED_RULE = "contract_not_installed"
"""The rule of the stop recorded when something claims an operation whose stored contract is not installed."""


class NotInstalled(PollwardenError):
    """A contract version the store's operators have not installed: nothing was created, sent or run."""

    def __init__(self, message: str, digest: str) -> None:
        super().__init__(message)
        self.digest = digest


def short(digest: str) -> str:
    """A digest as people read it (`contracts installed` shows the same 12 characters)."""
    return digest[:12]


def install(
    store: Contracts, contract: Contract, *, by: str, via: str, source: str, now: datetime
) -> tuple[InstalledContract, bool]:
    """Install `contract`'s stored text (once: a version installed already is left as it was, first installer
    kept); audited in `@contract/<digest>` with who, how and what it does with a credential. Looked up first, so
    a role that may only read the registry (PostgreSQL) finds an installed version without being refused."""
    found = store.installed_contract(contract.digest)
    if found is not None:
        return found, False
    event = ContractInstalled(
        name=contract.name,
        digest=contract.digest,
        by=by,
        via=via,
        source=source,
        origin=contract.origin,
        account=contract.account,
    )
    return store.install_contract(contract.name, contract.source_text, by=by, at=now, event=event)


def install_as_caller(store: Store, contract: Contract, *, via: str, source: str, now: datetime) -> None:
    """For an interface that runs with its caller's own environment and credential (a `watch --contract FILE`,
    the Python API, `submit`, an MCP server's contracts directory): what it is given is installed as it starts,
    by this process's OS user. A store this role may not install into (PostgreSQL grants) is NotInstalled,
    unless the version is installed already."""
    try:
        install(store, contract, by=current_user(), via=via, source=source, now=now)
    except StoreError as exc:
        why = not_installed(store, contract) or f"contract {contract.name!r} cannot be installed"
        raise NotInstalled(f"{why}; this database role may not install it ({exc})", contract.digest) from None


def current_user() -> str:
    """This process's OS user name, as the kernel has it (who installs, when a person's command installs)."""
    from ..isolation.peers import user_name

    return user_name(os.geteuid())


def not_installed(store: Store, contract: Contract) -> str | None:
    """Why `contract` may not create an operation in `store` (this version is not installed), or None."""
    if store.installed_contract(contract.digest) is not None:
        return None
    return _why(store, contract.name, contract.digest, "its operations would run with the fleet's credentials")


def refusal(store: Store, contract: Contract) -> Refuse | None:
    """`not_installed` as admission's refusal, for every interface that admits (`Engine`)."""
    why = not_installed(store, contract)
    return None if why is None else Refuse(Refusal.NOT_INSTALLED, (Problem(None, why),))


def runnable(store: Contracts, text: str, *, operation_id: str) -> Contract:
    """The contract stored with an operation, parsed only once that exact text is installed: NotInstalled (before
    parsing, so nothing of it is read or run) or ContractError (an installed text this version cannot read)."""
    digest = text_digest(text)
    if store.installed_contract(digest) is None:
        raise NotInstalled(
            f"operation {operation_id} carries a contract version (digest {short(digest)}) that is not installed"
            " in this store: nothing of it was run or sent. If you trust it, compare it with what you installed"
            f" (`pollwarden contracts installed`), then install the file it came from with `{INSTALL_COMMAND} FILE"
            " --by YOUR_NAME`",
            digest,
        )
    return parse_contract(text, source=f"the contract stored with {operation_id}")


def _why(store: Contracts, name: str, digest: str, because: str) -> str:
    where = store.path
    others = store.installed_contracts(name)
    if others:
        versions = ", ".join(f"{short(one.digest)} (by {one.installed_by})" for one in others[-3:])
        return (
            f"contract {name!r} is installed in {where} as version {versions}, not as this text (digest"
            f" {short(digest)}): the name is reused with another digest. An operator installs this version with"
            f" `{INSTALL_COMMAND} FILE --by YOUR_NAME` ({because})"
        )
    return (
        f"contract {name!r} (digest {short(digest)}) is not installed in {where}: an operator installs it first with"
        f" `{INSTALL_COMMAND} FILE --by YOUR_NAME` ({because})"
    )


__all__ = [
    "INSTALL_COMMAND",
    "NOT_INSTALLED_RULE",
    "NotInstalled",
    "current_user",
    "install",
    "install_as_caller",
    "not_installed",
    "refusal",
    "runnable",
    "short",
]
