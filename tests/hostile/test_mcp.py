"""Every hostile answer through a real stdio MCP client: each hostile watch must end in a tool result, and the
same session must then watch a well-behaved job to success.

Three sessions, side by side on one home, share the table (a server per case would cost minutes; one session
for all of it spends ~17 s waiting on the slow cases' timeouts with a core idle). A case that breaks its
session (the call hangs past its bound, or the server goes away) is charged with it and a new session takes
the rest of that session's cases, so one broken case does not fail the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from pollwarden.core.record import OperationRecord
from pollwarden.home.operating import open_store
from tests.mcp.support import Agent, Reply, mcp_agent, run

from .cases import CASES, SECRETS, Case, good_script, write_contract
from .checks import Findings, all_bytes_under, outcome_of
from .server import HostileServer, Request

pytestmark = pytest.mark.slow

LANES = 3
CASE_SECONDS = 45.0  # both watches of one case; each needs a few seconds, a hang fails instead of stalling


@dataclass
class CaseRun:
    replies: list[Reply] = field(default_factory=list)  # start_watch, wait_operation, then the good job's two
    broke_session: str | None = None


@dataclass
class SessionRun:
    cases: dict[str, CaseRun]
    requests: dict[str, list[Request]]
    records: dict[str, OperationRecord]  # by job id
    logs: dict[str, bytes]
    stored: dict[str, bytes]


async def _watch(agent: Agent, contract: str, job: str, into: list[Reply]) -> None:
    started = await agent.call("start_watch", contract=contract, job_id=job)
    into.append(started)
    if started.ok:
        into.append(await agent.call("wait_operation", operation_id=started.data["operation_id"], max_wait_seconds=30))


def _contract_of(case: Case) -> str:
    return case.name if case.secret else "hostile"


def _run_sessions(cases: tuple[Case, ...], root: Path) -> SessionRun:
    contracts, home, logs = root / "contracts", root / "home", root / "logs"
    logs.mkdir()
    env = {s.env: s.value for s in SECRETS.values()}
    results = {case.name: CaseRun() for case in cases}
    for case in cases:
        case.prime()
    with HostileServer() as server:
        write_contract(contracts, server.url)
        write_contract(contracts, server.url, name="good")
        for case in cases:
            server.add(case.job, case.script)
            server.add(f"g-{case.name}", good_script(f"g-{case.name}"))
            if case.secret:
                write_contract(contracts, server.url, name=case.name, secret=case.secret)

        async def lane(lane: int, queue: list[Case]) -> None:
            sessions = 0
            while queue:
                sessions += 1
                try:
                    async with mcp_agent(contracts, home, logs / f"mcp-{lane}-{sessions}.log", env=env) as agent:
                        while queue:
                            case = queue[0]
                            into = results[case.name].replies
                            with anyio.fail_after(CASE_SECONDS):
                                await _watch(agent, _contract_of(case), case.job, into)
                                await _watch(agent, "good", f"g-{case.name}", into)
                            queue.pop(0)
                except Exception as exc:  # whatever broke the session is this case's finding
                    results[queue[0].name].broke_session = f"{type(exc).__name__}: {exc}"[:300]
                    queue.pop(0)

        async def body() -> None:
            async with anyio.create_task_group() as lanes:
                for n in range(LANES):
                    lanes.start_soon(lane, n, list(cases[n::LANES]))

        run(body)
        server.wait_idle(timeout=30)
        requests = {case.job: server.requests(case.job) for case in cases}
    store = open_store(home, keys="none")
    try:
        records = {s.record.job_id: s.record for s in store.all()}
    finally:
        store.close()
    return SessionRun(
        cases=results,
        requests=requests,
        records=records,
        logs={f"mcp server log {p.name}": p.read_bytes() for p in sorted(logs.iterdir())},
        stored={f"home/{name}": data for name, data in all_bytes_under(home).items()},
    )


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> SessionRun:
    return _run_sessions(CASES, tmp_path_factory.mktemp("mcp"))


def _outcome(findings: Findings, replies: list[Reply]) -> str:
    if not replies:
        return "never answered"
    final = replies[1] if len(replies) > 1 and replies[0].ok else replies[0]
    if final.error == "internal_error":
        findings.add(f"internal_error: {str(final.data.get('message', ''))[:200]}")
        return "internal_error"
    if not final.ok:
        # A named refusal (say, of a credential it will not send) is an answer; a crash mapped to a name is not.
        if final.error != "call_failed":
            return "refused"
        return f"tool error {final.error}: {str(final.data.get('message', ''))[:200]}"
    if final.data.get("status") not in {"succeeded", "stopped"}:
        return f"not ended (status {final.data.get('status')})"
    view: dict[str, Any] = final.data.get("operation") or {}
    return outcome_of(view.get("phase"), view.get("reason"))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_mcp(case: Case, sessions: SessionRun) -> None:
    findings = Findings(case)
    ran = sessions.cases[case.name]
    if ran.broke_session:
        findings.add(f"the session broke during this case: {ran.broke_session}")
    hostile, good = ran.replies[:2], ran.replies[2:]
    findings.outcome(_outcome(findings, hostile))
    if len(good) < 2 or good[1].data.get("result") != f"/results/g-{case.name}":
        shown = good[-1].text[:200] if good else "never asked"
        findings.add(f"the same session did not then watch a good job to success: {shown}")
    requests = sessions.requests[case.job]
    record = sessions.records.get(case.job)
    findings.counted(requests, record.status_requests_used if record else 0)
    findings.bounded(requests)
    if case.terminal:
        for label, data in sessions.logs.items():
            findings.terminal(label, data.decode(errors="replace"))
    replies = {f"{other} reply {n}": r.text.encode() for other, c in sessions.cases.items() for n, r in
               enumerate(c.replies)}  # fmt: skip
    findings.leaks(case.secret, replies | sessions.logs | sessions.stored)
    findings.done()
