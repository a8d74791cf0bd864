"""wait_operation over stdio keeps an agent host's timer alive: progress notifications when the caller sent a
progress token, and an answer well within a host's ~60 s cut-off when it did not.

The server's two timings are shortened for these tests through its environment (POLLWARDEN_MCP_HEARTBEAT_SECONDS,
POLLWARDEN_MCP_WAIT_WITHOUT_PROGRESS_SECONDS; docs/agents.md), so no test waits the real 10 s or 45 s."""

from __future__ import annotations

import itertools
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pollwarden.core.reasons import Phase
from pollwarden.mcp_server.base import (
    HEARTBEAT_ENV,
    HEARTBEAT_SECONDS,
    MAX_WAIT_WITHOUT_PROGRESS,
    WAIT_WITHOUT_PROGRESS_ENV,
)
from pollwarden.mcp_server.reporting import Reporter, timing
from pollwarden.progress import Progress
from pollwarden.simulator import Simulator

from .support import Note, agent_contract, mcp_agent, run

SHORT = {"POLLWARDEN_MCP_HEARTBEAT_SECONDS": "0.2", "POLLWARDEN_MCP_WAIT_WITHOUT_PROGRESS_SECONDS": "1.5"}


def _checks(note: Note) -> int:
    found = re.search(r"checks (\d+)/", note.message or "")
    assert found is not None, note
    return int(found.group(1))


def test_a_wait_with_a_progress_token_reports_every_poll_and_beats_between_them(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    # Two seconds between polls: ten heartbeats' worth of silence if nothing beat between them.
    agent_contract(contracts, sim.url, base_delay="2s", max_delay="2s")

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env=SHORT) as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="never-p1")).data["operation_id"]
            notes: list[Note] = []
            began = time.monotonic()
            waited = await agent.call_reporting("wait_operation", notes, operation_id=op, max_wait_seconds=5)
            ended = time.monotonic()
            assert waited.ok and waited.data["status"] == "not_yet", waited.text
            assert "max_wait_seconds_capped_to" not in waited.data  # a reporting call keeps the 300 s cap
            polls = sim.request_count("never-p1")
            assert polls >= 2, polls

            values = [n.progress for n in notes]
            assert all(a < b for a, b in itertools.pairwise(values)), values
            assert {n.total for n in notes} == {60.0}  # seconds from creation to the 1m deadline
            # Every poll was reported: the checks the messages count reach the requests the provider saw.
            seen = [_checks(n) for n in notes]
            assert seen == sorted(seen) and set(range(1, polls + 1)) <= set(seen), seen
            assert sum(1 for n in notes if "next check in" in (n.message or "")) >= polls
            # And between polls the call was never quiet for long: heartbeats came in between.
            times = [began, *(n.at for n in notes), ended]
            gaps = [b - a for a, b in itertools.pairwise(times)]
            assert max(gaps) < 1.5, gaps  # polls are 2 s apart; the heartbeat is 0.2 s
            assert len(notes) > 2 * polls, (len(notes), polls)

            once: list[Note] = []
            checked = await agent.call_reporting("check_operation", once, operation_id=op)
            assert checked.ok, checked.text
            assert len(once) == 1 and once[0].progress > values[-1] and "checks" in (once[0].message or "")

    run(body)


def test_a_wait_without_a_progress_token_answers_by_the_cap_and_asking_again_is_free(
    sim: Simulator, tmp_path: Path
) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, base_delay="30s", max_delay="30s")

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env=SHORT) as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="never-p2")).data["operation_id"]
            began = time.monotonic()
            waited = await agent.call("wait_operation", operation_id=op, max_wait_seconds=300)
            assert time.monotonic() - began < 20  # the cap is 1.5 s here; 300 s were asked for
            assert waited.ok and waited.data["status"] == "not_yet", waited.text
            assert waited.data["max_wait_seconds_capped_to"] == 1.5
            assert "progress token" in waited.data["capped_because"]
            assert 1.5 < waited.data["retry_after_seconds"] <= 30  # jittered backoff
            assert waited.data["next_check_at"] == waited.data["progress"]["next_check_at"]
            assert "sends no provider request before then" in waited.data["message"]
            assert sim.request_count("never-p2") == 1

            for _ in range(2):  # calling again at once, as the answer says, costs the provider nothing
                again = await agent.call("wait_operation", operation_id=op, max_wait_seconds=300)
                assert again.ok and again.data["status"] == "not_yet", again.text
            assert sim.request_count("never-p2") == 1

    run(body)


def test_the_timings_may_only_be_shortened_and_notes_only_grow() -> None:
    assert timing({}) == (HEARTBEAT_SECONDS, MAX_WAIT_WITHOUT_PROGRESS)
    assert timing({HEARTBEAT_ENV: "0.5", WAIT_WITHOUT_PROGRESS_ENV: "2"}) == (0.5, 2.0)
    for bad in ("60", "0", "-1", "nan", "soon", "inf"):  # longer than the constant, or not a time: ignored
        assert timing({HEARTBEAT_ENV: bad, WAIT_WITHOUT_PROGRESS_ENV: bad}) == (
            HEARTBEAT_SECONDS,
            MAX_WAIT_WITHOUT_PROGRESS,
        )

    created = datetime(2026, 1, 1, tzinfo=UTC)
    clock = [created + timedelta(seconds=5)]

    async def send(progress: float, total: float, message: str) -> None:
        raise AssertionError("note() only computes")

    reporter = Reporter(send, lambda: clock[0], heartbeat_seconds=1)
    assert reporter.note(None) is None  # nothing to describe before the first step
    progress = Progress(
        operation_id="op",
        job_id="j",
        phase=Phase.ACTIVE,
        state="running",
        checks_used=1,
        checks_allowed=5,
        next_check_at=created + timedelta(seconds=9),
        delay_source=None,
        deadline_at=created + timedelta(seconds=60),
        created_at=created,
        reason=None,
        polled=True,
    )
    first = reporter.note(progress)
    same_moment = reporter.note(None)  # a heartbeat in the same millisecond still grows
    clock[0] = created + timedelta(seconds=7)
    later = reporter.note(None)
    assert first is not None and same_moment is not None and later is not None
    assert (first.progress, first.total) == (5.0, 60.0)
    assert first.progress < same_moment.progress < later.progress == 7.0
    assert "next check in 4s" in first.message and "next check in 2s" in later.message
    clock[0] = created + timedelta(seconds=90)  # past the deadline: the total is never below the value
    past = reporter.note(None)
    assert past is not None and past.total == past.progress == 90.0
