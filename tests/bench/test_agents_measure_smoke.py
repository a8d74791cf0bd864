"""The agents measure's smoke version, so it cannot silently rot: `bench.agents_measure` in its quick mode for real
(seconds: the server's heartbeat and no-token cap shortened through its environment, the job's delays too), every
host and adversarial agent against one loopback simulator, and issue 14's goals asserted. Timing bounds are
generous (a loaded 2-core CI machine); the request counts are exact."""

from __future__ import annotations

import contextlib
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from bench import agents_figures as figures
from bench import agents_measure as am
from pollwarden.simulator import Simulator
from tests.prefork import spawn_args


def forked(args: list[str], env: dict[str, str]) -> list[str]:
    """Each server and command forked from a zygote that has imported it (tests/prefork.py): the ~0.8 s a fresh
    `pollwarden mcp` spends importing the SDK is spent once, not once per host and agent."""
    return spawn_args(args, env, servers=("mcp_server",) if args[0] == "mcp" else ())


Measured = tuple[dict[str, figures.HostResult], dict[str, figures.AgentResult], Path]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Measured:
    transcripts = tmp_path_factory.mktemp("transcripts")
    run = am.run(figures.QUICK, transcripts, spawn=forked)
    assert run.failures == []
    return {h.host: h for h in run.hosts}, {a.function: a for a in run.agents}, transcripts


def test_no_host_and_no_agent_makes_a_provider_request_beyond_the_plan(measured: Measured) -> None:
    hosts, agents, _ = measured
    assert set(hosts) == {"with progress", "without progress", "tasks"}
    assert set(agents) == {"check_loop", "repeat_start", "cancel_restart", "submit_twice"}
    for host in hosts.values():
        assert host.finished, host
        assert host.provider.made == host.provider.planned == 6, host  # the script's six, no more, none early
        assert host.provider.beyond == 0 and host.cut == 0, host
    for agent in agents.values():
        assert agent.provider.early == 0 and agent.provider.beyond == 0, agent
    # It did hammer: calls came while no poll was due and were answered from the store (a count of calls per
    # request, as before, is a speed: a loaded machine makes each call slower, never the schedule shorter).
    free = re.search(r"(\d+) answered not_yet from the store", agents["check_loop"].detail)
    assert free is not None and int(free.group(1)) >= 1, agents["check_loop"]
    assert "1 operation(s)" in agents["repeat_start"].detail
    restarted = agents["cancel_restart"].detail
    assert "1 cancel request sent" in restarted and "reused=True" in restarted
    assert agents["submit_twice"].provider.made == 1


def test_the_progress_host_gets_its_result_in_two_calls_and_is_never_quiet_for_long(measured: Measured) -> None:
    hosts, _, _ = measured
    progress = hosts["with progress"]
    assert progress.tool_calls <= figures.GOAL_CALLS  # start_watch and one wait_operation
    assert progress.notes >= 6  # one per poll at least, heartbeats between
    assert progress.silence < 15, progress  # heartbeat 0.2 s here; a guard at the 15 s hosts tolerate
    silent = hosts["without progress"]
    assert silent.tool_calls >= 3  # the job outlasts the 1.5 s cap: asked again, as the answer says
    assert silent.silence < 1.5 + 5 + 10, silent  # the cap and its margin, with slack
    tasks = hosts["tasks"]
    assert tasks.tool_calls == 2 and tasks.requests > tasks.tool_calls


def test_the_transcripts_hold_what_each_host_saw(measured: Measured) -> None:
    _, _, transcripts = measured
    lines = {
        name: [json.loads(line) for line in (transcripts / f"{name}.jsonl").read_text().splitlines()]
        for name in ("with-progress", "without-progress", "tasks")
    }
    methods = {name: [m["message"].get("method") for m in seen] for name, seen in lines.items()}
    assert "notifications/progress" in methods["with-progress"]
    assert "notifications/progress" not in methods["without-progress"]
    assert {"tasks/get", "tasks/result"} <= set(methods["tasks"])
    for seen in lines.values():
        assert [m["t"] for m in seen] == sorted(m["t"] for m in seen)
        assert seen[0]["message"]["method"] == "initialize" and seen[0]["dir"] == "client->server"


def test_a_poller_that_ignores_the_schedule_is_counted_beyond_the_plan() -> None:
    """The measure's own check can fail: three requests in a row, with no wait, where the plan wants 0.4 s."""
    with Simulator() as sim:
        gaps = am.plan(am.script(figures.QUICK), figures.QUICK.hint)
        sim.add_job("naive", am.script(figures.QUICK))
        for _ in range(3):  # the third is the 503 with Retry-After
            with contextlib.suppress(urllib.error.HTTPError), urllib.request.urlopen(f"{sim.url}/jobs/naive") as answer:
                answer.read()
        got = am.against_plan(sim, "naive", gaps, until=sim.requests("naive")[-1].at)
    assert gaps == [0.0, 0.4, 0.4, 1.0, 0.4, 0.4]
    assert got.made == 3 and got.early == 2 and got.beyond >= 2


def test_the_section_replaces_only_its_own(tmp_path: Path) -> None:
    doc = tmp_path / "agents.md"
    doc.write_text("# Agents\n\n## Tools\n\nkept\n\n## Later\n\nkept too\n", encoding="utf-8")
    for figure in ("first", "second"):
        figures.write_section(doc, f"{figures.HEADING}\n\n{figure}\n")
    text = doc.read_text(encoding="utf-8")
    assert text.count(figures.HEADING) == 1 and "second" in text and "first" not in text
    assert "## Tools\n\nkept\n" in text and "## Later\n\nkept too\n" in text


def test_the_section_says_which_goals_are_met(measured: Measured) -> None:
    hosts, agents, _ = measured
    text = figures.section(
        list(hosts.values()), list(agents.values()), [], "shortened timings", 1.5, "cmd", (1.0, 1.0), "links"
    )
    verdict = text[text.index("Against issue 14's goals") :]
    assert "whatever the agent does**: 0 (goal 0: met)" in verdict
    assert "**with progress**: 2 tool calls for the result (goal <= 2: met)" in verdict
    assert verdict.count("NOT met") == 1 and "The goal of 2 is not met here" in verdict  # the 1.5 s cap's extra calls
    failed = figures.section([], [], ["host_with_tasks: OSError: gone"], "t", 1.5, "cmd", (1.0, 1.0), "links")
    assert "**FAILED, no figures**: host_with_tasks: OSError: gone" in failed
