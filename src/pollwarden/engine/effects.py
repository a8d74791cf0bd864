"""The engine's effects: what a flow asks for (`flow.Effect`), carried out against a store, a status client and
the engine's clock and random source. Every driver performs them here (`Effects.perform`): a step alone, a batch
(`batch.run`), a combined batch (`combine`), a batch's rest aside (the worker)."""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol, TypeVar

from ..core.contract.parse import Contract
from ..core.observe import Exchange
from ..store.base import Store
from . import flow, learning

T = TypeVar("T")


class StatusSender(Protocol):
    """What the engine needs of a status client: one bounded request, credential held inside."""

    def prepare(self) -> None:
        """Whatever slow work the next request would start with (a token command), done now."""

    def renew(self) -> None:
        """Forget the credential held, so the next request reads the one configured now."""

    def fetch(
        self, job_id: str, extra_headers: Mapping[str, str] | None = None, *, location: str | None = None
    ) -> Exchange: ...


class Effects:
    """The effect-performing half of `Engine` (its store, owner, clock and random source)."""

    store: Store
    owner: str
    clock: Callable[[], datetime]
    rng: random.Random
    models: learning.Models

    def perform(self, effect: flow.Effect[Any], contract: Contract | None, client: StatusSender | None) -> Any:
        """Carry out one effect; `contract` and `client` are None for a flow that sends and announces nothing
        (`refuse_claimed`: the stored contract is not to be used)."""
        store = self.store
        if isinstance(effect, flow.Claim):
            return store.claim(effect.operation_id, self.owner, self.clock(), effect.ttl)
        if isinstance(effect, flow.Write):
            written = store.write(
                effect.lease,
                effect.record,
                effect.events,
                self.clock(),
                release=effect.release,
                decision=effect.decision,
                hold_until=effect.hold_until,
            )
            return self.models.after(written, effect.record)
        if isinstance(effect, flow.LearntModel):
            return self.models.model(effect.contract, effect.lag_target, effect.key, effect.max_gap)
        if isinstance(effect, flow.Send):
            if client is None:
                raise TypeError("a flow without a status client asked to send")
            client.prepare()  # a token command's wait counts before the time limit is checked, not after
            if (late := flow.too_late(effect, self.clock())) is not None:
                raise late
            return client.fetch(effect.job_id, effect.headers, location=effect.location)
        if isinstance(effect, flow.Renew):
            if client is not None:
                client.renew()
            return None
        if isinstance(effect, flow.Now):
            return self.clock()
        if isinstance(effect, flow.Draw):
            return self.rng.random()
        if isinstance(effect, flow.Release):
            store.release(effect.lease)
            return None
        if isinstance(effect, flow.Append):
            store.append(effect.operation_id, effect.event, self.clock())
            return None
        if isinstance(effect, flow.CanResubmit):
            return store.get_submission(effect.operation_id) is not None
        if isinstance(effect, flow.NewDecisionId):
            return new_decision_id()
        raise TypeError(f"unknown effect {effect!r}")

    def drive_from(
        self,
        steps: flow.Flow[T],
        contract: Contract | None,
        client: StatusSender | None,
        pending: flow.Effect[Any] | None,
        failure: BaseException | None,
    ) -> T:
        """A flow driven to its end, performing each effect (`Engine._drive`), or one another driver began
        (`combine`): it waits on `pending` (None: not begun), or `failure` is thrown in first (the flow gives back
        a lease it holds and re-raises)."""
        answer: Any = None
        while True:
            if pending is not None and failure is None:
                effect, pending = pending, None
            else:
                try:
                    effect = steps.throw(failure) if failure is not None else steps.send(answer)
                except StopIteration as stop:
                    result: T = stop.value
                    return result
            failure = None
            try:
                answer = self.perform(effect, contract, client)
            except BaseException as exc:  # handed to the flow, which gives its lease back and re-raises
                answer, failure = None, exc


def new_decision_id() -> str:
    """Short enough to type after `pollwarden decide`; random so two stops never share one."""
    return "d" + secrets.token_hex(5)


__all__ = ["Effects", "StatusSender", "new_decision_id"]
