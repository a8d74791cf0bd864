"""Measure the broker's promises against an agent with a shell (issue 22), with real OS users and real timings.

`python -m bench.broker_measure` (a benchmark, not a test; it needs root, as it creates the OS users the way the
isolation tests do: a service user running `pollwarden broker`, an agent user, an approver user) starts one
broker over a loopback provider that answers only to the credential, and plays, all at once, each agent through
its own `pollwarden mcp --connect` shim run as the agent user:

- **attempts**: the agent user's shell reads what the broker holds (home, database, keys, `--secrets`, the
  broker's `/proc/PID/environ` and memory; the secret searched in argv, its environment and every file it can
  read), and approves through the broker (`decide` with and without `--by`, `approve-call` of a real pending
  grant, `approve-session`, `revoke-session`, `console-login`) and around it (`decide`/`approve-call --home`);
  each that succeeds, or that changes the open decision or the pending grant, counts;
- **no token**: a per-call `check_operation` with no progress token while nobody approves: how long until it
  answers;
- **with a token**: the same with a progress token, a person approving 40 s in: the longest time between two
  messages of the call;
- **cut**: the host cuts a call at 60 s (`notifications/cancelled`), the person approves at 65 s, the next call;
- **results**: `start_watch` and `wait_operation` for a three-answer job, with and without a progress token:
  tool calls per result and provider requests beyond the three the job needs.

`--quick` shortens the server's timings through its environment overrides (the smoke test's mode). It writes the
"Measures through the broker" section of docs/agents.md.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import os
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.to_thread
from tests.isolation.users import (
    READ_PROBE,
    Broker,
    Place,
    Users,
    broker_args,
    lay_out,
    make_users,
    shim_agent,
    start_broker,
    why_not,
)
from tests.mcp.support import Agent, Note

from bench.agents_figures import write_section
from pollwarden.simulator import Simulator, Step

DOC = Path("docs/agents.md")
HEADING = "## Measures through the broker"
JOB_ANSWERS = 3
"""The results job answers running, running, succeeded: three requests, no more."""


@dataclass(frozen=True)
class Timings:
    cut: float
    """When the host cuts the call in the cut scenario (hosts cut a silent call at about 60 s)."""
    approve_after_cut: float
    approve_with_token: float
    overrides: dict[str, str] = field(default_factory=dict)
    """Environment overrides for the broker's server: none in the full mode."""
    forks: bool = False
    """The users' commands forked from a zygote of each (tests/isolation/users.py): the smoke's, for its CPU; the
    full measure starts each in a fresh interpreter, as a person's and an agent's commands start."""


FULL = Timings(cut=60.0, approve_after_cut=65.0, approve_with_token=40.0)
QUICK = Timings(
    cut=2.0,
    approve_after_cut=2.5,
    approve_with_token=1.0,
    overrides={"POLLWARDEN_MCP_HEARTBEAT_SECONDS": "0.2", "POLLWARDEN_MCP_WAIT_WITHOUT_PROGRESS_SECONDS": "1.5"},
    forks=True,
)


@dataclass
class Measured:
    attempts: dict[str, str] = field(default_factory=dict)
    """What the agent user tried -> what came of it ("refused: ..." or "SUCCEEDED: ...")."""
    no_token: tuple[float, str] = (0.0, "")
    """How long the call took, and what it answered."""
    with_token: tuple[float, int, str] = (0.0, 0, "")
    """The longest gap between two messages of the call, the progress notes, what it answered."""
    cut: dict[str, str] = field(default_factory=dict)
    results: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    """host -> (tool calls, provider requests beyond the job's three, status)."""
    failures: list[str] = field(default_factory=list)
    load: tuple[float, float] = (0.0, 0.0)

    def succeeded(self) -> list[str]:
        return [what for what, came in self.attempts.items() if not came.startswith("refused")]


@dataclass(frozen=True)
class Bench:
    users: Users
    place: Place
    broker: Broker
    provider: Simulator
    secret: str
    timings: Timings
    scratch: Path
    operations: dict[str, str] = field(default_factory=dict)
    """job -> the operation a scenario started for it, for another scenario to find."""

    async def operation(self, job: str) -> str:
        """The operation another scenario started for `job`, once it has."""
        with anyio.fail_after(120):
            while job not in self.operations:
                await anyio.sleep(0.05)
        return self.operations[job]

    async def as_user(self, user: str, *args: str) -> tuple[int, str, str]:
        ran = await anyio.to_thread.run_sync(lambda: self.users.run(user, *args, "--connect", str(self.place.socket)))
        return ran.returncode, ran.stdout, ran.stderr

    async def grants(self, *, every: bool = False) -> list[dict[str, object]]:
        code, out, err = await self.as_user(self.users.approver, "approvals", "--json", *(["--all"] if every else []))
        if code != 0:
            raise RuntimeError(f"approvals --json: {err.strip()}")
        listed: list[dict[str, object]] = json.loads(out)
        return listed

    async def grant_for(self, operation: str) -> str:
        """The pending call grant the operation's call is waiting on, once the broker wrote it."""
        with anyio.fail_after(120):
            while True:
                for grant in await self.grants():
                    if grant["scope"] == operation:
                        return str(grant["grant_id"])
                await anyio.sleep(0.2)

    @contextlib.asynccontextmanager
    async def agent(self, name: str) -> AsyncIterator[Agent]:
        async with shim_agent(self.users, self.place.socket, self.scratch / f"{name}.err") as agent:
            yield agent


async def start(agent: Agent, contract: str, job: str, **extra: object) -> str:
    started = await agent.call("start_watch", contract=contract, job_id=job, **extra)
    if not started.ok:
        raise RuntimeError(f"start_watch {job}: {started.text}")
    return str(started.data["operation_id"])


async def attempts(bench: Bench, measured: Measured) -> None:
    users, place = bench.users, bench.place
    async with bench.agent("attempts") as agent:
        op = await start(agent, "exports", "budget-1", max_requests=2)
        stopped = await agent.call("wait_operation", operation_id=op, max_wait_seconds=30)
        decision = str(stopped.data["decision"]["decision_id"])
    grant = await bench.grant_for(await bench.operation("notoken-1"))
    probe = (str(place.home), str(place.secrets), str(bench.broker.process.pid), bench.secret)
    read = await anyio.to_thread.run_sync(
        lambda: users.python_as(users.agent, READ_PROBE, *probe, str(place.root), "/tmp")
    )
    seen = json.loads(read.stdout)
    for what, came in seen["tried"].items():
        measured.attempts[f"read {what}"] = "SUCCEEDED: read" if came == "read" else f"refused: {came}"
    measured.attempts["find the secret in argv, its environment or a file"] = (
        f"SUCCEEDED: in {', '.join(seen['found'])}" if seen["found"] else "refused: found nowhere"
    )
    through = {
        "decide": ["decide", decision, "--option", "1"],
        "decide --by APPROVER": ["decide", decision, "--option", "1", "--by", users.approver],
        "approve-call (a pending grant)": ["approve-call", grant, "--by", users.approver],
        "approve-session": ["approve-session", "s0123456789"],
        "revoke-session": ["revoke-session", "s0123456789"],
        "console-login": ["console-login"],
    }
    for what, words in through.items():
        code, _, err = await bench.as_user(users.agent, *words)
        last = err.strip().splitlines()[-1] if err.strip() else ""
        measured.attempts[f"{what} through the broker"] = f"refused: exit {code}" if code else f"SUCCEEDED: {last}"
    home = ["--home", str(place.home), "--by", users.approver]
    around = {"decide": ["decide", decision, "--option", "1"], "approve-call": ["approve-call", grant]}
    for what, words in around.items():
        ran = await anyio.to_thread.run_sync(functools.partial(users.run, users.agent, *words, *home))
        measured.attempts[f"{what} --home around the broker"] = (
            f"refused: exit {ran.returncode}" if ran.returncode else "SUCCEEDED: exit 0"
        )
    code, out, _ = await bench.as_user(users.approver, "decisions", "--json")
    still_open = code == 0 and decision in out
    still_pending = grant in [g["grant_id"] for g in await bench.grants()]
    measured.attempts["leave the decision open and the grant pending"] = (
        "refused: both unchanged" if still_open and still_pending else "SUCCEEDED: one of them changed"
    )


async def no_token(bench: Bench, measured: Measured) -> None:
    async with bench.agent("no-token") as agent:
        op = bench.operations["notoken-1"] = await start(agent, "guarded", "notoken-1")
        began = time.monotonic()
        answer = await agent.call("check_operation", operation_id=op)
        measured.no_token = (time.monotonic() - began, str(answer.data.get("error") or answer.data.get("status")))


def longest_gap(began: float, notes: list[Note], ended: float) -> float:
    times = [began, *(note.at for note in notes), ended]
    return max(b - a for a, b in itertools.pairwise(times))


async def with_token(bench: Bench, measured: Measured) -> None:
    async with bench.agent("with-token") as agent:
        op = await start(agent, "guarded", "token-1")
        notes: list[Note] = []

        async def person() -> None:
            grant = await bench.grant_for(op)
            await anyio.sleep(max(0.0, began + bench.timings.approve_with_token - time.monotonic()))
            await bench.as_user(bench.users.approver, "approve-call", grant)

        began = time.monotonic()
        async with anyio.create_task_group() as group:
            group.start_soon(person)
            answer = await agent.call_reporting("check_operation", notes, operation_id=op)
        status = str(answer.data.get("status") or answer.data.get("error"))
        measured.with_token = (longest_gap(began, notes, time.monotonic()), len(notes), status)


async def cut(bench: Bench, measured: Measured) -> None:
    async with bench.agent("cut") as agent:
        op = await start(agent, "guarded", "cut-1")
        began = time.monotonic()
        notes: list[Note] = []
        with anyio.move_on_after(bench.timings.cut):  # the host gives up: the SDK sends notifications/cancelled
            await agent.call_reporting("check_operation", notes, operation_id=op)
        grant = await bench.grant_for(op)  # answers at once if the cut left it pending
        every = {g["grant_id"]: g["status"] for g in await bench.grants(every=True)}
        measured.cut["the grant after the cut"] = str(every.get(grant))
        await anyio.sleep(max(0.0, began + bench.timings.approve_after_cut - time.monotonic()))
        code, _, err = await bench.as_user(bench.users.approver, "approve-call", grant)
        measured.cut[f"approve-call at {bench.timings.approve_after_cut:g} s"] = (
            "exit 0" if code == 0 else f"exit {code}: {err.strip()}"
        )
        answer = await agent.call("check_operation", operation_id=op)
        measured.cut["the next call"] = str(answer.data.get("status") or answer.data.get("error"))
        measured.cut["provider requests"] = str(bench.provider.request_count("cut-1"))


async def results(bench: Bench, measured: Measured) -> None:
    async with bench.agent("results") as agent:
        hosts: tuple[tuple[str, str, list[Note] | None], ...] = (
            ("with progress", "res-p", []),
            ("without progress", "res-n", None),
        )
        for host, job, notes in hosts:
            op = await start(agent, "exports", job)
            calls, status = 1, "not_yet"
            while status == "not_yet" and calls < 20:
                answer = await agent.call_reporting("wait_operation", notes, operation_id=op, max_wait_seconds=300)
                calls, status = calls + 1, str(answer.data.get("status"))
            measured.results[host] = (calls, bench.provider.request_count(job) - JOB_ANSWERS, status)


SCENARIOS: tuple[Callable[[Bench, Measured], Awaitable[None]], ...] = (attempts, no_token, with_token, cut, results)


async def measure(bench: Bench) -> Measured:
    measured = Measured()

    async def one(scenario: Callable[[Bench, Measured], Awaitable[None]]) -> None:
        try:
            await scenario(bench, measured)
        except Exception as exc:
            measured.failures.append(f"{scenario.__name__}: {type(exc).__name__}: {str(exc)[:300]}")

    async with anyio.create_task_group() as group:
        for scenario in SCENARIOS:
            group.start_soon(one, scenario)
    return measured


def run(timings: Timings) -> Measured:
    reason = why_not()
    if reason is not None:
        raise SystemExit(f"python -m bench.broker_measure {reason}")
    secret = "pwsecret-" + secrets.token_hex(16)
    load = os.getloadavg()[0]
    with (
        Simulator(token=secret) as provider,
        contextlib.contextmanager(make_users)("pwm") as users,
        tempfile.TemporaryDirectory(prefix="pollwarden-broker-measure-") as scratch,
    ):
        users.forks = timings.forks
        running = [Step(body={"state": "running"})]
        provider.add_job("budget-1", running)
        for job in ("notoken-1", "token-1", "cut-1"):
            provider.add_job(job, [Step(body={"state": "succeeded", "result_url": f"/results/{job}"})])
        for job in ("res-p", "res-n"):
            provider.add_job(job, [*running * 2, Step(body={"state": "succeeded", "result_url": f"/results/{job}"})])
        place = lay_out(users, provider.url, secret, deadline="10m")  # the cut scenario runs past 65 s
        broker = start_broker(  # fresh: the attempts read the broker's own /proc entries
            users, broker_args(users, place), place.socket, place.home, fresh=True, **timings.overrides
        )
        try:
            measured = anyio.run(measure, Bench(users, place, broker, provider, secret, timings, Path(scratch)))
        finally:
            broker.stop()
    measured.load = (load, os.getloadavg()[0])
    return measured


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def section(measured: Measured, timings: Timings, command: str) -> str:
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cores = os.cpu_count() or 0
    mode = "the server's real timings (no override)" if not timings.overrides else "shortened timings"
    lines = [
        HEADING,
        "",
        f"Written by `{command}` (`bench/broker_measure.py`, a benchmark, not a test; as root, since it creates the"
        f" OS users) at {at}, on {cores} cores shared with other work (load average {measured.load[0]:.1f} at the"
        f" start, {measured.load[1]:.1f} at the end), with {mode}. One broker runs as its service user; each agent"
        " is its own `pollwarden mcp --connect` shim run as the agent user; the approver is a third user; every"
        " scenario runs at once against one loopback provider that answers only to the credential.",
        "",
    ]
    if measured.failures:
        lines += [f"- **FAILED**: {failure}" for failure in measured.failures] + [""]
    succeeded = measured.succeeded()
    lines += [
        f"**An agent user's attempts that succeeded: {len(succeeded)} of {len(measured.attempts)}**"
        f" (goal 0: {verdict(not succeeded and bool(measured.attempts))}).",
        "",
        "| the agent user tried | what came of it |",
        "| --- | --- |",
        *(f"| {what} | {came} |" for what, came in measured.attempts.items()),
        "",
    ]
    waited, answered = measured.no_token
    gap, notes, status = measured.with_token
    bound = (
        50.0 if not timings.overrides else float(timings.overrides["POLLWARDEN_MCP_WAIT_WITHOUT_PROGRESS_SECONDS"]) + 5
    )
    lines += [
        "| while a person is awaited (per-call approval) | measured | goal |",
        "| --- | --- | --- |",
        f"| no progress token: the call answered after | {waited:.1f} s (`{answered}`) | under {bound:g} s:"
        f" {verdict(0 < waited < bound)} |",
        f"| with a progress token: the longest time without a message | {gap:.1f} s ({notes} notes; approved at"
        f" {timings.approve_with_token:g} s, `{status}`) | under 15 s: {verdict(0 < gap < 15)} |",
        *(f"| host cut at {timings.cut:g} s: {what} | {came} | |" for what, came in measured.cut.items()),
        "",
        "| through the shim | tool calls per result | provider requests beyond the job's three | status |",
        "| --- | --- | --- | --- |",
        *(f"| {host} | {c} | {b} | {s} |" for host, (c, b, s) in measured.results.items()),
        "",
        "Goals: 2 tool calls per result (`start_watch`, one `wait_operation`), 0 requests beyond the plan, as"
        " stand-alone (see [Measures](#measures)). A job longer than the 45 s cap costs a call without a token per"
        " 45 s there and here alike.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.broker_measure", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shortened timings (seconds, not minutes): the smoke mode")
    parser.add_argument("--out", type=Path, default=DOC, help=f"markdown file to write the section of (default {DOC})")
    args = parser.parse_args(argv)
    timings = QUICK if args.quick else FULL
    measured = run(timings)
    command = " ".join(["python -m bench.broker_measure", *(argv if argv is not None else sys.argv[1:])]).strip()
    text = section(measured, timings, command)
    print(text)
    write_section(args.out, text, HEADING)
    print(f"wrote the {HEADING[3:]!r} section of {args.out}")
    return 1 if measured.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
