"""wait_operation over stdio keeps an agent host's timer alive: progress notifications when the caller sent a
progress token, and an answer well within a host's ~60 s cut-off when it did not.

The server's two timings are shortened for these tests through its environment (POLLWARDEN_MCP_HEARTBEAT_SECONDS,
POLLWARDEN_MCP_WAIT_WITHOUT_PROGRESS_SECONDS; docs/agents.md), so no test waits the real 10 s or 45 s."""

from __future__ import annotations

import itertools
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio

from pollwarden.core.reasons import Phase
from pollwarden.mcp_server.base import (
    HEARTBEAT_ENV,
    HEARTBEAT_SECONDS,
    MAX_WAIT_WITHOUT_PROGRESS,
    WAIT_WITHOUT_PROGRESS_ENV,
)
from pollwarden.mcp_server.reporting import Reporter, timing
from pollwarden.report.progress import Progress
from pollwarden.simulator import Simulator

from .support import Note, Reply, agent_contract, cli, mcp_agent, pending_grant, run

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
            # Waits of 8 s, asked again until two polls (1-2 s apart) were made: a loaded machine that stalls the
            # server for seconds gets another wait, not a failure (the 1m deadline bounds the loop).
            while True:
                waited = await agent.call_reporting("wait_operation", notes, operation_id=op, max_wait_seconds=8)
                assert waited.ok and waited.data["status"] == "not_yet", waited.text
                assert "max_wait_seconds_capped_to" not in waited.data  # a reporting call keeps the 300 s cap
                polls = sim.request_count("never-p1")
                if polls >= 2:
                    break

            values = [n.progress for n in notes]
            assert all(a < b for a, b in itertools.pairwise(values)), values
            assert {n.total for n in notes} == {60.0}  # seconds from creation to the 1m deadline
            # Every poll was reported: the checks the messages count reach the requests the provider saw.
            seen = [_checks(n) for n in notes]
            assert seen == sorted(seen) and set(range(1, polls + 1)) <= set(seen), seen
            assert sum(1 for n in notes if "next check in" in (n.message or "")) >= polls
            # And between polls the call was never quiet for long: heartbeats came in between. Polls are 1-2 s
            # apart (2 s with bounded jitter), the heartbeat 0.2 s: each poll's count is shown by its own note,
            # the look that found nothing due, and at least one heartbeat before the next poll.
            for count in range(1, polls):
                assert seen.count(count) >= 3, (count, seen)
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
            waited = await agent.call("wait_operation", operation_id=op, max_wait_seconds=300)
            # The cap is 1.5 s here; 300 s were asked for, and only an uncapped wait reaches them (the next poll
            # is 30 s away): a loaded machine may stretch the 1.5 s, never to 300.
            assert waited.data["waited_seconds"] < 300, waited.text
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


def test_a_wait_without_progress_leaves_an_approval_open_for_the_next_call(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    table = '[agent]\napproval_timeout = "120s"\n'
    agent_contract(contracts, sim.url, approval="per_call", agent=table, base_delay="50ms", max_delay="50ms")

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env=SHORT) as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="never-p3")).data["operation_id"]
            first = await agent.call("wait_operation", operation_id=op, max_wait_seconds=300)
            # The answer comes by the cap and its margin (1.5 + 5 s here), not after the 120 s approval timeout,
            # which only a wait that ignored the cap reaches: load stretches the 6.5 s, the test does not time it.
            assert first.data["waited_seconds"] < 120, first.text
            assert first.ok and first.data["status"] == "not_yet", first.text
            assert first.data["waiting_for"] == "approval" and "stays open" in first.data["message"]
            grant_id = first.data["grant_id"]
            assert await _pending(home) == [grant_id]
            replies: list[Reply] = []
            waited_on_it = anyio.Event()

            async def waits() -> None:
                # Calling again, as the answer says, until a call has made the approved poll and waits on the
                # next poll's own grant. Where the approval lands (within a call's 1.5 s, or after: the next call
                # finds it approved) and where the approved poll ends (within that call, or past its cap: the
                # next call asks for the new grant) is the machine's timing; every order must keep the promises.
                while not replies or replies[-1].data.get("grant_id") in (None, grant_id):
                    replies.append(await agent.call("wait_operation", operation_id=op, max_wait_seconds=300))
                    assert replies[-1].ok and replies[-1].data["status"] == "not_yet", replies[-1].text
                    if replies[-1].data.get("grant_id") == grant_id:
                        waited_on_it.set()

            with anyio.fail_after(120):  # a guard against a hang, not a timing
                async with anyio.create_task_group() as tg:
                    tg.start_soon(waits)
                    await waited_on_it.wait()  # a second call waited on the same grant: no new one was asked for
                    assert await _pending(home) == [grant_id]
                    assert (await cli("approve-call", grant_id, "--by", "bob", home=home)).code == 0
            last = replies[-1]
            assert sim.request_count("never-p3") == 1  # the approved poll, and the next one waits for its own
            assert last.data["grant_id"] != grant_id and last.data["waiting_for"] == "approval", last.text
            assert await _pending(home) == [last.data["grant_id"]]
            # Until the approval, each call answered with the open grant; after it, at most one answer without
            # one (the approved poll's call, when its cap came before the next poll), then the new grant.
            grants = [r.data.get("grant_id") for r in replies]
            first_other = next(i for i, g in enumerate(grants) if g != grant_id)
            assert grants[:first_other] and grants[first_other:-1] in ([], [None]), grants

    run(body)


async def _pending(home: Path) -> list[str]:
    return [g["grant_id"] for g in json.loads((await cli("approvals", "--json", home=home)).stdout)]


def test_a_wait_without_progress_starts_no_poll_that_could_outlast_its_answer(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    # A 10 s request timeout is longer than this server's bound (1.5 s cap + 5 s margin) allows after the first.
    agent_contract(contracts, sim.url, timeout="10s", base_delay="50ms", max_delay="50ms")

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env=SHORT) as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="never-p4")).data["operation_id"]
            for expected in (1, 2):  # each call makes its first poll, and holds back the ones after it
                waited = await agent.call("wait_operation", operation_id=op, max_wait_seconds=300)
                assert waited.ok and waited.data["status"] == "not_yet" and waited.data["deferred"], waited.text
                assert waited.data["retry_after_seconds"] == 0
                assert sim.request_count("never-p4") == expected

    run(body)


def test_a_call_waiting_for_a_persons_approval_keeps_beating(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, approval="per_call", agent='[agent]\napproval_timeout = "20s"\n')

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env=SHORT) as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="never-p5")).data["operation_id"]
            notes: list[Note] = []
            replies: dict[str, Reply] = {}

            async def check() -> None:
                replies["check"] = await agent.call_reporting("check_operation", notes, operation_id=op)

            async with anyio.create_task_group() as tg:
                tg.start_soon(check)
                grant = await pending_grant(home, kind="call", scope=op)
                waiting = f"waiting for approval {grant['grant_id']} by anyone who can run pollwarden on this home:"
                with anyio.fail_after(60):  # heartbeats while nobody has answered yet (0.2 s apart here)
                    while sum((n.message or "").startswith(waiting) for n in notes) < 3:
                        await anyio.sleep(0.05)
                # A heartbeat may come before the gate asks (the operation's state, while it looks for an open
                # grant); from the first note that names the grant on, every note does.
                before = notes[next(i for i, n in enumerate(notes) if (n.message or "").startswith(waiting)) :]
                assert (await cli("approve-call", grant["grant_id"], "--by", "bob", home=home)).code == 0
            assert replies["check"].ok and replies["check"].data["status"] == "polled", replies["check"].text
            assert all((n.message or "").startswith(waiting) for n in before), before
            assert all(f"pollwarden approve-call {grant['grant_id']} --by NAME" in (n.message or "") for n in before)
            assert "checks 1/12" in (notes[-1].message or "")
            assert sim.request_count("never-p5") == 1

    run(body)
