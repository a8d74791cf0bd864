"""The async Python API: a cancelled `await pollwarden.watch(...)` stops polling within one request, records an
`interrupted` event, gives the lease back and leaves no thread behind; a later watch resumes the operation."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import pollwarden
from pollwarden import Progress, Succeeded, Watch, WatchCancelled, watch
from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator, Step
from pollwarden.store import Store
from tests.conftest import run_cli, write_contract

HINT = 60
"""The provider's poll hint after the first answer: the next request is due this many seconds later. A cancel must
end the run before then (asserted against the stored due time, not as a duration), so the hint is long enough that
no scheduler stall of a loaded machine reaches it (the contracts' deadline is longer still); a resume does not
wait it out: its store's clock is moved past it."""


def _moved_store(home: Path) -> Store:
    """The home's store, its clock (the engine's) HINT seconds and more ahead of the machine's: a resume polls at
    once instead of waiting out the hint. The caller closes it."""
    store = open_store(home)
    honest = store.db_now
    store.db_now = lambda: honest() + timedelta(seconds=HINT + 1)  # type: ignore[method-assign]
    return store


def _slow_job(sim: Simulator, job_id: str) -> None:
    sim.add_job(
        job_id,
        [
            Step(body={"state": "running", "poll_after_seconds": HINT}),
            Step(body={"state": "succeeded", "result_url": f"/results/{job_id}"}),
        ],
    )


def _interrupted(home: Path, operation_id: str) -> list[dict[str, object]]:
    story = json.loads(run_cli("story", operation_id, "--json", home=home).stdout)
    return [e["data"] for e in story if e["kind"] == "interrupted"]


def test_cancelling_the_awaiting_task_stops_polling_and_a_later_watch_resumes(
    sim: Simulator, tmp_path: Path, home: Path
) -> None:
    _slow_job(sim, "slow-1")
    contract = write_contract(
        tmp_path / "c.toml", sim.url, base_delay="5s", max_delay="5s", max_requests=6, deadline="10m"
    )
    seen: list[Progress] = []

    async def main() -> None:
        # Cancelled once its first answer is told, not after a fixed 0.3 s: on a loaded machine no request had
        # gone out by then, the operation was still due at its creation, and "returned before the next poll"
        # could not hold (seen once under two busy loops).
        polled = asyncio.Event()
        loop = asyncio.get_running_loop()

        def told(progress: Progress) -> None:
            seen.append(progress)
            if progress.polled:
                loop.call_soon_threadsafe(polled.set)

        task = asyncio.create_task(watch(contract, "slow-1", home=home, operation_id="op-cancel", on_progress=told))
        await asyncio.wait_for(polled.wait(), 60)  # only against a hang
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    returned_at = datetime.now(UTC)
    assert [t.name for t in threading.enumerate() if t.name.startswith(("asyncio", "pollwarden-async"))] == []
    # One request, recorded and told; never a second.
    sent = sim.request_count("slow-1")
    assert sent == 1 and [p.checks_used for p in seen if p.polled] == [1]

    store = open_store(home)
    try:
        stored = store.get("op-cancel")
        assert stored is not None
        before = stored.record
        assert before.phase.value == "active" and stored.lease_owner is None
    finally:
        store.close()
    assert returned_at < before.next_poll_at  # returned at once, not at the next poll (nor the deadline)
    (event,) = _interrupted(home, "op-cancel")
    assert event["by"] == "python api" and event["why"] == "cancelled" and event["resumable"] is True
    assert event["status_requests_used"] == sent and event["max_status_requests"] == 6
    story = run_cli("story", "op-cancel", home=home).stdout
    assert "watch interrupted by python api (cancelled); resume operation op-cancel" in story

    time.sleep(0.5)
    assert sim.request_count("slow-1") == sent  # nothing kept polling behind the cancel

    moved = _moved_store(home)
    try:
        outcome = asyncio.run(watch(contract, home=home, operation_id="op-cancel", store=moved))
    finally:
        moved.close()
    assert isinstance(outcome, Succeeded) and outcome.result == "/results/slow-1"
    assert outcome.record.deadline_at == before.deadline_at
    assert outcome.record.plan.max_status_requests == before.plan.max_status_requests == 6
    assert sim.request_count("slow-1") == 2
    assert len(_interrupted(home, "op-cancel")) == 1


def test_watch_cancel_from_another_thread_stops_a_blocking_run(sim: Simulator, tmp_path: Path, home: Path) -> None:
    _slow_job(sim, "slow-2")
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="5s", max_delay="5s", deadline="10m")
    polled = threading.Event()

    def told(progress: Progress) -> None:
        if progress.polled:
            polled.set()

    watched, ahead = open_store(home), [timedelta(0)]
    honest = watched.db_now
    watched.db_now = lambda: honest() + ahead[0]  # type: ignore[method-assign]
    watching = Watch(contract, "slow-2", home=home, operation_id="op-thread", on_progress=told, store=watched)

    def cancel_after_the_first_poll() -> None:
        polled.wait(30)
        time.sleep(0.1)  # the run is asleep until the next poll, HINT seconds away
        watching.cancel()

    canceller = threading.Thread(target=cancel_after_the_first_poll)
    canceller.start()
    with pytest.raises(WatchCancelled) as cancelled:
        watching.run()
    returned_at = datetime.now(UTC)
    canceller.join()
    store = open_store(home)
    try:
        stored = store.get("op-thread")
        assert stored is not None
        assert returned_at < stored.record.next_poll_at  # woken by the cancel, not by the next poll
    finally:
        store.close()
    assert cancelled.value.operation_id == "op-thread" and "op-thread" in str(cancelled.value)
    assert sim.request_count("slow-2") == 1
    (event,) = _interrupted(home, "op-thread")
    assert event["by"] == "python api" and event["why"] == "cancelled"
    # The same Watch runs again: the cancel was for that run, and this one resumes the operation (its clock moved
    # past the hint, so it polls at once).
    ahead[0] = timedelta(seconds=HINT + 1)
    try:
        outcome = watching.run()
    finally:
        watched.close()
    assert isinstance(outcome, Succeeded) and sim.request_count("slow-2") == 2


def test_a_raising_on_progress_stops_the_watch_resumable_and_is_raised(
    sim: Simulator, tmp_path: Path, home: Path
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)

    def broken(progress: Progress) -> None:
        if progress.polled:
            raise ValueError("the caller's own bug, with text nobody vetted: sk-secret")

    async def main() -> None:
        await watch(contract, "happy-6", home=home, operation_id="op-raise", on_progress=broken)

    with pytest.raises(ValueError, match="the caller's own bug"):
        asyncio.run(main())
    assert sim.request_count("happy-6") == 1
    store = open_store(home)
    try:
        stored = store.get("op-raise")
        assert stored is not None and stored.record.phase.value == "active" and stored.lease_owner is None
    finally:
        store.close()
    (event,) = _interrupted(home, "op-raise")
    assert event["why"] == "on_progress raised ValueError"  # its type only: the text is the caller's
    assert "sk-secret" not in run_cli("story", "op-raise", "--json", home=home).stdout
    outcome = pollwarden.watch_sync(contract, home=home, operation_id="op-raise")
    assert isinstance(outcome, Succeeded) and sim.request_count("happy-6") == 4


def test_a_cancel_during_a_request_lets_it_finish_and_record_and_sends_no_other(
    sim: Simulator, tmp_path: Path, home: Path
) -> None:
    # The provider takes 1 s to answer; without the cancel the next poll would follow 50 ms later.
    sim.add_job("inflight-1", [Step(body={"state": "running"}, delay=1.0)])
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="50ms", max_delay="50ms", timeout="10s")

    async def main() -> None:
        task = asyncio.create_task(watch(contract, "inflight-1", home=home, operation_id="op-inflight"))
        for _ in range(1000):  # until the provider has the request (it records it before its 1 s delay)
            if sim.request_count("inflight-1"):
                break
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()  # a second cancel while the request finishes is absorbed: the thread is still waited for
        with pytest.raises(asyncio.CancelledError):
            await task

    started = time.monotonic()
    asyncio.run(main())
    # A guard against a hang: the answer was waited for (1 s), and nothing after it (asserted below by count).
    assert time.monotonic() - started < 60
    assert [t.name for t in threading.enumerate() if t.name.startswith(("asyncio", "pollwarden-async"))] == []
    time.sleep(0.3)
    assert sim.request_count("inflight-1") == 1
    status = json.loads(run_cli("status", "op-inflight", "--json", home=home).stdout)
    assert (status["phase"], status["status_requests_used"], status["last_state"]) == ("active", 1, "running")
    (event,) = _interrupted(home, "op-inflight")
    assert event["status_requests_used"] == 1 and event["why"] == "cancelled"


def test_many_awaited_watches_all_poll_at_once(tmp_path: Path, home: Path) -> None:
    """More concurrent `await watch()` calls than the event loop's default executor has threads (min(32, cores
    + 4): 6 on 2 cores): every job stays `running` until all of them have been asked once, so watches that
    queued behind the others' threads would never be asked and all would end at their deadline."""
    from tests.loopback import Answer, Seen, serving

    count = 12
    asked: set[str] = set()
    lock = threading.Lock()

    def answer(seen: Seen) -> Answer:
        with lock:
            asked.add(seen.path)
            state = "succeeded" if len(asked) == count else "running"
        return Answer(200, json.dumps({"state": state, "result_url": "/r"}).encode())

    with serving({("GET", f"/jobs/j{n}"): answer for n in range(count)}) as server:
        contract = write_contract(
            tmp_path / "c.toml", server.url, base_delay="50ms", max_delay="100ms", max_requests=1000, deadline="20s"
        )
        open_store(home).close()

        async def main() -> list[object]:
            return list(await asyncio.gather(*(watch(contract, f"j{n}", home=home) for n in range(count))))

        outcomes = asyncio.run(main())
    assert len(asked) == count
    assert all(isinstance(outcome, Succeeded) for outcome in outcomes), outcomes
