"""Group commit: many claimed operations stepped through the one flow together, two commits for all of them.

Nothing here decides anything: each operation runs `flow.step_claimed`, exactly as `Engine.step_claimed` runs
it. What changes is how the effects are performed. The flows advance in lockstep, and at each round

- every pending `Write` of every flow is committed in one transaction (`Store.write_many`): the K reservations
  together, later the K records together. A write is fenced on its own, so one lost lease changes nothing of
  the others. A flow still gets its answer only after the commit, so each reservation is durable before its
  request goes out, and an announcement follows the commit of its own stop;
- then every pending `Send` (and `Announce`) runs at once: K requests in flight, each under its own contract's
  deadline; the status polls (http and https) on one selector in the batch's own thread (`http.fetch_all`),
  the rest (announcements, a test's client) on the I/O pool;
- everything else (`Now`, `Draw`, `Release`, a lost lease's `Append`, ...) is performed in place.

If the batch transaction fails, each write is retried in a transaction of its own, so a write the store refuses
(a value the audit encoder cannot take) fails only its own flow, which stops as the flow says, and a passing
database error costs a retry instead of K stopped operations.

A kill -9 at any point loses nothing the single driver would keep: before the reservation commit nothing was
sent; after it every request sent is counted; a crash before the record commit leaves counted reservations
without answers, which is what the protocol allows (the provider never sees more than was counted).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..core.contract import Contract
from ..http import StatusClient, fetch_all
from ..store.base import Store
from . import flow
from .flow import StepResult

Perform = Callable[[flow.Effect[Any], Contract, Any], Any]
"""How the engine performs one effect for one flow (`Engine._perform`)."""

Outcome = tuple[Any, BaseException | None]

_IO = (flow.Send, flow.Announce)


@dataclass
class Lane:
    """One flow of a batch, the effect it waits on, and how it ended."""

    steps: flow.Flow[StepResult]
    contract: Contract
    client: Any
    effect: flow.Effect[Any] | None = None
    result: StepResult | Exception | None = None

    def resume(self, answer: Any = None, failure: BaseException | None = None) -> None:
        try:
            self.effect = self.steps.throw(failure) if failure is not None else self.steps.send(answer)
        except StopIteration as stop:
            self.effect, self.result = None, stop.value
        except Exception as exc:  # the flow gave its lease back and re-raised: this operation's failure only
            self.effect, self.result = None, exc


def run(lanes: Sequence[Lane], store: Store, perform: Perform, clock: Callable[[], datetime], io: Executor) -> None:
    """Drive every lane to its end; each lane's `result` is its StepResult or the exception it ended with."""
    for lane in lanes:
        lane.resume()
    while True:
        for lane in lanes:
            while lane.effect is not None and not isinstance(lane.effect, flow.Write | flow.Send | flow.Announce):
                lane.resume(*_attempt(perform, lane.effect, lane))
        writing = [lane for lane in lanes if isinstance(lane.effect, flow.Write)]
        if writing:
            writes = [lane.effect for lane in writing if isinstance(lane.effect, flow.Write)]
            for lane, outcome in zip(writing, write_all(store, writes, clock()), strict=True):
                lane.resume(*outcome)
            continue  # the flows that just committed may want I/O now: one round of it for everyone
        waiting = [lane for lane in lanes if isinstance(lane.effect, _IO)]
        if not waiting:
            return
        here = [lane for lane in waiting if isinstance(lane.effect, flow.Send) and _selects(lane.client)]
        there = [lane for lane in waiting if not (isinstance(lane.effect, flow.Send) and _selects(lane.client))]
        futures = [io.submit(_attempt, perform, lane.effect, lane) for lane in there if lane.effect is not None]
        outcomes = dict(zip(map(id, here), _send_here(here), strict=True))
        for lane, future in zip(there, futures, strict=True):
            outcomes[id(lane)] = future.result()
        for lane in waiting:
            lane.resume(*outcomes[id(lane)])


def _selects(client: Any) -> bool:
    return isinstance(client, StatusClient) and client.selects


def _send_here(lanes: Sequence[Lane]) -> list[Outcome]:
    """The status polls, all on one selector in this thread (`http.fetch_all`): on the pool each
    was a thread, and handing the GIL between them cost more CPU than the requests (docs/performance.md)."""
    sends = [(lane.client, lane.effect) for lane in lanes]
    calls = [(client, s.job_id, s.headers, s.location) for client, s in sends if isinstance(s, flow.Send)]
    try:
        results = fetch_all(calls)
    except Exception as exc:  # as a pool thread's `_attempt` would: each flow is handed it, none stalls the lane
        return [(None, exc)] * len(lanes)
    return [(None, result) if isinstance(result, Exception) else (result, None) for result in results]


def _attempt(perform: Perform, effect: flow.Effect[Any], lane: Lane) -> Outcome:
    try:
        return perform(effect, lane.contract, lane.client), None
    except BaseException as exc:  # handed to the flow, which decides (a refused send is a recorded stop)
        return None, exc


def write_all(store: Store, writes: Sequence[flow.Write], now: datetime) -> list[Outcome]:
    """All writes in one transaction; if that fails, each in its own, so a failure belongs to one write."""
    try:
        return [(written, None) for written in store.write_many(writes, now)]
    except Exception as exc:
        if len(writes) == 1:
            return [(None, exc)]
    outcomes: list[Outcome] = []
    for write in writes:
        try:
            outcomes.append((store.write_many([write], now)[0], None))
        except Exception as exc:
            outcomes.append((None, exc))
    return outcomes
