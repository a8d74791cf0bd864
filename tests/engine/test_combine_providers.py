"""Combined watches of two providers through the Python API, on real loopback servers: one provider that holds
every request, one that answers at once. A batch waits for its slowest request before it records, so the
steps of a provider that hangs must not share a batch with another provider's."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import pollwarden
from pollwarden.engine.combine import Combiner, combined
from pollwarden.simulator import Simulator, Step, contract_text
from pollwarden.store.base import Store
from tests.conftest import hanging_token, process_alive

HANG_GUARD = 60.0
"""How long a watch may take before the test fails as stalled: a guard, not a measurement; the contracts'
request timeout is twice as long, so a fast watch held behind the hanging provider's requests trips it."""


@contextmanager
def holding_server(release: threading.Event) -> Iterator[str]:
    """Accepts every connection and answers nothing until `release`, then closes them all."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)
            if release.is_set():
                conn.close()

    def let_go() -> None:
        release.wait()
        for conn in list(held):
            conn.close()

    for target in (accept, let_go):
        threading.Thread(target=target, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        release.set()
        listener.close()
        for conn in held:
            conn.close()


def test_a_provider_that_hangs_holds_up_no_watch_of_another_provider(store: Store, tmp_path: Path) -> None:
    count = 6
    release = threading.Event()
    with holding_server(release) as slow_url, Simulator() as sim:
        for n in range(count):
            sim.add_job(f"fast-{n}", [Step(body={"state": "succeeded", "result_url": "/r"})])
        slow, fast = tmp_path / "slow.toml", tmp_path / "fast.toml"
        slow.write_text(contract_text(slow_url, name="slow", timeout="120s", max_transport_failures=1))
        fast.write_text(contract_text(sim.url, name="fast", timeout="120s"))
        outcomes: dict[str, object] = {}

        def watch(path: Path, job: str) -> None:
            try:
                outcomes[job] = pollwarden.watch_sync(path, job, store=store)
            except BaseException as exc:
                outcomes[job] = exc

        jobs = [(slow, f"slow-{n}") for n in range(count)] + [(fast, f"fast-{n}") for n in range(count)]
        threads = {job: threading.Thread(target=watch, args=(path, job)) for path, job in jobs}
        with combined(store) as combiner:
            with combiner._turn:  # every first step joins the batches forming meanwhile, whatever the order
                for thread in threads.values():
                    thread.start()
                deadline = time.monotonic() + HANG_GUARD
                while sum(len(g.tickets) for g in combiner._forming.values()) < len(jobs):
                    assert time.monotonic() < deadline, "the steps never joined a forming batch"
                    time.sleep(0.001)
            guard = time.monotonic() + HANG_GUARD  # one guard for all: each join takes what is left of it
            for n in range(count):
                threads[f"fast-{n}"].join(timeout=max(0.0, guard - time.monotonic()))
            stalled = [job for job, thread in threads.items() if job.startswith("fast") and thread.is_alive()]
            release.set()  # the slow provider's requests end now (a transport failure each), not before
            for thread in threads.values():
                thread.join(timeout=HANG_GUARD)
    assert not stalled, f"waited for the hanging provider's requests: {stalled}"
    assert all(type(outcomes[f"fast-{n}"]).__name__ == "Succeeded" for n in range(count)), outcomes
    assert all(type(outcomes[f"slow-{n}"]).__name__ == "Stopped" for n in range(count)), outcomes


def test_an_interrupted_watch_abandons_its_request_in_flight_and_gives_its_lease_back(
    store: Store, tmp_path: Path
) -> None:
    """Ctrl-C while a combined watch's request is held by its provider: the batch's thread drives the step, so the
    interrupt reaches the main thread waiting for it; the watch hands it to its lane, the request is abandoned
    (its connection closed), the lease given back, the reservation counted, and `watch_sync` raises at once."""
    asked, closed = threading.Event(), threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def hold() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            asked.set()
            conn.settimeout(HANG_GUARD)
            if conn.recv(1) == b"":  # the client closed it: nothing more is ever read
                closed.set()

    sent = threading.Event()

    def interrupt() -> None:
        if asked.wait(HANG_GUARD):
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
            sent.set()

    contract = tmp_path / "held.toml"
    contract.write_text(contract_text(f"http://127.0.0.1:{listener.getsockname()[1]}", name="held", timeout="120s"))
    server, interrupter = threading.Thread(target=hold, daemon=True), threading.Thread(target=interrupt, daemon=True)
    server.start()
    interrupter.start()
    # Two full runs under load saw no KeyboardInterrupt here (both backends, one xdist worker, the watch ran to its
    # deadline) while the test passes alone: what the handler was, and whether the signal went, says which part.
    handler = signal.getsignal(signal.SIGINT)
    assert handler is signal.default_int_handler, f"SIGINT was {handler!r} when the test began"
    try:
        try:
            outcome = pollwarden.watch_sync(contract, "held-1", store=store, operation_id="op-held")
        except KeyboardInterrupt:
            pass
        else:
            now = signal.getsignal(signal.SIGINT)
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a mask would hold the signal pending, unseen
            pytest.fail(
                f"no KeyboardInterrupt: {outcome!r}; SIGINT sent: {sent.is_set()}; its handler now {now!r};"
                f" signals blocked in this thread: {sorted(blocked)}"
            )
        assert closed.wait(HANG_GUARD), "the abandoned request's connection was left open"
    finally:
        listener.close()
    assert asked.is_set()
    stored = store.get("op-held")
    assert stored is not None and stored.lease_owner is None  # given back: a resume starts at once
    assert (stored.record.status_requests_used, stored.record.polls_completed) == (1, 0)  # counted, unanswered
    assert [e.kind for e in store.events("op-held")][-1] == "interrupted"


def test_an_interrupt_that_lands_as_the_watch_joins_its_batch_still_ends_its_step(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C that lands once the watch's step is in its batch but before the watch waits for it (between
    `_join` and the wait) went straight up and out of `watch_sync` while the batch went on: the step claimed,
    sent its request and held the lease for a watch that was gone. It is handed to the lane as any interrupt
    during the wait is: `watch_sync` raises only once its step has ended, its lease given back."""
    listener = socket.create_server(("127.0.0.1", 0))
    asked, closed = threading.Event(), threading.Event()

    def hold() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn:
                while b"\r\n\r\n" not in conn.recv(65536):
                    pass
                asked.set()
                conn.settimeout(HANG_GUARD)
                if conn.recv(1) == b"":
                    closed.set()

    joined: list[Any] = []
    real_join = Combiner._join

    def join_then_interrupted(self: Combiner, forming: Any, key: Any, ticket: Any, lead: Any) -> None:
        real_join(self, forming, key, ticket, lead)
        if key is not None:  # a step's batch, not the admissions'
            joined.append(ticket)
            raise KeyboardInterrupt  # as the signal handler raises it, at the next bytecode

    monkeypatch.setattr(Combiner, "_join", join_then_interrupted)
    contract = tmp_path / "held.toml"
    contract.write_text(contract_text(f"http://127.0.0.1:{listener.getsockname()[1]}", name="held", timeout="120s"))
    threading.Thread(target=hold, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            pollwarden.watch_sync(contract, "held-1", store=store, operation_id="op-held")
        (ticket,) = joined
        assert ticket.done.is_set(), "watch_sync returned while its step still ran in the batch"
        assert not asked.is_set() or closed.wait(HANG_GUARD), "a request sent was left in flight"
    finally:
        listener.close()
    stored = store.get("op-held")
    assert stored is not None and stored.lease_owner is None
    assert [e.kind for e in store.events("op-held")][-1] == "interrupted"


def test_a_watch_whose_token_command_hangs_holds_up_no_other_watch_of_the_process(tmp_path: Path) -> None:
    """Two Python API watches of one home in one process share their batches (`engine.combine`). A batch read each
    client's credential on its own thread before its requests went out, so a refresh of one watch's token command
    that hung held every other watch of the batch (30 s, the command's timeout). Now the command's wait is on the
    batch's I/O pool (`batch._start`'s `preparing`): the other watch is polled meanwhile, counted here while the
    command is still the same hung run."""
    token = hanging_token(tmp_path)
    home = tmp_path / "home"
    with Simulator() as sim:
        for job in ("healthy-1", "hanging-1"):
            sim.add_job(job, [Step(body={"state": "running"}, times=100000)])
        healthy, hanging = tmp_path / "healthy.toml", tmp_path / "hanging.toml"
        for path, name, extra in ((healthy, "healthy", ""), (hanging, "hanging", token.extra)):
            text = contract_text(sim.url, name=name, timeout="30s", base_delay="50ms", max_delay="100ms",
                                 deadline="10m", max_requests=5000, extra=extra)  # fmt: skip
            path.write_text(text)
        watches = [pollwarden.Watch(healthy, "healthy-1", home=home), pollwarden.Watch(hanging, "hanging-1", home=home)]
        ended: list[BaseException | object] = []

        def run(watch: pollwarden.Watch) -> None:
            try:
                ended.append(watch.run())
            except BaseException as exc:
                ended.append(exc)

        threads = [threading.Thread(target=run, args=(watch,)) for watch in watches]
        for thread in threads:
            thread.start()
        try:
            deadline = time.monotonic() + HANG_GUARD
            while (command := token.hanging()) is None:
                assert time.monotonic() < deadline, "the token command's refresh never started"
                time.sleep(0.01)
            start = sim.request_count("healthy-1")
            while sim.request_count("healthy-1") < start + 20:
                assert process_alive(command), (
                    f"the hung command was given up on after {sim.request_count('healthy-1') - start} healthy polls"
                )
                assert time.monotonic() < deadline, "the healthy watch stopped being polled"
                time.sleep(0.01)
            assert process_alive(command)
            hanging_polls = sim.request_count("hanging-1")
            token.release.touch()
            while sim.request_count("hanging-1") == hanging_polls:  # its command ended: it goes on
                assert time.monotonic() < deadline, "the hanging watch never went on once its command ended"
                time.sleep(0.01)
        finally:
            token.release.touch()
            for watch in watches:
                watch.cancel()
            for thread in threads:
                thread.join(HANG_GUARD)
    assert all(isinstance(one, pollwarden.WatchCancelled) for one in ended), ended
