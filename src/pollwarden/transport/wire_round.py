"""A batch's status polls on one selector in the calling thread (`Round`), each request's stages and caps kept by
`wire_select.Exchanging`: requests added as the batch's flows reach them, each handed back as soon as it ended.

Why a round rather than one call per batch: a batch commits the records of the answers that are in while slower
requests stay in flight (`engine.batch`), so the selector must be left and taken up again across commits without
losing what arrived meanwhile, or sending a request after its deadline.
"""

from __future__ import annotations

import functools
import math
import selectors
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from .messages import Answer, Request, WireError
from .resolve import Wakeup
from .wire import SocketTransport
from .wire_select import Exchanging

__all__ = ["Round", "exchange"]


def exchange(items: Sequence[tuple[SocketTransport, Request]]) -> list[Answer | WireError]:
    """Every request at once on one selector, in this thread; each answer (read whole) or its failure, in order.
    Returns when every request has its answer or its deadline has passed."""
    with Round() as round_:
        exchanges = [round_.add(transport, request) for transport, request in items]
        while round_.live:
            round_.wait(math.inf)
    results: list[Answer | WireError] = []
    for one in exchanges:
        assert one.result is not None
        results.append(one.result)
    return results


class Round:
    """Requests on one selector that a batch adds as its flows reach them and takes back as each one ends
    (`wait`), the others staying in flight: a batch records the answers that are in while a slower provider is
    still answering. It also watches futures (a batch's requests on other threads), so one wait covers both.

    `ringable`: another thread may wake a `wait` (`ring`): a watch that is interrupted while its request is in
    flight. Otherwise the pipe that wakes the selector is made only when something needs it (a lookup, a
    future), so a batch of polls to known hosts costs no descriptors beyond its sockets."""

    def __init__(self, *, ringable: bool = False) -> None:
        # poll(2), not epoll: a batch watches a handful of sockets for a few milliseconds, and epoll would cost a
        # system call to create it and two per socket to add and remove; poll's registrations are this process's.
        self._selector = selectors.PollSelector()
        self._registered: dict[Exchanging, tuple[socket.socket, int]] = {}
        self._resolving: list[Exchanging] = []
        self._exchanges: set[Exchanging] = set()
        self._futures: set[Future[Any]] = set()
        self._ended: list[Exchanging | Future[Any]] = []
        self._closed = False
        self._wakeup: Wakeup | None = Wakeup(self._selector) if ringable else None
        self._rung = False

    def __enter__(self) -> Round:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def live(self) -> int:
        """Requests and futures added and not yet handed back by `wait`."""
        return len(self._exchanges) + len(self._futures)

    def add(self, transport: SocketTransport, request: Request) -> Exchanging:
        """Start a request: it is sent as far as its socket takes it now, and read as the selector says."""
        one = Exchanging(transport, request)
        self._exchanges.add(one)
        _guarded(one, one.start)
        self._sync(one)
        if one.resolving:
            assert one.lookup is not None
            self._resolving.append(one)
            try:
                wake = self._wake()
            except OSError as exc:  # no descriptor left for the pipe: this request's own connect failure
                self._resolving.remove(one)
                one.lookup = None
                one.broke(exc)
                self._sync(one)
            else:
                one.lookup.add_done_callback(wake.ring)
        return one

    def watch(self, future: Future[Any]) -> None:
        """A future `wait` hands back once it is done, as it hands back a request that ended."""
        self._futures.add(future)
        future.add_done_callback(self._wake().ring)

    def ring(self) -> None:
        """From any thread: the `wait` in progress (or the next) returns at once."""
        assert self._wakeup is not None, "a Round that another thread wakes is made ringable"
        self._rung = True
        self._wakeup.ring()

    def abandon(self, one: Exchanging) -> None:
        """Give up a request in flight: its connection is closed and it is never handed back."""
        if one in self._exchanges:
            self._exchanges.discard(one)
            if one in self._resolving:
                self._resolving.remove(one)
            if one.result is None:
                one.abandon()
            self._sync(one)
            if one in self._ended:
                self._ended.remove(one)

    def wait(self, gather: float, *, until: float | None = None) -> list[Exchanging | Future[Any]]:
        """Block until something ended (or `ring`), or until the monotonic time `until` if nothing has by then;
        then go on reading until everything in flight has ended or `gather` seconds have passed since the first
        did; hand back, and forget, what ended by then (nothing, at `until`).

        What the sockets hold is read before any deadline is looked at: an answer that arrived while the batch
        was committing (between two waits) is taken whole, not expired; a request not yet sent whose deadline has
        passed is expired, never sent late."""
        first: float | None = None
        timeout: float | None = 0.0
        while True:
            ready = self._selector.select(timeout)
            now = time.monotonic()
            for key, _ in ready:
                one = key.data
                if one is None:
                    assert self._wakeup is not None
                    self._wakeup.drain()
                    continue
                if one.sending and one.deadline <= now:
                    one.expire()
                else:
                    _guarded(one, one.ready)
                self._sync(one)
            if self._resolving:
                for one in [one for one in self._resolving if one.lookup is None or one.lookup.done()]:
                    self._resolving.remove(one)
                    if one.lookup is not None and one.deadline > now:
                        _guarded(one, functools.partial(one.resolved, one.lookup))
                    self._sync(one)
            for one in [one for one in self._exchanges if one.result is None and one.deadline <= now]:
                _guarded(one, one.take_rest)
                if one.result is None:
                    one.expire()
                self._sync(one)
            for future in [future for future in self._futures if future.done() and future not in self._ended]:
                self._ended.append(future)
            rung, self._rung = self._rung, False
            if self._ended or rung:
                first = now if first is None else first
                if rung or len(self._ended) == self.live or now - first >= gather:
                    return self._take()
            if not self.live:
                return []
            if first is None and until is not None and now >= until:
                return []
            deadlines = [one.deadline for one in self._exchanges if one.result is None]
            ends = [*deadlines, first + gather] if first is not None else deadlines
            if first is None and until is not None:
                ends.append(until)
            timeout = max(min(ends) - now, 0.0) if ends else None

    def _take(self) -> list[Exchanging | Future[Any]]:
        ended, self._ended = self._ended, []
        for item in ended:
            if isinstance(item, Exchanging):
                self._exchanges.discard(item)
            else:
                self._futures.discard(item)
        return ended

    def _sync(self, one: Exchanging) -> None:
        _sync(self._selector, self._registered, one)
        if one.result is not None and one in self._exchanges and one not in self._ended:
            self._ended.append(one)

    def _wake(self) -> Wakeup:
        if self._wakeup is None:
            self._wakeup = Wakeup(self._selector)
        return self._wakeup

    def close(self) -> None:
        """Every request still in flight is abandoned (its connection closed); the pipe and selector closed. Once:
        closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        for one in list(self._exchanges):
            self.abandon(one)
        if self._wakeup is not None:
            self._wakeup.close()
        self._selector.close()


def _guarded(one: Exchanging, step: Callable[[], None]) -> None:
    """A socket call the steps do not expect to fail (a socket option, a lookup of the peer's state) ends its
    own request as a transport failure, never the batch: before the request is sent, as a failed connect."""
    try:
        step()
    except OSError as exc:
        one.broke(exc)


def _sync(
    selector: selectors.BaseSelector, registered: dict[Exchanging, tuple[socket.socket, int]], one: Exchanging
) -> None:
    """The selector watches each live exchange's current socket for what it waits on."""
    was = registered.get(one)
    now = None if one.result is not None or one.sock is None else (one.sock, one.want)
    if was == now:
        return
    if was is not None and (now is None or was[0] is not now[0]):
        selector.unregister(was[0])
        del registered[one]
        was = None
    if now is None:
        return
    if was is None:
        selector.register(now[0], now[1], one)
    else:
        selector.modify(now[0], now[1], one)
    registered[one] = now
