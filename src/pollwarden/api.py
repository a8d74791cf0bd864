"""The Python API for agent code that is not MCP: one bounded watch, a typed outcome, the same core and store.

    from pollwarden import Succeeded, Watch

    outcome = Watch("contracts/exports.toml", "exp_71c", home="~/.local/state/pollwarden").run()
    if isinstance(outcome, Succeeded):
        use(outcome.result)
    else:
        tell_a_person(outcome.reason, outcome.decision)

`await pollwarden.watch(...)` runs the same watch on a worker thread, so the event loop keeps running while the
watcher sleeps between polls (with no lease held, R38); `pollwarden.watch_sync(...)` is its blocking twin. The
record, the audit trail and the decision request are exactly what `pollwarden watch` leaves: `status`, `story`,
`decisions` and `decide` work on them as on any other operation. The watches of one home that run at the same
time share one store (`home_store`): the first opens it, the last closes it.

Cancelling the task that awaits `watch(...)` (`asyncio.wait_for`, `task.cancel()`) stops polling within one
request: a request in flight is answered and recorded, no new one starts, an `interrupted` event is audited, the
lease is given back, and the thread has ended when the CancelledError reaches the caller (so `asyncio.run`
returns at once). `Watch.cancel()` does the same for a blocking `run()` from another thread (it raises
`WatchCancelled`). Either way the operation stays active with its deadline and budget: watching the same
`operation_id` again resumes it.

`on_progress(Progress)` is called on the watch's thread after every step (`Progress.polled` marks the ones that
sent a request). If it raises, the watch stops as a cancel does (an `interrupted` event, the lease given back,
the operation resumable) and its exception reaches the caller of `run()` / `watch_sync()` / `await watch()`.

The caller's process holds the credential here (it comes from the environment, as for `pollwarden watch`), so a
contract that asks for agent approvals (`approval = "session"` or `"per_call"`) is refused: those gates protect a
credential from an agent, and only `pollwarden mcp`, which keeps the credential away from the agent, can enforce
them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack, cast

from .catalogue import resolve_contract
from .core.admission import Limits, WatchRequest, operation_id_problem
from .core.contract.parse import Contract, ContractError, load_contract
from .core.contract.result import JSONValue
from .core.durations import DurationError, parse_duration
from .core.escalation import DecisionRequest
from .core.reasons import Phase, StopReason
from .core.record import OperationRecord
from .core.watchability import Refused, checked, watchable
from .errors import EXIT_INTERRUPTED, PollwardenError

if TYPE_CHECKING:
    from .engine import StepResult
    from .report.progress import Progress
    from .store.base import Store
    from .store.roles import Decisions

__all__ = [
    "Outcome",
    "Stopped",
    "Succeeded",
    "Watch",
    "WatchCancelled",
    "WatchError",
    "WatchOptions",
    "watch",
    "watch_sync",
]


_NAMES = {"status_location": "status_url"}
"""Admission's field names as this API's parameters, where they differ."""


class WatchError(PollwardenError, ValueError):
    """A watch that cannot start or resume as asked; nothing was sent. The message says what to change."""


class WatchCancelled(PollwardenError):
    """`Watch.cancel()` stopped `run()` before the operation was final. It stays active, unleased, with its
    deadline and budget, and its audit says so (`interrupted`); run a Watch of `operation_id` to resume it."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, operation_id: str) -> None:
        super().__init__(
            f"the watch of operation {operation_id} was cancelled; it stays active with its deadline and budget:"
            f" resume it with operation_id={operation_id!r}"
        )
        self.operation_id = operation_id


@dataclass(frozen=True)
class Succeeded:
    """The provider reported success and every field the next action needs passed validation (R17)."""

    operation_id: str
    result: JSONValue
    """Any JSON value the contract's `[result]` allows: a str for a string result (the default), as before."""
    record: OperationRecord

    @property
    def counts(self) -> dict[str, int | float] | None:
        """What part of the job the result covers, as the provider counted it (`[fields].counts`), if it did."""
        return None if self.record.counts is None else dict(self.record.counts)


@dataclass(frozen=True)
class Stopped:
    """Waiting ended without success. `decision` is the open request a person answers (None when the job
    itself ended at the provider and nothing is left to decide, or when it was already decided)."""

    operation_id: str
    reason: StopReason
    decision: DecisionRequest | None
    record: OperationRecord | None = None

    @property
    def job_ended(self) -> bool:
        return self.reason.job_ended

    @property
    def partial_result(self) -> JSONValue:
        """The finished part of a job the provider ended (an expired batch's output file), kept when the contract's
        `[result].partial` says so; None otherwise. `pollwarden fetch-result` downloads it."""
        return self.record.result if self.record is not None and self.record.partial else None

    @property
    def counts(self) -> dict[str, int | float] | None:
        """The provider's counts when the job ended (what part `partial_result` covers), if it gave them."""
        return None if self.record is None or self.record.counts is None else dict(self.record.counts)


Outcome = Succeeded | Stopped


class WatchOptions(TypedDict, total=False):
    """The keywords of `Watch`, `watch_sync` and `watch` beyond the contract and the job, declared once."""

    home: str | Path | None
    """The pollwarden home (default: $POLLWARDEN_HOME or ~/.local/state/pollwarden)."""
    store: Store | None
    """An open store to use instead of the home's (the caller closes it)."""
    deadline: timedelta | str | None
    max_requests: int | None
    useful_for: timedelta | str | None
    lag_target: timedelta | str | None
    """The p95 detection lag the contract's learnt schedule keeps (as `--lag-target`, docs/schedules.md)."""
    operation_id: str | None
    on_progress: Callable[[Progress], None] | None
    vars: Mapping[str, str] | None
    status_url: str | None


def check_names(options: Mapping[str, object], takes: Sequence[str] = tuple(WatchOptions.__annotations__)) -> None:
    """A keyword the API (or a function taking `**options` of another TypedDict, whose keys are `takes`) does not
    take is refused as a misspelt keyword argument always was (a TypeError), for callers the type checker does
    not see."""
    unknown = sorted(set(options) - set(takes))
    if unknown:
        raise TypeError(f"unexpected keyword argument {unknown[0]!r} (takes: {', '.join(takes)})")


def _duration(value: timedelta | str | None, what: str) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        parsed = value
    elif not isinstance(value, str):
        raise WatchError(f"{what} must be a timedelta or a duration like '10m', not {type(value).__name__}")
    else:
        try:
            parsed = parse_duration(value)
        except DurationError as exc:
            raise WatchError(f"{what}: {exc}") from None
    if parsed is not None and parsed <= timedelta(0):
        raise WatchError(f"{what} must be longer than zero")
    return parsed


class Watch:
    """One operation: created on first `run()`, resumed on later ones (its deadline and budget are kept).

    `cancel()`, from any thread, stops the `run()` in progress (or, if none is, the next one) between
    requests; that run raises WatchCancelled and the Watch can run again to resume."""

    def __init__(
        self,
        contract: Contract | str | Path,
        job_id: str | None = None,
        **options: Unpack[WatchOptions],
    ) -> None:
        """`contract` is a Contract, a path, or a shipped contract's name (`pollwarden contracts`); `vars` gives
        its [vars]; `status_url` is a status URL the provider returned (a contract with status_url_handles).
        `useful_for` is the usefulness window (as `pollwarden watch --useful-for`): once it has passed since the
        operation was created, the watch stops (`usefulness_window_closed`), even before the deadline. `lag_target`
        (as `--lag-target`) is the p95 detection lag the contract's learnt schedule keeps (`[schedule] lag_target`)."""
        check_names(options)
        vars = options.get("vars")
        operation_id = options.get("operation_id")
        status_url = options.get("status_url")
        if vars is not None and (
            not isinstance(vars, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in vars.items())
        ):
            raise WatchError('vars must be a mapping of names to strings, like vars={"repo": "acme/deploy"}')
        self._source = "a Contract object" if isinstance(contract, Contract) else str(contract)
        if isinstance(contract, Contract):
            if vars:
                raise WatchError("vars apply to a contract given by name or path; this Contract is already built")
            self.contract = contract
        else:
            try:
                if isinstance(contract, Path):
                    self.contract = load_contract(contract.expanduser(), vars)
                else:
                    self.contract = resolve_contract(contract, vars)
            except ContractError as exc:
                raise WatchError(str(exc)) from None
        if self.contract.approval != "none":
            raise WatchError(
                f"contract {self.contract.name!r} asks for agent approvals (approval = {self.contract.approval!r});"
                " in-process code holds the credential itself and cannot be gated, so watch it through"
                ' `pollwarden mcp` (or set approval = "none" if a person\'s approval is not needed)'
            )
        try:  # asked before the arguments, as always: a caller fixes the contract, not arguments it cannot use
            watchable(WatchRequest(self.contract, None))
        except Refused as exc:
            raise WatchError(str(exc)) from None
        if job_id is None and operation_id is None and status_url is None:
            raise WatchError("give a job_id (or a status_url) to start a watch, or the operation_id of one to resume")
        if operation_id is not None and (problem := operation_id_problem(operation_id)):
            raise WatchError(f"operation_id {operation_id!r}: {problem}")
        self.limits = Limits(
            deadline=_duration(options.get("deadline"), "deadline"),
            max_requests=options.get("max_requests"),
            useful_for=_duration(options.get("useful_for"), "useful_for"),
            lag_target=_duration(options.get("lag_target"), "lag_target"),
        )
        self.status_url = status_url
        # The preamble's checks that need no credential, as the Watch is built (the credential is read by `run`):
        # whether the contract may be watched, and admission's `check`, in the same words as every interface's.
        probe = WatchRequest(self.contract, job_id, operation_id, self.limits, status_location=status_url)
        try:
            self.job_id = checked(probe).job_id
        except Refused as exc:
            raise WatchError(exc.said(_NAMES, "watch")) from None
        self.operation_id = operation_id
        self._home = options.get("home")
        self._store = options.get("store")
        self._on_progress = options.get("on_progress")
        self._stop = threading.Event()

    def cancel(self) -> None:
        """Stop the `run()` in progress (from any thread) within one request; it raises WatchCancelled."""
        self._stop.set()

    def run(self) -> Outcome:
        """Watch until a validated result or a reasoned stop; blocks, sleeping between polls with no lease.

        Raises WatchCancelled after `cancel()`, and whatever `on_progress` raised, once the interruption is
        recorded and the lease given back; the operation is resumable either way."""
        try:
            return self._run()
        finally:
            self._stop.clear()  # a cancel stops one run: the next run of this Watch resumes the operation

    def _run(self) -> Outcome:
        # What only a running watch needs is imported here, on its first run: the engine and its events, the
        # status client, the store (and with it the audit crypto). `import pollwarden` and building a Watch,
        # which checks the contract and the limits with the core alone, load none of them.
        from .engine import Cancelled, Engine, Watching
        from .engine.combine import combined
        from .engine.installed import NotInstalled
        from .engine.preamble import Installing, admit, ready
        from .home.directory import resolve_home
        from .home.operating import HomeError
        from .home.outbox import delivering
        from .home.shared_store import home_store
        from .report.progress import progress_of
        from .store.bell import listening, pause
        from .store.owner import process_owner
        from .transport.http import StatusClient

        asked = WatchRequest(
            self.contract, self.job_id, self.operation_id, self.limits, by="python api", status_location=self.status_url
        )
        try:
            prepared = ready(asked)
        except Refused as exc:
            raise WatchError(exc.said(_NAMES, "watch")) from None
        with contextlib.ExitStack() as opened:
            if self._store is not None:
                store = self._store
            else:
                # The store of this home that this process's watches share while any of them runs (one open,
                # one set of keys, one head keeper for fifty watches started at once); the last one closes it.
                home = resolve_home(str(self._home) if self._home is not None else None)
                try:
                    store = opened.enter_context(home_store(home))
                except HomeError as exc:
                    raise WatchError(str(exc)) from None
            # Its webhooks and witness heads go out from the outbox, one delivery loop per store in this process.
            opened.enter_context(delivering(store, "api"))
            # Steps due together, of this watch and the others of this store in this process, in one batch.
            combiner = opened.enter_context(combined(store))
            engine = Engine(store, owner=process_owner("api"), combiner=combiner)
            try:  # in-process code runs with its own credential: its contract is installed as it starts
                admitted = admit(prepared, engine, Installing("python api", self._source))
            except Refused as exc:
                raise WatchError(exc.said(_NAMES, "watch")) from None
            except NotInstalled as exc:
                raise WatchError(f"cannot watch: {exc}") from None
            secret = prepared.secret
            self.operation_id = admitted.record.operation_id  # a later run() resumes this operation
            told: Callable[[StepResult], None] | None = None
            if (on_progress := self._on_progress) is not None:
                told = lambda result: on_progress(progress_of(result))  # noqa: E731
            try:
                # With a [push] table, the store's bell ends a wait at once when a provider's push made it due.
                with (
                    StatusClient(self.contract, secret, clock=engine.clock) as client,
                    listening(store.bell, self.contract.push is not None) as bell,
                ):
                    stop = self._stop
                    how = Watching(
                        on_progress=told, stop=stop,
                        sleep=None if bell is None else lambda seconds: pause(bell, seconds, stop), by="python api",
                    )  # fmt: skip
                    final = engine.run(self.contract, client, self.operation_id, how, record=admitted.record)
            except Cancelled:
                raise WatchCancelled(self.operation_id) from None
            return outcome_of(store, final)


def outcome_of(store: Decisions, record: OperationRecord) -> Outcome:
    if record.phase is Phase.SUCCEEDED:
        return Succeeded(record.operation_id, record.result, record)
    assert record.reason is not None, "a final record that did not succeed carries its stop reason"
    open_requests = [d.request for d in store.decisions(record.operation_id, open_only=True)]
    return Stopped(record.operation_id, record.reason, open_requests[-1] if open_requests else None, record)


def watch_sync(
    contract: Contract | str | Path,
    job_id: str | None = None,
    **options: Unpack[WatchOptions],
) -> Outcome:
    """`Watch(...).run()` in one call."""
    return Watch(contract, job_id, **options).run()


async def watch(
    contract: Contract | str | Path,
    job_id: str | None = None,
    **options: Unpack[WatchOptions],
) -> Outcome:
    """The same watch without blocking the event loop: it runs on a worker thread and is awaited here.

    Cancelling the awaiting task cancels the watch (`Watch.cancel`): a request in flight is answered and
    recorded, then the thread ends, and only then does the CancelledError go on (a second cancel while it
    finishes is absorbed), so no thread outlives the cancel and `asyncio.run` returns at once. The operation
    stays active with its deadline and budget: watch its operation_id again to resume it.
    """
    import asyncio  # here, not at the top: its caller runs a loop, so it is loaded; `watch_sync`'s caller may not
    import contextvars

    prepared = Watch(contract, job_id, **options)
    # A thread of its own, not the loop's default executor: that one has min(32, cores + 4) threads, and a
    # watch holds its thread until its job ends, so the seventh watch on 2 cores would not send its first
    # request until another watch's job had ended. The context is copied, as `asyncio.to_thread` does.
    loop = asyncio.get_running_loop()
    running: asyncio.Future[Outcome] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Outcome | None, failure: BaseException | None) -> None:
        if running.done():
            return
        if failure is not None:
            running.set_exception(failure)
        else:
            running.set_result(cast(Outcome, result))

    def run() -> None:
        try:
            result, failure = context.run(prepared.run), None
        except BaseException as exc:  # handed to the awaiting task, which raises it
            result, failure = None, exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits this watch any more
            loop.call_soon_threadsafe(settle, result, failure)

    thread = threading.Thread(target=run, name="pollwarden-async-watch")
    thread.start()
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        prepared.cancel()
        # The thread is waiting between polls (it wakes at once) or in one request (bounded by the contract's
        # timeout); it records the interruption and ends. Waiting for it here is what keeps a thread from
        # polling on behind the cancel.
        while not running.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([running])
        if not running.cancelled():
            running.exception()  # WatchCancelled, as asked (or the outcome that raced the cancel): retrieved
        raise
    finally:
        # Settled by the thread's last statement, so this join is immediate: no thread outlives the await.
        if running.done():
            thread.join()
