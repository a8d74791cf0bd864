"""Measure pollwarden's MCP server as agent hosts use it (issue 14): calls per result, silences, provider requests.

`python -m bench.agents_measure` (a benchmark, not a test) starts the loopback simulator with a scripted job
(running with a provider poll hint, a 503 with Retry-After, running, succeeded: about 60 s) and `pollwarden mcp`
over stdio per host, driven by the SDK's ClientSession (raw JSON-RPC for tasks), and plays:

- a host with progress (a progress token; wait_operation with max_wait_seconds=300; it cuts a call after 60 s
  without any message from the server);
- a host without progress (no token; it cuts any call at 60 s; it calls wait_operation again on "not_yet");
- a host using tasks (a task-augmented wait_operation, tasks/get at the pollInterval the server gives, then
  tasks/result);
- adversarial agents: check_operation as fast as it can, start_watch repeated for one job, request_cancel and
  start_watch again (then a person cancels, and it starts again), submit_job twice with one body.

Every provider request the simulator saw is held against the plan: the schedule the contract and the provider's
answers allow (a hint, a Retry-After, the contract's least delay), computed from the script, not from pollwarden.
The full mode runs the server with its real timings (10 s heartbeat, 45 s cap without a token); `--quick` shortens
them through the server's environment overrides and the job's delays (the smoke test's mode). It writes the
"Measures" section of docs/agents.md and the three hosts' transcripts under docs/transcripts/.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from mcp.types import CallToolResult, TextContent

from bench.agents_wire import Recorder, raw, recorded_session
from mcp import ClientSession
from pollwarden.mcp_server.base import HEARTBEAT_ENV, WAIT_WITHOUT_PROGRESS_ENV
from pollwarden.simulator import Simulator, Step, contract_text

DOC = Path("docs/agents.md")
TRANSCRIPTS = Path("docs/transcripts")
HEADING = "## Measures"
HOST_CUT_SECONDS = 60.0
"""Where hosts stop a tool call: after 60 s of silence (those that reset on progress), or 60 s in all."""
EARLY_TOLERANCE = 0.01
"""A request counts as early only if it came more than 10 ms before the plan allowed (stored times are rounded)."""


@dataclass(frozen=True)
class Timings:
    hint: float
    """The provider's poll_after_seconds while running, and the contract's base and max delay."""
    retry_after: int
    env: dict[str, str]
    heartbeat: float
    cap: float
    loop_seconds: float


FULL = Timings(hint=10.0, retry_after=20, env={}, heartbeat=10.0, cap=45.0, loop_seconds=30.0)
QUICK = Timings(
    hint=0.4,
    retry_after=1,
    env={HEARTBEAT_ENV: "0.2", WAIT_WITHOUT_PROGRESS_ENV: "1.5"},
    heartbeat=0.2,
    cap=1.5,
    loop_seconds=2.0,
)


def script(t: Timings) -> list[Step]:
    """About 60 s in the full mode: polls at 0, 10, 20 (503, Retry-After 20), 40, 50, and 60 s (succeeded)."""
    running = Step(body={"job_id": "{job_id}", "state": "running", "poll_after_seconds": t.hint}, times=2)
    busy = Step(status=503, body={"error": "busy"}, headers={"Retry-After": str(t.retry_after)})
    done = Step(body={"job_id": "{job_id}", "state": "succeeded", "result_url": "/results/{job_id}"})
    return [running, busy, running, done]


def plan(steps: Sequence[Step], base_delay: float) -> list[float]:
    """The least gap the schedule allows before each planned request (0 before the first), from the script.

    After an answer with Retry-After: that many seconds (it is a floor over the backoff). After a poll hint: the
    hint (a valid one replaces the backoff). Otherwise half the contract's delay (bounded jitter keeps half; the
    contracts here have base_delay = max_delay)."""
    gaps = [0.0]
    answers = [step for step in steps[:-1] for _ in range(step.times)]
    for step in answers:
        retry_after = step.headers.get("Retry-After")
        hint = step.body.get("poll_after_seconds") if isinstance(step.body, dict) else None
        if retry_after is not None:
            gaps.append(max(float(retry_after), base_delay / 2))
        elif isinstance(hint, int | float):
            gaps.append(float(hint))
        else:
            gaps.append(base_delay / 2)
    return gaps


@dataclass(frozen=True)
class Against:
    """Provider requests held against the plan: how many were made, how many the plan allows in the same time,
    and how many came sooner than it allows."""

    made: int
    planned: int
    early: int

    @property
    def beyond(self) -> int:
        return self.early + max(0, self.made - self.planned)


def against_plan(sim: Simulator, job_id: str, gaps: Sequence[float], until: float) -> Against:
    """The job's status requests (as the simulator saw them) against the plan, up to `until` (time.time())."""
    times = [r.at for r in sim.requests(job_id) if r.method == "GET" and r.path.startswith("/jobs/")]
    early = sum(
        1
        for i in range(1, len(times))
        if times[i] - times[i - 1] < (gaps[i] if i < len(gaps) else 0.0) - EARLY_TOLERANCE
    )
    allowed, at = 0, 0.0
    for gap in gaps:  # each planned request at its earliest, from the first one the provider saw
        at += gap
        if times and times[0] + at > until:
            break
        allowed += 1
    return Against(len(times), allowed if times else 0, early)


@dataclass(frozen=True)
class HostResult:
    host: str
    finished: bool
    outcome: str
    tool_calls: int
    requests: int
    silence: float
    silence_in: str
    provider: Against
    cut: int
    seconds: float
    notes: int
    detail: str
    """What this host's calls looked like (each wait's length, the tasks/get that found nothing new)."""


@dataclass(frozen=True)
class AgentResult:
    agent: str
    calls: int
    provider: Against
    detail: str
    function: str


@dataclass
class Bench:
    sim: Simulator
    root: Path
    timings: Timings
    transcripts: Path | None

    def contracts(self) -> Path:
        directory = self.root / "contracts"
        if not directory.exists():
            directory.mkdir(parents=True)
            delay = f"{self.timings.hint:g}s"
            extra = (
                f'\n[cancel]\nurl = "{self.sim.url}/jobs/{{job_id}}/cancel"\n'
                f'\n[submit]\nurl = "{self.sim.url}/jobs"\nidempotency_header = "Idempotency-Key"\njob_id = "job_id"\n'
            )
            text = contract_text(
                self.sim.url, base_delay=delay, max_delay=delay, deadline="5m", max_requests=12, extra=extra
            )
            (directory / "exports.toml").write_text(text, encoding="utf-8")
        return directory

    def session(self, name: str) -> AbstractAsyncContextManager[tuple[ClientSession, Recorder]]:
        home = self.root / name
        return recorded_session(self.contracts(), home, self.root / f"{name}.stderr", env=self.timings.env)

    def job(self, job_id: str) -> list[float]:
        steps = script(self.timings)
        self.sim.add_job(job_id, steps)
        return plan(steps, self.timings.hint)

    def keep(self, name: str, recorder: Recorder) -> None:
        if self.transcripts is not None:
            recorder.write(self.transcripts / f"{name}.jsonl")


def data_of(result: CallToolResult) -> dict[str, Any]:
    if isinstance(result.structured_content, dict):
        return result.structured_content
    text = "".join(block.text for block in result.content if isinstance(block, TextContent))
    parsed = json.loads(text)
    return parsed if isinstance(parsed, dict) else {"value": parsed}


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    return data_of(await session.call_tool(tool, arguments))


async def _cut_after_silence(recorder: Recorder, began: float, scope: anyio.CancelScope, cut: list[int]) -> None:
    """A host that resets its timer on every server message: it cuts the call after HOST_CUT_SECONDS quiet."""
    while True:
        quiet = recorder.now() - max(began, recorder.last_from_server())
        if quiet >= HOST_CUT_SECONDS:
            cut.append(1)
            scope.cancel()
            return
        await anyio.sleep(min(1.0, HOST_CUT_SECONDS - quiet))


async def host_with_progress(bench: Bench) -> HostResult:
    job, name = "agents-progress", "with-progress"
    gaps = bench.job(job)
    async with bench.session(name) as (session, recorder):
        began = recorder.now()
        op = (await call(session, "start_watch", contract="exports", job_id=job))["operation_id"]
        notes: list[float] = []

        async def keep(progress: float, total: float | None, message: str | None) -> None:
            notes.append(progress)

        reply: dict[str, Any] = {"status": "cut by the host"}
        cut: list[int] = []
        async with anyio.create_task_group() as group:
            group.start_soon(_cut_after_silence, recorder, recorder.now(), group.cancel_scope, cut)
            arguments = {"operation_id": op, "max_wait_seconds": 300}
            reply = data_of(await session.call_tool("wait_operation", arguments, progress_callback=keep))
            group.cancel_scope.cancel()
    bench.keep(name, recorder)
    detail = f"one wait_operation of {reply.get('waited_seconds')} s, {len(notes)} progress notifications"
    return _host("with progress", reply, recorder, began, bench.sim, job, gaps, len(cut), len(notes), detail)


async def host_without_progress(bench: Bench) -> HostResult:
    job, name = "agents-silent", "without-progress"
    gaps = bench.job(job)
    async with bench.session(name) as (session, recorder):
        began = recorder.now()
        op = (await call(session, "start_watch", contract="exports", job_id=job))["operation_id"]
        reply: dict[str, Any] = {"status": "not_yet"}
        cut, waits = 0, []
        while reply.get("status") == "not_yet" and recorder.now() - began < 600:
            with anyio.move_on_after(HOST_CUT_SECONDS) as scope:  # this host cuts every call at 60 s
                reply = await call(session, "wait_operation", operation_id=op, max_wait_seconds=300)
                waits.append(f"{reply.get('waited_seconds')} s ({reply.get('status')})")
            if scope.cancelled_caught:
                cut += 1
                reply = {"status": "not_yet"}
    bench.keep(name, recorder)
    detail = f"wait_operation calls of {', '.join(waits)}"
    return _host("without progress", reply, recorder, began, bench.sim, job, gaps, cut, 0, detail)


async def host_with_tasks(bench: Bench) -> HostResult:
    job, name = "agents-tasks", "tasks"
    gaps = bench.job(job)
    async with bench.session(name) as (session, recorder):
        began = recorder.now()
        op = (await call(session, "start_watch", contract="exports", job_id=job))["operation_id"]
        params = {"name": "wait_operation", "arguments": {"operation_id": op, "max_wait_seconds": 300}}
        task = (await raw(session, "tools/call", {**params, "task": {"ttl": 300_000}}))["task"]
        gets, stale, seen = 0, 0, task.get("statusMessage")
        while task["status"] not in ("completed", "failed", "cancelled") and recorder.now() - began < 600:
            await anyio.sleep(float(task.get("pollInterval") or 5000) / 1000)  # as often as the server says
            task = await raw(session, "tasks/get", {"taskId": op})
            gets += 1
            stale += _checks(task.get("statusMessage")) == _checks(seen)  # no check made since the last look
            seen = task.get("statusMessage")
        result = await raw(session, "tasks/result", {"taskId": op})
        reply = result.get("structuredContent") or {"status": "no result"}
    bench.keep(name, recorder)
    detail = (
        f"{gets} tasks/get at the pollInterval given; {stale} of them came when the check was due but not yet made"
        " (the task still showed the previous check) and were told to come back in 100 ms"
    )
    return _host("tasks", reply, recorder, began, bench.sim, job, gaps, 0, 0, detail)


def _checks(message: object) -> str | None:
    """`checks 3/12` out of a task's status message."""
    found = re.search(r"checks \d+/\d+", message) if isinstance(message, str) else None
    return found.group(0) if found else None


def _host(
    name: str,
    reply: dict[str, Any],
    recorder: Recorder,
    began: float,
    sim: Simulator,
    job_id: str,
    gaps: Sequence[float],
    cut: int,
    notes: int,
    detail: str,
) -> HostResult:
    asked = recorder.requests(began)
    silence, where = recorder.longest_silence(began)
    return HostResult(
        host=name,
        finished=reply.get("status") == "succeeded",
        outcome=str(reply.get("status")),
        tool_calls=sum(1 for m in asked if m.method == "tools/call"),
        requests=len(asked),
        silence=silence,
        silence_in=where,
        provider=against_plan(sim, job_id, gaps, time.time()),
        cut=cut,
        seconds=recorder.now() - began,
        notes=notes,
        detail=detail,
    )


async def check_loop(bench: Bench) -> AgentResult:
    job = "agents-loop"
    gaps = bench.job(job)
    async with bench.session("adv-check-loop") as (session, _):
        op = (await call(session, "start_watch", contract="exports", job_id=job))["operation_id"]
        calls, free = 0, 0
        ends = time.monotonic() + bench.timings.loop_seconds
        while time.monotonic() < ends:
            reply = await call(session, "check_operation", operation_id=op)
            calls += 1
            free += reply.get("status") == "not_yet"
    detail = (
        f"{calls} check_operation calls in {bench.timings.loop_seconds:g} s; {free} answered not_yet from the store"
    )
    return AgentResult(
        "check_operation in a loop",
        calls + 1,
        against_plan(bench.sim, job, gaps, time.time()),
        detail,
        function="check_loop",
    )


async def repeat_start(bench: Bench) -> AgentResult:
    job = "agents-repeat"
    gaps = bench.job(job)
    ids: set[str] = set()
    pairs = 0
    async with bench.session("adv-repeat-start") as (session, _):
        ends = time.monotonic() + bench.timings.loop_seconds
        while time.monotonic() < ends:  # start, look, start again: a re-run node, a forgetful loop
            started = await call(session, "start_watch", contract="exports", job_id=job)
            ids.add(str(started["operation_id"]))
            await call(session, "check_operation", operation_id=started["operation_id"])
            pairs += 1
    seconds = bench.timings.loop_seconds
    detail = f"{pairs} start_watch + check_operation pairs in {seconds:g} s, {len(ids)} operation(s) for the job"
    calls = 2 * pairs
    return AgentResult(
        "start_watch repeated", calls, against_plan(bench.sim, job, gaps, time.time()), detail, function="repeat_start"
    )


async def cancel_restart(bench: Bench) -> AgentResult:
    job, name = "agents-cancel", "adv-cancel-restart"
    gaps = bench.job(job)
    async with bench.session(name) as (session, _):
        op = (await call(session, "start_watch", contract="exports", job_id=job))["operation_id"]
        await call(session, "check_operation", operation_id=op)
        asked = await call(session, "request_cancel", operation_id=op, reason="the user changed the input")
        again = await call(session, "start_watch", contract="exports", job_id=job)  # restart while a person decides
        await call(
            session, "wait_operation", operation_id=str(again["operation_id"]), max_wait_seconds=bench.timings.cap
        )
        decision = asked["decision"]
        option = next(o["number"] for o in decision["options"] if o["kind"] == "cancel")
        person = [sys.executable, "-m", "pollwarden", "decide", decision["decision_id"], "--option", str(option)]
        environment = {**os.environ, "POLLWARDEN_HOME": str(bench.root / name)}
        decided = await anyio.to_thread.run_sync(
            lambda: subprocess.run([*person, "--by", "bench-person"], env=environment, capture_output=True, check=False)
        )
        restarted = await call(session, "start_watch", contract="exports", job_id=job)  # and restart once over
        checked = await call(session, "check_operation", operation_id=op)
    posts = len([r for r in bench.sim.requests(job) if r.method == "POST"])
    reason = checked.get("operation", {}).get("reason") or checked.get("reason")
    detail = (
        f"restart while asking gave the same operation: {again['operation_id'] == op}; a person cancelled (decide exit"
        f" {decided.returncode}), {posts} cancel request sent; start_watch after that: {restarted.get('status')!r},"
        f" reused={restarted.get('reused')} ({reason})"
    )
    return AgentResult(
        "request_cancel, start_watch again",
        7,
        against_plan(bench.sim, job, gaps, time.time()),
        detail,
        function="cancel_restart",
    )


async def submit_twice(bench: Bench) -> AgentResult:
    async with bench.session("adv-submit-twice") as (session, _):
        first = await call(session, "submit_job", contract="exports", body={"scenario": "happy", "ref": "r1"})
        second = await call(session, "submit_job", contract="exports", body={"ref": "r1", "scenario": "happy"})
    posts = [r for r in bench.sim.requests() if r.method == "POST" and r.path == "/jobs"]
    detail = (
        f"same operation: {first.get('operation_id') == second.get('operation_id')}; the second answered"
        f" already_submitted={second.get('submission', {}).get('already_submitted')}; submissions sent: {len(posts)}"
    )
    return AgentResult("submit_job twice, one body", 2, Against(len(posts), 1, 0), detail, function="submit_twice")


HOSTS = (host_with_progress, host_without_progress, host_with_tasks)
AGENTS = (check_loop, repeat_start, cancel_restart, submit_twice)


async def measure(timings: Timings, root: Path, transcripts: Path | None) -> tuple[list[HostResult], list[AgentResult]]:
    """Every host and agent at once, each with its own server process and home, on one simulator."""
    hosts: list[HostResult] = []
    agents: list[AgentResult] = []
    with Simulator() as sim:
        bench = Bench(sim, root, timings, transcripts)
        bench.contracts()

        async def host(fn: Callable[[Bench], Awaitable[HostResult]]) -> None:
            hosts.append(await fn(bench))

        async def agent(fn: Callable[[Bench], Awaitable[AgentResult]]) -> None:
            agents.append(await fn(bench))

        async with anyio.create_task_group() as group:
            for one in HOSTS:
                group.start_soon(host, one)
            for other in AGENTS:
                group.start_soon(agent, other)
    hosts.sort(key=lambda h: [f.__name__ for f in HOSTS].index(_FUNCTION[h.host]))
    agents.sort(key=lambda a: a.agent)
    return hosts, agents


_FUNCTION = {
    "with progress": "host_with_progress",
    "without progress": "host_without_progress",
    "tasks": "host_with_tasks",
}


GOAL_CALLS = 2
GOAL_SILENCE_WITH_TOKEN = 15.0
GOAL_SILENCE_WITHOUT = 50.0


def verdicts(hosts: Sequence[HostResult], agents: Sequence[AgentResult], timings: Timings) -> list[str]:
    """One line per goal of issue 14, saying plainly when it is not met."""
    lines: list[str] = []
    for h in hosts:
        # Every request of the tasks host answers at once: held to the stricter bound.
        bound = GOAL_SILENCE_WITHOUT if h.host == "without progress" else GOAL_SILENCE_WITH_TOKEN
        calls = "met" if h.tool_calls <= GOAL_CALLS else "NOT met"
        silence = "met" if h.silence < bound else "NOT met"
        lines.append(
            f"- **{h.host}**: {h.tool_calls} tool calls for the result (goal <= {GOAL_CALLS}: {calls}); longest"
            f" silence {h.silence:.1f} s in `{h.silence_in}` (goal < {bound:g} s: {silence}); provider requests"
            f" beyond the plan: {h.provider.beyond}; finished: {'yes' if h.finished else 'NO (' + h.outcome + ')'}."
            f" {h.detail[0].upper()}{h.detail[1:]}."
        )
        if h.host == "without progress" and h.tool_calls > GOAL_CALLS:
            lines.append(
                f"  The goal of {GOAL_CALLS} is not met here, and cannot be for a job longer than the cap: a wait"
                f" without a progress token answers by {timings.cap:g} s (so that a host that cuts a silent call at"
                f" about 60 s never does), so a job that runs T s costs start_watch plus ceil(T / {timings.cap:g})"
                " waits. Each extra call is free for the provider (no request before the next check is due). A"
                " host that sends a progress token, or uses tasks, gets the result in 2."
            )
    beyond = sum(a.provider.beyond for a in agents) + sum(h.provider.beyond for h in hosts)
    lines.append(
        f"- **provider requests beyond the plan, whatever the agent does**: {beyond} (goal 0:"
        f" {'met' if beyond == 0 else 'NOT met'})."
    )
    return lines


def _host_row(h: HostResult) -> list[str]:
    return [
        h.host,
        "yes" if h.finished else f"no ({h.outcome})",
        str(h.tool_calls),
        str(h.requests),
        f"{h.silence:.1f} s (`{h.silence_in}`)",
        str(h.notes) if h.host == "with progress" else "-",
        f"{h.provider.made} / {h.provider.planned}",
        str(h.provider.beyond),
        str(h.cut),
        f"{h.seconds:.1f} s",
    ]


HOST_COLUMNS = [
    "host",
    "finished",
    "tool calls",
    "requests (all)",
    "longest silence in one request",
    "progress notes",
    "provider requests / plan",
    "beyond plan",
    "calls cut by the host",
    "wall",
]
AGENT_COLUMNS = [
    "agent",
    "calls",
    "provider requests / allowed by the schedule",
    "early",
    "beyond plan",
    "what happened",
]


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [
        "| " + " | ".join(columns) + " |",
        "| " + " | ".join("---" for _ in columns) + " |",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def section(
    hosts: Sequence[HostResult],
    agents: Sequence[AgentResult],
    timings: Timings,
    command: str,
    load: tuple[float, float],
    transcripts: str,
) -> str:
    quick = timings is QUICK
    timing_words = (
        "the server's real timings (a heartbeat every 10 s, 45 s cap without a progress token; no override set), the"
        " provider's poll hint 10 s, a 503 with Retry-After 20 s: the job runs about 60 s"
        if not quick
        else f"shortened timings (heartbeat {timings.heartbeat:g} s, cap {timings.cap:g} s through the server's"
        f" environment overrides; poll hint {timings.hint:g} s, Retry-After {timings.retry_after} s)"
    )
    agent_rows = [
        [a.agent, str(a.calls), f"{a.provider.made} / {a.provider.planned}", str(a.provider.early),
         str(a.provider.beyond), a.detail]
        for a in agents
    ]  # fmt: skip
    return "\n".join(
        [
            HEADING,
            "",
            f"Written by `{command}` (`bench/agents_measure.py`, a benchmark, not a test) at"
            f" {datetime.now(UTC).isoformat(timespec='seconds').replace('+00:00', 'Z')}, on {os.cpu_count()} cores"
            f" shared with other work (load average {load[0]:.1f} at the start, {load[1]:.1f} at the end). Each host"
            " and agent is its own `pollwarden mcp` process over stdio with its own home, driven by the SDK's"
            " ClientSession (raw JSON-RPC for tasks), all at once against one loopback simulator; with"
            f" {timing_words}.",
            "",
            "The scripted job answers `running` with `poll_after_seconds` twice, then a 503 with Retry-After, then"
            " `running` twice, then `succeeded`: six status requests, each no sooner than the previous answer allows."
            " That is the plan every provider request is held against, computed from the script and the contract"
            " (a Retry-After is a floor, a valid hint replaces the backoff, otherwise half the contract's delay),"
            ' from the requests the simulator saw, not from pollwarden\'s own records. "Early" is a request more than'
            f' {EARLY_TOLERANCE * 1000:g} ms sooner than its plan; "beyond plan" adds the requests above what the'
            " plan allows in the same time.",
            "",
            *_table(HOST_COLUMNS, [_host_row(h) for h in hosts]),
            "",
            "- *tool calls*: `tools/call` requests from start_watch to the result (start_watch included); *requests*:"
            " every JSON-RPC request the host sent for it, tasks/get and tasks/result too (not `initialize` nor"
            " `tools/list`, which the SDK's ClientSession sends once a session by itself).",
            "- *longest silence*: inside one request, the longest time between two messages on the wire (the request,"
            " each notification from the server, its answer). A host that resets its timer on progress cuts a call"
            f" after {HOST_CUT_SECONDS:g} s of it; the host without progress cuts any call at {HOST_CUT_SECONDS:g} s.",
            f"- transcripts: {transcripts} (one JSON-RPC message a line: `t` seconds since the session began, `dir`,"
            " `kind`, the `message` as it crossed the pipe).",
            "",
            *_table(AGENT_COLUMNS, agent_rows),
            "",
            "Against issue 14's goals:",
            "",
            *verdicts(hosts, agents, timings),
            "",
            "The hosts are played, not run: a host that cuts a call after 60 s of silence (as many do unless the"
            " call reports progress) and one that cuts every call at 60 s, as issue 14 describes them. What the"
            " server sends them is real: the transcripts hold every JSON-RPC message of the session, as the SDK's stdio"
            " transport read it from the server's stdout or was given it for the server's stdin (parsed, so"
            " re-serialised with its keys sorted), one a line.",
            "",
        ]
    )


def write_section(path: Path, text: str) -> None:
    """Replace this benchmark's section of `path` (up to the next `## ` heading), or add it; keep the rest."""
    old = path.read_text(encoding="utf-8") if path.exists() else "# Agents\n"
    start = old.find(HEADING + "\n")
    if start < 0:
        path.write_text(old.rstrip("\n") + "\n\n" + text, encoding="utf-8")
        return
    following = old.find("\n## ", start + len(HEADING))
    rest = "" if following < 0 else old[following + 1 :]
    path.write_text(old[:start] + text + ("\n" + rest if rest else ""), encoding="utf-8")


def run(timings: Timings, transcripts: Path | None) -> tuple[list[HostResult], list[AgentResult], tuple[float, float]]:
    with tempfile.TemporaryDirectory(prefix="pollwarden-agents-") as scratch:
        start_load = os.getloadavg()[0]
        hosts, agents = anyio.run(measure, timings, Path(scratch), transcripts)
        return hosts, agents, (start_load, os.getloadavg()[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agents_measure", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shortened timings (seconds, not minutes): the smoke mode")
    parser.add_argument("--out", type=Path, default=DOC, help=f"markdown file to write the section of (default {DOC})")
    parser.add_argument("--transcripts", type=Path, default=TRANSCRIPTS, help=f"directory (default {TRANSCRIPTS})")
    args = parser.parse_args(argv)
    timings = QUICK if args.quick else FULL
    hosts, agents, load = run(timings, args.transcripts)
    command = " ".join(["python -m bench.agents_measure", *(argv if argv is not None else sys.argv[1:])]).strip()
    try:
        shown = args.transcripts.resolve().relative_to(args.out.resolve().parent)
    except ValueError:
        shown = args.transcripts
    links = ", ".join(f"[{n}]({shown}/{n}.jsonl)" for n in ("with-progress", "without-progress", "tasks"))
    text = section(hosts, agents, timings, command, load, links)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_section(args.out, text)
    print(f"wrote the {HEADING[3:]!r} section of {args.out} and the transcripts in {args.transcripts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
