"""The outbox's delivery loop: decision webhooks and witness heads, delivered off the polling path.

The store writes each delivery in the transaction that commits what it announces (`store.sql_outbox`): a
decision request's webhook with the request, whoever wrote it (a stop, an agent's cancel or extension request),
and the newest signed head for the home's witness with the head. Nothing that polls, commits or exits waits for
a receiver. A `Courier`, on a thread of its own in every long-running process that writes (the worker, `watch`,
the Python API, the MCP server, the broker, the console), claims what is due with a lease (two processes never
send one delivery at once), makes one bounded attempt at each, a few at a time, and writes back what came of it:

- a webhook: delivered (`notified` in its operation's log), tried again with backoff, or given up after
  `WEBHOOK_ATTEMPTS` attempts, a refusal (a 4xx other than 429) or `WEBHOOK_MAX_AGE` (`notify_failed`, audited;
  the entry stays in the outbox, `failed`). A receiver may see one twice (a process that died mid-attempt):
  its `Idempotency-Key` is the decision id;
- a witness: delivered, or tried again with a longer pause each time it fails. It is never given up: the
  newest head replaces the one waiting, and a witness that keeps refusing is said in a log line, in `pollwarden
  outbox`, in the fleet gauges and in `audit verify`'s notes.

A short-lived command (`decide`, `enqueue`) runs no loop: what it queued waits for the next process, or for
`pollwarden outbox --deliver`. A process that ends waits for its own deliveries `EXIT_WAIT` seconds at most.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..events import DeliveryEvent
from ..store.base import Attempted, DeliveryLease, OutboxEntry, Store
from ..store.delivery import BELL, WEBHOOK, WITNESS, queued_by
from ..store.owner import OwnerKind, process_owner
from ..store.shared import PerStore
from ..transport.notify import Attempt, attempt, post, webhook_of

if TYPE_CHECKING:
    from ..audit import Head
    from ..core.escalation import DecisionRequest
    from ..store.witness import Witness

__all__ = ["Courier", "Delivered", "delivering", "delivering_home"]

log = logging.getLogger("pollwarden.home.outbox")

WEBHOOK_ATTEMPTS = 4
WEBHOOK_TIMEOUT = 5.0
"""Seconds one attempt may take, connect to the answer's head (the host's lookup included)."""
WEBHOOK_BACKOFF = 0.5
"""Seconds before the second attempt (times 0.5 to 1), doubling for each one after."""
WEBHOOK_MAX_AGE = timedelta(hours=24)
"""A request nobody could deliver for this long (no process ran) is given up, not sent late."""

WITNESS_TIMEOUT = 10.0
WITNESS_EVERY = timedelta(seconds=1)
"""After a witness took a head, the next one goes this much later at the soonest: heads come with every commit."""
WITNESS_BACKOFF = 5.0
WITNESS_MAX_BACKOFF = 300.0

LEASE = timedelta(seconds=max(WEBHOOK_TIMEOUT, WITNESS_TIMEOUT) + 5)
"""A claim outlives its bounded attempt; a holder that died on this host is not waited out."""
IDLE = 1.0
"""Seconds between a loop's looks at the outbox when nothing woke it."""
EXIT_WAIT = 2.0
"""Seconds a process that ends waits for its own deliveries (a hanging receiver never holds it longer)."""
LOOK_WAIT = 2.0
"""Seconds `stop` waits for a look of the loop's in progress to end (a read and a claim take milliseconds), so that
the caller's close is the store's last: not the store's busy timeout, which a look waiting on a lock another
process holds would take (an exit that waited 30 s for it). Such a look is left to its daemon thread."""
IN_FLIGHT = 4
"""Attempts one loop makes at once: one receiver that hangs holds one of them."""


class Say(Protocol):
    """Where a loop says what a person should know (the worker's JSON log, or Python logging)."""

    def __call__(self, event: str, **fields: object) -> None: ...


def _to_log(event: str, **fields: object) -> None:
    log.warning("%s: %s", event.replace("_", " "), ", ".join(f"{k} {v}" for k, v in fields.items()))


# -- what an attempt leads to (pure) ------------------------------------------------------------------------


def after_webhook(entry: OutboxEntry, made: Attempt, now: datetime, u: float) -> Attempted:
    """Delivered, given up, or tried again `WEBHOOK_BACKOFF * 2^(n-1) * (0.5 + u/2)` seconds after attempt n."""
    attempts = entry.attempts + 1
    over = made.ok or made.final or attempts >= WEBHOOK_ATTEMPTS or now - entry.created_at >= WEBHOOK_MAX_AGE
    if not over:
        later = now + timedelta(seconds=WEBHOOK_BACKOFF * 2 ** (attempts - 1) * (0.5 + u / 2))
        return Attempted(attempts, False, later, made.status, made.error)
    told = DeliveryEvent.of(entry.subject, ok=made.ok, attempts=attempts, status=made.status, error=made.error)
    return Attempted(attempts, made.ok, None, made.status, made.error, event=told)


def given_up(entry: OutboxEntry, why: str) -> Attempted:
    """A webhook that cannot be attempted at all (too old, its request or contract gone), audited as failed."""
    told = DeliveryEvent.of(entry.subject, ok=False, attempts=entry.attempts, status=None, error=why)
    return Attempted(entry.attempts, False, None, error=why, event=told)


def after_witness(entry: OutboxEntry, error: str | None, head: int, now: datetime) -> Attempted:
    """Delivered (the next head no sooner than `WITNESS_EVERY`), or tried again after a pause that doubles."""
    if error is None:
        return Attempted(0, True, now + WITNESS_EVERY, head=head)
    attempts = entry.attempts + 1
    pause = min(WITNESS_MAX_BACKOFF, WITNESS_BACKOFF * 2 ** min(attempts - 1, 16))
    return Attempted(attempts, False, now + timedelta(seconds=pause), error=error, head=head)


def to_witness(witness: Witness, head: Head) -> str | None:
    """Give `head` to the witness (a POST, or a file in its directory); None when it took it, else what failed."""
    from ..audit.export import head_file_text
    from ..store.witness import write_forward

    if witness.is_url:
        body = head_file_text(head).encode("utf-8")
        status, error = post(witness.location, body, {"Content-Type": "application/json"}, WITNESS_TIMEOUT)
        if status is not None and 200 <= status < 300:
            return None
        return error or f"the witness answered {status}"
    target = witness.file_for(head.key_id)
    assert target is not None  # a directory witness has a file per key
    try:
        write_forward(target, head)
    except OSError as exc:
        return f"cannot write {target}: {exc.strerror or type(exc).__name__}"
    return None


# -- the loop --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivered:
    """One delivery a courier attempted, and what came of it (None: the store failed before that was written)."""

    entry: OutboxEntry
    attempted: Attempted | None
    problem: str | None = None


class Courier:
    """Delivers this store's due deliveries: every webhook, and the heads of this store's witness."""

    def __init__(
        self,
        store: Store,
        *,
        owner: str,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] | None = None,
        say: Say | None = None,
        parallel: int = IN_FLIGHT,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.owner = owner
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        """Where a webhook's signing secret is read (an MCP session's own environment, say)."""
        self.clock = clock or store.db_now
        self.say: Say = say or _to_log
        self.parallel = max(1, parallel)
        self.rng = rng or random.Random()
        self.witness = store.witness
        self._key = None if self.witness is None else self.witness.key
        self._wake = threading.Event()
        BELL.listen(self._wake)
        self._stopping = threading.Event()
        self._done = threading.Condition()
        self._in_flight = 0
        self._thread: threading.Thread | None = None
        self._troubled_at = float("-inf")
        self.users = 0
        """The users in this process sharing it (`delivering`)."""

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> Courier:
        self._thread = threading.Thread(target=self._run, name="pollwarden-outbox", daemon=True)
        self._thread.start()
        return self

    def stop(self, wait: float = EXIT_WAIT) -> None:
        """Wait (`wait` seconds at most) for this process's own deliveries, then stop looking. An attempt still
        in flight is left to its thread, which is a daemon: the process does not wait for it, and its claim
        lapses for the next process to make it again."""
        if self._thread is not None:
            self.drain(wait)
        self._stopping.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            # The caller closes the store next: a look still reading would keep its connection open past the
            # close, and a process that ended so left SQLite's -wal behind. A look is one bounded read and claim.
            self._thread.join(LOOK_WAIT)

    def drain(self, timeout: float) -> None:
        """Until each delivery this process queued (and this courier makes) is settled, `timeout` seconds at most:
        a webhook delivered, given up, or waiting for an attempt due after the bound; a witness's head taken, or
        refused once (one chance: a witness that is down costs a closing process one attempt, not its bound)."""
        self._wake.set()
        ends = time.monotonic() + timeout
        limit = self.clock() + timedelta(seconds=timeout)
        me = queued_by()
        while True:
            try:
                waiting = [e for e in self.store.outbox(queued_by=me) if self._waits(e, limit)]
            except Exception:  # a store that fails now has nothing more to give a closing process
                return
            left = ends - time.monotonic()
            if not waiting or left <= 0:
                return
            with self._done:
                self._done.wait(min(left, 0.05))

    def _waits(self, entry: OutboxEntry, limit: datetime) -> bool:
        if entry.status != "pending":
            return False
        if entry.kind == WITNESS:
            return entry.subject == self._key and not entry.attempts
        return entry.lease_owner is not None or entry.next_attempt_at <= limit

    # -- one pass, in the caller's thread -------------------------------------------------------------------

    def deliver_due(self, *, every: bool = False, limit: int = 500) -> list[Delivered]:
        """Attempt what is due (`every`: everything pending, due or not) once each, up to `limit` of them,
        `parallel` at a time, each claimed only when its turn comes (a claim outlives one attempt, not a queue
        of them); returns what came of each (`pollwarden outbox --deliver`)."""
        results: list[Delivered] = []
        tried: list[str] = []
        while len(tried) < limit:
            want = min(self.parallel, limit - len(tried))
            claimed = self.store.claim_deliveries(
                self.owner, self.clock(), LEASE, want, witness=self._key, every=every, skip=tried
            )
            if not claimed:
                break
            tried += [entry.delivery_id for _, entry in claimed]
            threads = [_Attempting(self, lease, entry, results) for lease, entry in claimed]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()  # each attempt is bounded (WITNESS_TIMEOUT at most), and so is its write
        return results

    # -- the thread -------------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            wait = IDLE
            try:
                wait = self._look()
            except Exception as exc:
                self._trouble(exc)
            self._wake.wait(wait)
            self._wake.clear()

    def _look(self) -> float:
        """Claim what is due, as many as there are free slots; how long to wait before looking again."""
        with self._done:
            free = self.parallel - self._in_flight
        if free <= 0:
            return IDLE  # an attempt that ends wakes the loop
        now = self.clock()
        due = self.store.next_delivery(self._key)
        if due is None:
            return IDLE
        if due > now:
            return min(IDLE, (due - now).total_seconds())
        for lease, entry in self.store.claim_deliveries(self.owner, now, LEASE, free, witness=self._key):
            with self._done:
                self._in_flight += 1
            _Attempting(self, lease, entry, None).start()
        return IDLE

    def deliver(self, lease: DeliveryLease, entry: OutboxEntry) -> Delivered:
        """One attempt at one claimed delivery, and what came of it written back (audited, for a webhook)."""
        try:
            made = self._attempt(entry)
            self.store.finish_delivery(lease, made, self.clock())
        except Exception as exc:  # the store failed: the claim lapses, and the delivery is made again later
            self._trouble(exc)
            return Delivered(entry, None, type(exc).__name__)
        self._tell(entry, made)
        return Delivered(entry, made)

    def _attempt(self, entry: OutboxEntry) -> Attempted:
        if entry.kind == WITNESS:
            head = None if entry.head is None else self.store.audit_head(entry.head)
            if self.witness is None or entry.subject != self._key or head is None:
                return Attempted(0, True, None, head=entry.head)  # nothing this process can, or need, send
            return after_witness(entry, to_witness(self.witness, head), head.counter, self.clock())
        if self.clock() - entry.created_at >= WEBHOOK_MAX_AGE:
            return given_up(entry, f"not delivered within {WEBHOOK_MAX_AGE} of the request; given up")
        found = self._webhook(entry)
        if isinstance(found, str):
            return given_up(entry, found)
        if found is None:
            return Attempted(entry.attempts, True, None)  # the operation's contract names no webhook: nothing to tell
        (url, secret_env), request = found
        made = attempt(url, secret_env, request, environ=self.environ, timeout=WEBHOOK_TIMEOUT)
        return after_webhook(entry, made, self.clock(), self.rng.random())

    def _webhook(self, entry: OutboxEntry) -> tuple[tuple[str, str | None], DecisionRequest] | str | None:
        """The webhook and the request to tell it of; None when the contract names no webhook; a str: why not
        (given up: asking again would read the same). A store that fails raises: that passes."""
        from ..engine.installed import NotInstalled
        from ..store.base import StoreError
        from .operating import HomeError, contract_of

        if entry.operation_id is None:
            return f"decision {entry.subject} names no operation"
        try:
            decision = self.store.get_decision(entry.subject)
            if decision is None:
                return f"decision {entry.subject} is not in the store"
            contract, _ = contract_of(self.store, entry.operation_id, by=None)
        except NotInstalled:  # a webhook named by a text nobody installed is never posted to
            return f"the contract of operation {entry.operation_id} is not an installed version"
        except HomeError as exc:
            return f"the contract of operation {entry.operation_id} cannot be read: {exc}"
        except StoreError:
            raise
        except Exception as exc:  # a row that cannot be decoded: the same on every attempt
            return f"decision {entry.subject} or its operation cannot be read: {type(exc).__name__}"
        hook = webhook_of(contract)
        return None if hook is None else (hook, decision.request)

    def _tell(self, entry: OutboxEntry, made: Attempted) -> None:
        if entry.kind == WEBHOOK and not made.delivered and made.retry_at is None:
            self.say("webhook_given_up", decision=entry.subject, operation=entry.operation_id,
                     attempts=made.attempts, error=made.error)  # fmt: skip
        elif entry.kind == WITNESS and not made.delivered and made.attempts == 1:
            self.say("witness_failing", head=entry.head, error=made.error, retry_at=made.retry_at)
        elif entry.kind == WITNESS and made.delivered and entry.attempts:
            self.say("witness_recovered", head=made.head, failed_attempts=entry.attempts)

    def _trouble(self, exc: Exception) -> None:
        """The store itself failing (the database away): said once a minute at most, and tried again."""
        if time.monotonic() - self._troubled_at > 60:
            self._troubled_at = time.monotonic()
            self.say("outbox_unavailable", error=type(exc).__name__)

    def _ended(self) -> None:
        with self._done:
            self._in_flight = max(0, self._in_flight - 1)
            self._done.notify_all()
        self._wake.set()


class _Attempting(threading.Thread):
    """One attempt on a thread of its own, a daemon: a process that ends does not wait for a receiver."""

    def __init__(
        self, courier: Courier, lease: DeliveryLease, entry: OutboxEntry, into: list[Delivered] | None
    ) -> None:
        super().__init__(name="pollwarden-outbox-attempt", daemon=True)
        self._courier, self._lease, self._entry, self._into = courier, lease, entry, into

    def run(self) -> None:
        try:
            delivered = self._courier.deliver(self._lease, self._entry)
            if self._into is not None:
                self._into.append(delivered)
        finally:
            if self._into is None:
                self._courier._ended()
            else:
                with self._courier._done:
                    self._courier._done.notify_all()


# -- who runs one ---------------------------------------------------------------------------------------------


_RUNNING: PerStore[Courier] = PerStore()


@contextmanager
def delivering(
    store: Store, kind: OwnerKind, *, environ: Mapping[str, str] | None = None, say: Say | None = None
) -> Iterator[Courier]:
    """A delivery loop on `store` while the block runs, shared by every user of that store in this process (fifty
    Python API watches of one home run one); the last one to leave waits `EXIT_WAIT` seconds at most for this
    process's deliveries, and stops it."""

    def start(store: Store) -> Courier:
        return Courier(store, owner=process_owner(kind), environ=environ, say=say).start()

    with _RUNNING.use(store, start, Courier.stop) as courier:
        yield courier


@contextmanager
def delivering_home(home: Path, kind: OwnerKind, *, environ: Mapping[str, str] | None = None) -> Iterator[Courier]:
    """The home's store, opened for writing, with a delivery loop on it while the block runs (the MCP server, the
    broker, the console: each opens a store per call, and the loop needs one of its own)."""
    from .operating import open_store

    store = open_store(home, keys="write")
    try:
        with delivering(store, kind, environ=environ) as courier:
            yield courier
    finally:
        store.close()
