"""Host names to addresses inside the request's deadline, for both paths of `pollwarden.transport.wire`.

`getaddrinfo` blocks and cannot be cancelled or given a timeout: called in line, one slow name server held a
blocking request past its deadline, and a whole selector batch (`wire_select`) with it. So a lookup runs on a
thread of its own and the caller waits for its `Future` only until the request's deadline (the blocking path)
or watches it beside its sockets (the selector); a lookup that has not answered by then ends that request as a
connect failure, like a connect timeout, and is left to finish on its own.

The threads are daemon threads, one per lookup in flight, never a fixed pool: a lookup that hangs must neither
hold a slot another name needs nor keep the process from exiting. Lookups of one (host, port) in flight at once
share one thread, so a hung name costs one thread however many requests wait on it, and a successful answer is
kept for `CACHE_SECONDS` (getaddrinfo gives no TTL; 30 s is the JVM's default and short enough that a provider
moving its addresses is followed within a batch or two). A failure is not kept: the next request asks again.
IP literals and "localhost" (RFC 6761: always the loopback) skip the lookup. With keep-alive a lookup is only
needed for a new connection, so this is off the hot path.

`Resolver` is the seam: `SocketTransport(resolver=...)` takes any function of (host, port) to getaddrinfo's
answer, as httpx takes a transport, so a test can drive a lookup that never answers.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from ..core.addresses import PUBLIC, address_kind, allowed_kinds, refusal

AddrInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[Any, ...]]
Resolver = Callable[[str, int], Sequence[AddrInfo]]


@dataclass(frozen=True)
class AddressGuard:
    """A request that connects only to public addresses, or to loopback and private ones when `home` (the
    contract's status origin, host and port) resolves there too (`core.addresses`): a result download. Checked
    on the addresses the connection is made to, after the lookup, so no DNS answer can steer it elsewhere."""

    home: tuple[str, int]


def guarded(addresses: Sequence[AddrInfo], home: Callable[[], Sequence[AddrInfo]]) -> tuple[list[AddrInfo], str | None]:
    """(the addresses a guarded request may connect to, in order; why not, when none is left). `home` looks the
    status origin up, and is called only when an address is not public."""
    allowed: frozenset[str] = frozenset({PUBLIC})
    if any(address_kind(info[4][0]) != PUBLIC for info in addresses):
        allowed = allowed_kinds(info[4][0] for info in home())
    kept = [info for info in addresses if refusal(info[4][0], allowed) is None]
    if addresses and not kept:
        return [], refusal(addresses[0][4][0], allowed)
    return kept, None


CACHE_SECONDS = 30.0
MAX_CACHED = 256
"""Names kept at most (a worker polls a handful of origins): past it, the expired answers are dropped."""


def system_resolver(host: str, port: int) -> Sequence[AddrInfo]:
    """getaddrinfo, as `socket.create_connection` calls it."""
    return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)


def _literal(host: str, port: int) -> list[AddrInfo] | None:
    """The addresses of an IP literal or of localhost, or None when the name must be looked up."""
    tcp = socket.IPPROTO_TCP
    if host == "localhost":
        return [
            (socket.AF_INET, socket.SOCK_STREAM, tcp, "", ("127.0.0.1", port)),
            (socket.AF_INET6, socket.SOCK_STREAM, tcp, "", ("::1", port, 0, 0)),
        ]
    if "%" in host or not (host[:1].isdigit() or ":" in host):  # a scoped IPv6 address needs getaddrinfo's parse
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if address.version == 4:
        return [(socket.AF_INET, socket.SOCK_STREAM, tcp, "", (host, port))]
    return [(socket.AF_INET6, socket.SOCK_STREAM, tcp, "", (host, port, 0, 0))]


_Key = tuple[Resolver, str, int]


class _Lookups:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[_Key, tuple[Future[list[AddrInfo]], float]] = {}
        """Each name's lookup and until when its answer may be used (infinity while in flight)."""

    def forget(self) -> None:
        """In a forked child: the parent's lookup threads do not exist there, so their futures would never end."""
        self._lock = threading.Lock()
        self._entries = {}

    def lookup(self, resolver: Resolver, host: str, port: int) -> Future[list[AddrInfo]]:
        literal = _literal(host, port)
        if literal is not None:
            done: Future[list[AddrInfo]] = Future()
            done.set_result(literal)
            return done
        key = (resolver, host, port)
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and now <= entry[1]:
                return entry[0]
            if len(self._entries) >= MAX_CACHED:
                self._entries = {k: e for k, e in self._entries.items() if now <= e[1]}
            future: Future[list[AddrInfo]] = Future()
            self._entries[key] = (future, float("inf"))
        threading.Thread(target=self._run, args=(key, future), name="pollwarden-dns", daemon=True).start()
        return future

    def _run(self, key: _Key, future: Future[list[AddrInfo]]) -> None:
        resolver, host, port = key
        try:
            answer = list(resolver(host, port))
        except BaseException as exc:  # handed to whoever waits, as the lookup's own failure
            with self._lock:
                if self._entries.get(key, (None,))[0] is future:
                    del self._entries[key]
            future.set_exception(exc)
            return
        with self._lock:
            if self._entries.get(key, (None,))[0] is future:
                self._entries[key] = (future, time.monotonic() + CACHE_SECONDS)
        future.set_result(answer)


_LOOKUPS = _Lookups()
os.register_at_fork(after_in_child=_LOOKUPS.forget)


def lookup(resolver: Resolver, host: str, port: int) -> Future[list[AddrInfo]]:
    """The addresses of (host, port) as `resolver` gives them: done at once for a literal or a cached answer,
    else a lookup in flight on a thread of its own (shared with any other request for the same name)."""
    return _LOOKUPS.lookup(resolver, host, port)


class Wakeup:
    """A pipe a selector watches (registered with data None), written to when a lookup answers on its own thread
    (`ring`, a future's done callback). Closed with the selector's batch; a lookup that answers later writes
    nothing (its descriptor number may be another file's by then)."""

    def __init__(self, selector: selectors.BaseSelector) -> None:
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._open = True
        selector.register(self._read, selectors.EVENT_READ, None)

    def ring(self, _: object = None) -> None:
        with self._lock:
            if self._open:
                with contextlib.suppress(BlockingIOError):  # rung already, and not yet read: once is enough
                    os.write(self._write, b"\0")

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read, 4096):
                pass

    def close(self) -> None:
        with self._lock:
            self._open = False
            os.close(self._read)
            os.close(self._write)
