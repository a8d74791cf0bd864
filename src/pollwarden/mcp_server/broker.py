"""The broker behind the MCP tools: the served contracts, the store, the agent session and one tool dispatch.

The `Broker` is plain synchronous code (tested directly and driven by the MCP tools on worker threads). It holds
what every call shares (contracts, credentials, the session's identity and audit log) and opens a fresh store
connection per call; the tools themselves are plain functions over it (`tools.py`), the approval gates likewise
(`gates.py`), so the class stays the session's state and its lookups.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from .. import __version__
from ..core.admission import operation_id_problem, watchable_problem
from ..core.contract.parse import Contract
from ..core.decide import Finished, Halt, Poll, Wait, next_step
from ..core.record import OperationRecord
from ..core.scrub import Scrubber
from ..engine import Engine, NotYet, Polled, StepResult
from ..engine.installed import NotInstalled, install_as_caller
from ..events import NewEvent, SessionStarted
from ..home.operating import HomeError, home_clock, open_store
from ..report.progress import Progress, progress_of, progress_of_record
from ..store.base import Store, UnreadableRecord, agent_log_id
from ..store.owner import process_owner
from ..transport.http import Credential, CredentialError, StatusClient
from .base import UNREADABLE_TO_AGENT, CallContext, ToolFailure, check_arguments, clean_text, log
from .gates import RequestMade, gated_call
from .reporting import timing
from .scrub import secret_values, wire_safe
from .session import SAME_USER_SESSION, Creation, Separation
from .submit import tool_submit_job
from .tools import TOOLS, Tool
from .views import final, not_yet, reply

AGENT_REQUESTER = "agent session "
"""How every agent session names itself in what it creates; `created_by` starting so marks an agent's operation."""


class Broker:
    """The agent-facing operations, synchronous, each on its own store connection."""

    def __init__(
        self,
        contracts: Mapping[str, Contract],
        home: Path,
        *,
        environ: Mapping[str, str] | None = None,
        session_id: str | None = None,
        clock: Callable[[], datetime] | None = None,
        problems: Iterable[str] = (),
        separation: Separation = SAME_USER_SESSION,
    ) -> None:
        env = os.environ if environ is None else environ
        self.principal = dict(separation.principal) if separation.principal is not None else None
        self.isolation = separation.isolation
        self.approvers = separation.approvers
        self.person_flags = separation.person_flags
        self.contracts = dict(contracts)
        self.home = home
        self.clock = home_clock(home) if clock is None else clock
        """The store's clock (the database's on PostgreSQL) unless a test gives its own: every claim, lease and
        audit time this session writes comes from it, as every other driver's does."""
        self.session_id = session_id or secrets.token_hex(6)
        self.log_id = agent_log_id(self.session_id)
        self._static_secrets = secret_values(self.contracts.values(), env)
        self._scrubber = Scrubber.joined(self._static_secrets)
        self._scrubber_pairs = frozenset(self._static_secrets)
        self.problems = list(problems)
        self.stopping = threading.Event()
        self.heartbeat_seconds, self.wait_without_progress = timing(env)
        self._secrets: dict[str, Credential | None] = {}
        self._reading: dict[str, threading.Lock] = {}
        """One lock per contract whose token a command prints: run once when a call first needs it, not at start."""
        self._read: set[str] = set()
        self.not_ready: dict[str, str] = {}
        for name, contract in self.contracts.items():
            credential = None if contract.auth is None else Credential(contract.name, contract.auth, env)
            self._secrets[name] = credential
            if credential is not None and credential.auth.token_command is not None:
                self._reading[name] = threading.Lock()  # a command may hang: never before initialize is answered
            elif credential is not None:
                try:  # the environment, a file: read now, so a missing one is said at start
                    credential.prime()
                except CredentialError as exc:
                    self._secrets[name] = None
                    self.not_ready[name] = str(exc)
            if (unwatchable := watchable_problem(contract)) is not None:
                self.not_ready[name] = unwatchable
        self._lock = threading.Lock()
        self._agent_made: dict[str, bool] = {}
        self._created: dict[str, int] = {}
        """Operations this session created (or is creating) per contract: `[agent].max_operations` bounds them."""
        self._started = False
        self._calls = 0
        self.environ = env
        """The session's environment: its credentials, and the webhook's signing secret its deliveries use."""
        self.tools: dict[str, Tool] = {**TOOLS, "submit_job": tool_submit_job}
        # Opening once creates the audit keys before any concurrent tool call could race to create them; the
        # served contracts are installed then (audited, by this server's OS user, who chose the directory).
        with self.store() as store:
            for name, contract in self.contracts.items():
                try:
                    source = f"contracts directory: {name}"
                    install_as_caller(store, contract, via="mcp server", source=source, now=self.clock())
                except NotInstalled as exc:
                    self.not_ready[name] = str(exc)

    # -- plumbing ------------------------------------------------------------------------------------

    def _connect(self) -> Store:
        try:
            return open_store(self.home, keys="write")
        except HomeError as exc:
            raise ToolFailure("store_unavailable", f"the state store cannot be opened: {exc}") from None

    @contextlib.contextmanager
    def store(self) -> Iterator[Store]:
        store = self._connect()
        try:
            yield store
        finally:
            store.close()

    def audit(self, store: Store, event: NewEvent) -> None:
        """A durable record in the session's audit chain; when it cannot be written, nothing happens."""
        try:
            store.append(self.log_id, event, self.clock())
        except Exception as exc:
            raise ToolFailure(
                "audit_unavailable",
                f"the audit record ({event.KIND}) could not be written, so nothing was done: {exc.__class__.__name__}",
            ) from None

    def start_session(self, client: Mapping[str, Any] | None) -> None:
        """Written once, before the first tool call is served: which process, which contracts, which client."""
        with self._lock:
            if self._started:
                return
            with self.store() as store:
                self.audit(
                    store,
                    SessionStarted.prepared(
                        {
                            "session": self.session_id,
                            "pid": os.getpid(),
                            "isolation": self.isolation,
                            "agent": self.principal,
                            "server": f"pollwarden {__version__}",
                            "client": dict(client) if client else None,
                            "contracts": {n: c.approval for n, c in sorted(self.contracts.items())},
                            "contract_problems": self.problems,
                        }
                    ),
                )
            self._started = True

    def dispatch(
        self, tool: str, call: CallContext, client: Mapping[str, Any] | None, **arguments: Any
    ) -> tuple[bool, dict[str, Any]]:
        """Run one tool; every outcome (reply, refusal, crash) comes back scrubbed as (ok, JSON-able dict)."""
        try:
            check_arguments(arguments)
            self.start_session(client)
            handler = self.tools[tool]
            answer = handler(self, call, **arguments)
            return True, wire_safe(self.scrubber.value(answer))
        except ToolFailure as failure:
            return False, wire_safe(self.scrubber.value(failure.to_json()))
        except Exception as exc:  # the agent gets a sentence, the operator the (scrubbed) traceback
            log.exception("tool %s failed", tool)
            message = f"internal error in {tool}: {exc.__class__.__name__}: {exc}"[:500]
            return False, wire_safe(self.scrubber.value({"error": "internal_error", "message": message}))

    # -- lookups -------------------------------------------------------------------------------------

    def contract(self, name: str) -> Contract:
        contract = self.contracts.get(name) if isinstance(name, str) else None
        if contract is None:
            raise ToolFailure(
                "unknown_contract",
                f"no contract named {clean_text(str(name), 80)!r} is served here; contracts are named by their"
                " `name`, never by a path",
                contracts=sorted(self.contracts),
            )
        return contract

    @property
    def scrubber(self) -> Scrubber:
        """Every secret the environment holds for the served contracts, and every token read so far."""
        pairs = set(self._static_secrets)
        for credential in self._secrets.values():
            if credential is not None:
                pairs.update(credential.secret_pairs())
        if pairs != self._scrubber_pairs:  # a token read since: rebuilt once, by whichever call sees it first
            self._scrubber, self._scrubber_pairs = Scrubber.joined(pairs), frozenset(pairs)
        return self._scrubber

    def ready(self, contract: Contract) -> None:
        # What start found wrong first (a contract no watch may poll among it): no token command runs for it.
        problem = self.not_ready.get(contract.name)
        if problem is not None:
            log.warning("contract %s is not ready: %s", contract.name, problem)
            raise ToolFailure(
                "not_ready",
                f"contract {contract.name!r} is not ready on this server (its credential or safety declaration is"
                " missing); a person must fix the server's configuration. Nothing was sent",
            )
        self._read_token(contract)

    def _read_token(self, contract: Contract) -> None:
        """A command's token, read by the first call that needs it; calls of the same contract meanwhile wait for
        that one run instead of starting their own. Once read, it is the credential's: kept for its ttl and read
        again before a poll that needs it, as every interface does (`StatusClient.prepare`). A failure is this
        call's `not_ready`; the next call tries again (the command may have been fixed)."""
        reading = self._reading.get(contract.name)
        credential = self._secrets.get(contract.name)
        if reading is None or credential is None or contract.name in self._read:
            return
        with reading:
            if contract.name in self._read:
                return
            try:
                credential.prime()
                self._read.add(contract.name)
            except CredentialError as exc:
                log.warning("contract %s is not ready: %s", contract.name, exc)
                raise ToolFailure(
                    "not_ready",
                    f"contract {contract.name!r} could not read its credential ({exc}); a person must fix the"
                    " server's configuration. Nothing was sent",
                ) from None

    def operation(self, store: Store, operation_id: str) -> tuple[Contract, OperationRecord]:
        if operation_id_problem(operation_id) is not None:
            raise ToolFailure("unknown_operation", "no such operation; list_operations() shows them")
        try:
            stored = store.get(operation_id)
        except UnreadableRecord as exc:
            if exc.row.contract_name in self.contracts and self.agent_made(store, operation_id):
                raise ToolFailure("unreadable", f"operation {operation_id!r}: {UNREADABLE_TO_AGENT}") from None
            stored = None
        served = stored is not None and stored.record.contract_name in self.contracts
        # A person's operation answers as one that does not exist, so an agent cannot probe which do.
        if stored is None or not served or not self.agent_made(store, operation_id):
            raise ToolFailure("unknown_operation", f"no operation {operation_id!r}; list_operations() shows them")
        return self.contracts[stored.record.contract_name], stored.record

    def agent_made(self, store: Store, operation_id: str) -> bool:
        """Agents act only on operations an agent session created: one a person started on a served contract
        (CLI, worker queue, Python API) is theirs, its budget and its result. Read from the `created` event, which
        never changes (or from the submission's intent, for an operation a submission made), so it is read once
        per operation."""
        known = self._agent_made.get(operation_id)
        if known is None:
            # A submitted operation's first event is its submission's intent, which names who submitted.
            kinds = ("created", "submission_intent")
            created = next((e for e in store.events(operation_id) if e.kind in kinds), None)
            by = created.data.get("created_by") if created is not None else None
            known = isinstance(by, str) and by.startswith(AGENT_REQUESTER)
            self._agent_made[operation_id] = known
        return known

    def refuse_a_persons_job(self, store: Store, contract: Contract, job_id: str) -> None:
        """start_watch on a job a person's operation watches would rejoin (or narrow) theirs: refused instead,
        without its id. Admission rejoins the newest operation of the job, so that is the one that counts."""
        newest = store.find_job(contract.name, job_id)[:1]
        if newest and not self.agent_made(store, newest[0].record.operation_id):
            raise ToolFailure(
                "conflict",
                f"job {clean_text(job_id, 80)!r} is watched by an operation a person started; an agent may not act"
                " on it (its budget and result are theirs). Nothing was created",
            )

    def provider_ready(self, contract: Contract, record: OperationRecord) -> None:
        """Configuration ready: a credential, a safe status endpoint, and the table the operation was made with."""
        self.ready(contract)
        if contract.fingerprint() != record.contract_fingerprint:
            raise ToolFailure(
                "not_ready",
                f"operation {record.operation_id} was created with another version of contract {contract.name!r}"
                " (states, fields, status URL or credential); a person must resume it with the original. Nothing"
                " was sent",
            )

    def client(self, contract: Contract) -> StatusClient:
        return StatusClient(contract, self._secrets.get(contract.name), clock=self.clock)

    def engine(self, store: Store) -> Engine:
        """The one engine every interface drives."""
        return Engine(store, owner=process_owner("mcp"), clock=self.clock)

    @contextlib.contextmanager
    def creating(self, contract: Contract) -> Iterator[Creation]:
        """One more operation of `contract` reserved for this session while a call admits (or submits) it: the
        `Creation` says how many the session created before (`WatchRequest.created_before`), and the caller
        marks it `made` when one was created; otherwise (a resume, a refusal, a failure) the slot is given back.
        Calls in parallel each see the others' reservations, so no two of them pass the cap together."""
        with self._lock:
            creation = Creation(self._created.get(contract.name, 0))
            self._created[contract.name] = creation.before + 1
        try:
            yield creation
        finally:
            if not creation.made:
                with self._lock:
                    self._created[contract.name] -= 1

    def next_call_number(self) -> int:
        """The session's provider calls are numbered, so each intent record pairs with its result."""
        with self._lock:
            self._calls += 1
            return self._calls

    # -- one step of the controller ------------------------------------------------------------------

    def advance(self, store: Store, operation_id: str, call: CallContext) -> dict[str, Any]:
        """At most one poll: "not yet" (no provider request) when nothing is due. A caller that asked for
        progress is told the step's `Progress` (the same one whatever the step was)."""
        return self.step(store, operation_id, call)[0]

    def step(
        self, store: Store, operation_id: str, call: CallContext, *, after_poll: bool = False
    ) -> tuple[dict[str, Any], Progress]:
        """`advance`, and the step's `Progress` for a waiter that reads it too. A look that finds nothing due
        right `after_poll` is not reported: the poll's own note said it all (one note a poll)."""
        answer, progress = self._step(store, operation_id, call)
        if call.progress is not None and not (after_poll and not progress.polled):
            call.progress.step(progress)
        return answer, progress

    def _step(self, store: Store, operation_id: str, call: CallContext) -> tuple[dict[str, Any], Progress]:
        contract, record = self.operation(store, operation_id)
        now = self.clock()
        step = next_step(record, now)
        if isinstance(step, Finished):
            return final(store, record, now), progress_of_record(record)
        if isinstance(step, Wait):
            return not_yet(record, step.until, now), progress_of(NotYet(record, step.until))
        if isinstance(step, Halt):  # a stop found before any request: recorded, nothing sent
            with self.client(contract) as client:
                result = self.engine(store).step(contract, client, operation_id)
            return reply(store, result, self.clock()), progress_of(result)
        assert isinstance(step, Poll)
        late = call.answer_by is not None and time.monotonic() + contract.timeout.total_seconds() > call.answer_by
        if late and call.polls_started:
            # Its request could run past the moment this call must answer by: left for the next call (a call's
            # first poll is always made, or a contract slower than the bound would never be polled by waits).
            return {**not_yet(record, now, now), "deferred": True}, progress_of(NotYet(record, now))

        def send() -> tuple[StepResult, dict[str, Any]]:
            call.polls_started += 1  # only once the gates let it go: a request made meanwhile started nothing here
            with self.client(contract) as client:
                result = self.engine(store).step(contract, client, operation_id)
            if isinstance(result, Polled):
                polled = result.decision.record
                outcome = {
                    "outcome": "sent",
                    "http_status": result.observation.http_status,
                    "state": result.observation.state,
                    "phase": polled.phase.value,
                    "reason": polled.reason.value if polled.reason else None,
                    "request_no": polled.status_requests_used,
                }
            else:
                outcome = {"outcome": "not_sent", "step": type(result).__name__.lower()}
            return result, outcome

        try:
            result = gated_call(self, store, contract, record, "status_request", call, send)
        except RequestMade:
            return self._step(store, operation_id, call)
        return reply(store, result, self.clock()), progress_of(result)

    @property
    def requester(self) -> str:
        return f"{AGENT_REQUESTER}{self.session_id}"
