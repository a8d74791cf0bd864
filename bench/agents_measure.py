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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
from mcp.types import CallToolResult, TextContent

from bench.agents_figures import (
    EARLY_TOLERANCE,
    FULL,
    HEADING,
    HOST_CUT_SECONDS,
    QUICK,
    Against,
    AgentResult,
    HostResult,
    Timings,
    section,
    write_section,
)
from bench.agents_wire import Recorder, Spawn, fresh, raw, recorded_session
from mcp import ClientSession
from pollwarden.simulator import Simulator, Step, contract_text

DOC = Path("docs/agents.md")
TRANSCRIPTS = Path("docs/transcripts")


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


@dataclass
class Bench:
    sim: Simulator
    root: Path
    timings: Timings
    transcripts: Path | None
    spawn: Spawn = fresh

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
        return recorded_session(
            self.contracts(), home, self.root / f"{name}.stderr", env=self.timings.env, spawn=self.spawn
        )

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
    detail = f"its one wait_operation lasted {reply.get('waited_seconds')} s, with {len(notes)} progress notifications"
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
    detail = f"its wait_operation calls lasted {', '.join(waits)}"
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
        f"it sent {gets} tasks/get, each at the pollInterval given; {stale} of them came when the check was due but"
        " not yet made (the task still showed the previous check) and were told to come back in 100 ms"
    )
    return replace(_host("tasks", reply, recorder, began, bench.sim, job, gaps, 0, 0, detail), stale_gets=stale)


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
        environment = {**os.environ, "POLLWARDEN_HOME": str(bench.root / name)}
        words = ["decide", decision["decision_id"], "--option", str(option), "--by", "bench-person"]
        person = [sys.executable, *bench.spawn(words, environment)]
        decided = await anyio.to_thread.run_sync(
            lambda: subprocess.run(person, env=environment, capture_output=True, check=False)
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


async def measure(timings: Timings, root: Path, transcripts: Path | None, spawn: Spawn = fresh) -> Measured:
    """Every host and agent at once, each with its own server process and home, on one simulator. One that fails
    is reported as a failure (its figures are missing), and the others still finish."""
    hosts: dict[str, HostResult] = {}
    agents: dict[str, AgentResult] = {}
    failures: list[str] = []
    with Simulator() as sim:
        bench = Bench(sim, root, timings, transcripts, spawn)
        bench.contracts()

        async def host(fn: Callable[[Bench], Awaitable[HostResult]]) -> None:
            try:
                hosts[fn.__name__] = await fn(bench)
            except Exception as exc:
                failures.append(f"{fn.__name__}: {type(exc).__name__}: {str(exc)[:300]}")

        async def agent(fn: Callable[[Bench], Awaitable[AgentResult]]) -> None:
            try:
                agents[fn.__name__] = await fn(bench)
            except Exception as exc:
                failures.append(f"{fn.__name__}: {type(exc).__name__}: {str(exc)[:300]}")

        async with anyio.create_task_group() as group:
            for one in HOSTS:
                group.start_soon(host, one)
            for other in AGENTS:
                group.start_soon(agent, other)
    return Measured(
        [hosts[f.__name__] for f in HOSTS if f.__name__ in hosts],
        [agents[f.__name__] for f in AGENTS if f.__name__ in agents],
        failures,
        (0.0, 0.0),
    )


@dataclass(frozen=True)
class Measured:
    hosts: list[HostResult]
    agents: list[AgentResult]
    failures: list[str]
    load: tuple[float, float]
    """The one-minute load average when the run began and when it ended."""


def run(timings: Timings, transcripts: Path | None, spawn: Spawn = fresh) -> Measured:
    with tempfile.TemporaryDirectory(prefix="pollwarden-agents-") as scratch:
        start_load = os.getloadavg()[0]
        measured = anyio.run(measure, timings, Path(scratch), transcripts, spawn)
        return replace(measured, load=(start_load, os.getloadavg()[0]))


def timing_words(timings: Timings) -> str:
    if timings is not QUICK:
        return (
            f"the server's real timings (a heartbeat every {timings.heartbeat:g} s, a {timings.cap:g} s cap without a"
            f" progress token; no override set), the provider's poll hint {timings.hint:g} s, a 503 with Retry-After"
            f" {timings.retry_after} s: the job runs about 60 s"
        )
    return (
        f"shortened timings (heartbeat {timings.heartbeat:g} s, cap {timings.cap:g} s through the server's environment"
        f" overrides; poll hint {timings.hint:g} s, Retry-After {timings.retry_after} s)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agents_measure", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shortened timings (seconds, not minutes): the smoke mode")
    parser.add_argument("--out", type=Path, default=DOC, help=f"markdown file to write the section of (default {DOC})")
    parser.add_argument("--transcripts", type=Path, default=TRANSCRIPTS, help=f"directory (default {TRANSCRIPTS})")
    args = parser.parse_args(argv)
    timings = QUICK if args.quick else FULL
    measured = run(timings, args.transcripts)
    command = " ".join(["python -m bench.agents_measure", *(argv if argv is not None else sys.argv[1:])]).strip()
    try:
        shown = args.transcripts.resolve().relative_to(args.out.resolve().parent)
    except ValueError:
        shown = args.transcripts
    links = ", ".join(f"[{n}]({shown}/{n}.jsonl)" for n in ("with-progress", "without-progress", "tasks"))
    text = section(
        measured.hosts,
        measured.agents,
        measured.failures,
        timing_words(timings),
        timings.cap,
        command,
        measured.load,
        links,
    )
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_section(args.out, text)
    print(f"wrote the {HEADING[3:]!r} section of {args.out} and the transcripts in {args.transcripts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
