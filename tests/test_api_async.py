"""The async Python API: a cancelled `await pollwarden.watch(...)` stops polling within one request, records an
`interrupted` event, gives the lease back and leaves no thread behind; a later watch resumes the operation."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

import pollwarden
from pollwarden import Progress, Succeeded, Watch, WatchCancelled, watch
from pollwarden.operating import open_store
from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, write_contract

HINT = 3
"""The provider's poll hint after the first answer: the next request is due this many seconds later."""


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
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="5s", max_delay="5s", max_requests=6)
    seen: list[Progress] = []

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(
                watch(contract, "slow-1", home=home, operation_id="op-cancel", on_progress=seen.append), 0.3
            )

    started = time.monotonic()
    asyncio.run(main())
    elapsed = time.monotonic() - started
    assert elapsed < HINT - 1, elapsed  # returned at once, not at the next poll (nor the deadline)
    assert [t.name for t in threading.enumerate() if t.name.startswith("asyncio")] == []
    assert sim.request_count("slow-1") == 1 and [p.checks_used for p in seen if p.polled] == [1]

    store = open_store(home)
    try:
        stored = store.get("op-cancel")
        assert stored is not None
        before = stored.record
        assert before.phase.value == "active" and stored.lease_owner is None
    finally:
        store.close()
    (event,) = _interrupted(home, "op-cancel")
    assert event["by"] == "python api" and event["why"] == "cancelled" and event["resumable"] is True
    assert event["status_requests_used"] == 1 and event["max_status_requests"] == 6
    story = run_cli("story", "op-cancel", home=home).stdout
    assert "watch interrupted by python api (cancelled); resume operation op-cancel" in story

    time.sleep(0.5)
    assert sim.request_count("slow-1") == 1  # nothing kept polling behind the cancel

    outcome = asyncio.run(watch(contract, home=home, operation_id="op-cancel"))
    assert isinstance(outcome, Succeeded) and outcome.result == "/results/slow-1"
    assert outcome.record.deadline_at == before.deadline_at
    assert outcome.record.plan.max_status_requests == before.plan.max_status_requests == 6
    assert sim.request_count("slow-1") == 2
    assert len(_interrupted(home, "op-cancel")) == 1


def test_watch_cancel_from_another_thread_stops_a_blocking_run(sim: Simulator, tmp_path: Path, home: Path) -> None:
    _slow_job(sim, "slow-2")
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="5s", max_delay="5s")
    watching = Watch(contract, "slow-2", home=home, operation_id="op-thread")
    threading.Timer(0.3, watching.cancel).start()
    started = time.monotonic()
    with pytest.raises(WatchCancelled) as cancelled:
        watching.run()
    assert time.monotonic() - started < HINT - 1
    assert cancelled.value.operation_id == "op-thread" and "op-thread" in str(cancelled.value)
    assert sim.request_count("slow-2") == 1
    (event,) = _interrupted(home, "op-thread")
    assert event["by"] == "python api" and event["why"] == "cancelled"
    # The same Watch runs again: the cancel was for that run, and this one resumes the operation.
    outcome = watching.run()
    assert isinstance(outcome, Succeeded) and sim.request_count("slow-2") == 2


def test_on_progress_gets_one_polled_progress_per_request_in_order(sim: Simulator, tmp_path: Path, home: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    seen: list[Progress] = []
    outcome = pollwarden.watch_sync(contract, "happy-5", home=home, on_progress=seen.append)
    assert isinstance(outcome, Succeeded)
    polled = [p for p in seen if p.polled]
    assert [p.checks_used for p in polled] == [1, 2, 3, 4] == list(range(1, sim.request_count("happy-5") + 1))
    assert [p.state for p in polled] == ["queued", "running", "running", "succeeded"]
    assert all(isinstance(p, Progress) and p.operation_id == outcome.operation_id for p in seen)
    assert [p.final for p in seen].count(True) == 1 and seen[-1].final  # the last one, and only it
    assert all(p.next_check_at is not None for p in seen[:-1])


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


def test_useful_for_shorter_than_the_deadline_stops_at_the_usefulness_bound(
    sim: Simulator, tmp_path: Path, home: Path
) -> None:
    sim.add_job("forever-1", [Step(body={"state": "running"})])
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="50ms", max_delay="50ms", max_requests=200)
    started = time.monotonic()
    outcome = pollwarden.watch_sync(contract, "forever-1", home=home, deadline="1m", useful_for="400ms")
    assert time.monotonic() - started < 30
    assert isinstance(outcome, pollwarden.Stopped)
    assert outcome.reason.value == "usefulness_window_closed"
    record = outcome.record
    assert record is not None and record.plan.useful_until is not None
    assert record.plan.useful_until < record.deadline_at
    assert record.plan.useful_until - record.created_at == timedelta(milliseconds=400)


@pytest.mark.parametrize(
    ("useful_for", "words"),
    [
        ("soon", "useful_for: "),
        ("0s", "useful_for must be longer than zero"),
        (10, "useful_for must be a timedelta or a duration like '10m'"),
    ],
)
def test_a_bad_useful_for_is_a_watch_error_naming_it(
    useful_for: str, words: str, sim: Simulator, tmp_path: Path, home: Path
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    with pytest.raises(pollwarden.WatchError, match=words):
        Watch(contract, "happy-8", home=home, deadline="1m", useful_for=useful_for)
    assert sim.request_count("happy-8") == 0


def test_useful_for_goes_through_admission_and_is_never_widened_on_resume(
    sim: Simulator, tmp_path: Path, home: Path
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    first = pollwarden.watch_sync(contract, "happy-9", home=home, operation_id="op-useful", useful_for="10m")
    assert isinstance(first, Succeeded) and first.record.plan.useful_until is not None
    with pytest.raises(pollwarden.WatchError, match="cannot watch: useful_for 1h would move the usefulness window"):
        pollwarden.watch_sync(contract, home=home, operation_id="op-useful", useful_for="1h")
