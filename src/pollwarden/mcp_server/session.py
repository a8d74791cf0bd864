"""What a tool sees of the agent's session: the `Session` protocol the tools, gates, submissions and cancels take.

`broker.Broker` is the one implementation. The tools name this protocol rather than the broker, so the broker
imports the tools and nothing of theirs imports the broker back: the modules of this package form layers
(`base` and `views` under `session`, the tools over it, `broker` over the tools, `server` on top)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from threading import Event
from typing import Any, Protocol

from ..core.contract.parse import Contract
from ..core.record import OperationRecord
from ..core.scrub import Scrubber
from ..engine import Engine
from ..events import NewEvent
from ..report.progress import Progress
from ..store.base import Store
from ..transport.http import StatusClient
from .base import CallContext

__all__ = ["SAME_USER_SESSION", "Creation", "Separation", "Session"]

SAME_USER = "none (the agent's user can read the credential and approve)"
"""`pollwarden mcp` without --connect: said at start and by list_operations (docs/agents.md, "Isolation")."""
ANY_PERSON = "anyone who can run pollwarden on this home"


@dataclass(frozen=True)
class Separation:
    """Who the agent is and who may answer for it: what a broker's session knows that a same-user one does not."""

    principal: Mapping[str, Any] | None = None
    """Who the agent is, as the kernel told the broker (uid, user, gid, pid); None in same-user mode."""
    isolation: str = SAME_USER
    approvers: str = ANY_PERSON
    """Who may approve this session's calls, as a person reads it ("one of: alice, @ops")."""
    person_flags: str = "--by NAME"
    """What follows a person's command in the sentences an agent passes on: `--by NAME` here, a broker's
    `--connect SOCKET` (where the kernel names the person)."""


SAME_USER_SESSION = Separation()


@dataclass
class Creation:
    """A session's reserved slot for one new operation (`Session.creating`)."""

    before: int
    """Operations of the contract the session had created (or reserved) before this one."""
    made: bool = False


class Session(Protocol):
    """One agent session: its served contracts, its store connections, its audit chain, its limits."""

    contracts: dict[str, Contract]
    clock: Callable[[], datetime]
    session_id: str
    log_id: str
    principal: dict[str, Any] | None
    isolation: str
    approvers: str
    person_flags: str
    problems: list[str]
    not_ready: dict[str, str]
    stopping: Event
    wait_without_progress: float

    @property
    def scrubber(self) -> Scrubber: ...

    @property
    def requester(self) -> str: ...

    def store(self) -> AbstractContextManager[Store]: ...

    def audit(self, store: Store, event: NewEvent) -> None: ...

    def contract(self, name: str) -> Contract: ...

    def ready(self, contract: Contract) -> None: ...

    def operation(self, store: Store, operation_id: str) -> tuple[Contract, OperationRecord]: ...

    def agent_made(self, store: Store, operation_id: str) -> bool: ...

    def refuse_a_persons_job(self, store: Store, contract: Contract, job_id: str) -> None: ...

    def provider_ready(self, contract: Contract, record: OperationRecord) -> None: ...

    def client(self, contract: Contract) -> StatusClient: ...

    def engine(self, store: Store) -> Engine: ...

    def creating(self, contract: Contract) -> AbstractContextManager[Creation]: ...

    def next_call_number(self) -> int: ...

    def advance(self, store: Store, operation_id: str, call: CallContext) -> dict[str, Any]: ...

    def step(
        self, store: Store, operation_id: str, call: CallContext, *, after_poll: bool = False
    ) -> tuple[dict[str, Any], Progress]: ...
