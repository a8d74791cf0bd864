"""Issue 23: the MCP server reads a token command's token once, when a call first needs it, never at start.

It ran each served contract's token command twice before answering `initialize` (61 s to its first answer when
the command hung). The command here blocks on a FIFO until the test writes to it, and writes a line to a file
each time it starts, so the test sees exactly when and how often it runs, with no clock involved.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import anyio.to_thread

from pollwarden.simulator import Simulator, Step
from tests.conftest import token_command_auth
from tests.mcp.support import TOOLS, agent_contract, mcp_agent, run

TOKEN = "tok-LAZY-7f3a9c1e"


def _held_command(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A token command that records each start in `runs`, then waits for the test to write to `gate`."""
    runs, gate, script = tmp_path / "runs.txt", tmp_path / "gate", tmp_path / "token.py"
    os.mkfifo(gate)
    script.write_text(
        f"with open({str(runs)!r}, 'a') as f:\n"
        "    f.write('run\\n')\n"
        f"with open({str(gate)!r}) as g:\n"  # blocks until the test opens the FIFO to write
        "    g.read()\n"
        f"print({TOKEN!r})\n",
        encoding="utf-8",
    )
    return runs, gate, script


def _starts(runs: Path) -> int:
    return len(runs.read_text(encoding="utf-8").splitlines()) if runs.exists() else 0


def _release(gate: Path) -> None:
    with gate.open("w") as writer:  # the command's open returns, and its read ends when this closes
        writer.write("go")


def test_initialize_and_tools_list_answer_at_once_and_the_token_is_read_once_when_first_needed(tmp_path: Path) -> None:
    with Simulator(token=TOKEN) as sim:  # it checks each request's Authorization against the token
        _served_lazily(sim, tmp_path)


def _served_lazily(sim: Simulator, tmp_path: Path) -> None:
    sim.add_job("lazy-1", [Step(body={"state": "running"}, times=100)])
    runs, gate, script = _held_command(tmp_path)
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, agent=token_command_auth(script, ttl="10m"))

    async def body() -> None:
        # mcp_agent returns once `initialize` is answered: before, that waited on the command (twice).
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            listed = await agent.session.list_tools()
            assert {tool.name for tool in listed.tools} >= TOOLS
            assert _starts(runs) == 0  # nothing needed the token yet

            async with anyio.create_task_group() as calls:
                replies = []

                async def start() -> None:
                    replies.append(await agent.call("start_watch", contract="exports", job_id="lazy-1"))

                calls.start_soon(start)
                with anyio.fail_after(60):  # a guard against a hang only: the command starts at the call
                    while _starts(runs) == 0:
                        await anyio.sleep(0.02)
                # The command is held: the server still answers everything that does not need the token.
                assert {tool.name for tool in (await agent.session.list_tools()).tools} >= TOOLS
                assert replies == []
                await anyio.to_thread.run_sync(_release, gate)
            [started] = replies
            assert started.ok, started.text
            checked = await agent.call("check_operation", operation_id=started.data["operation_id"])
            assert checked.ok, checked.text
            again = await agent.call("start_watch", contract="exports", job_id="lazy-2")
            assert again.ok, again.text
            assert _starts(runs) == 1  # read once, then kept for its ttl
            assert all(TOKEN not in reply.text for _, _, reply in agent.replies)

    run(body)
    polls = [r for r in sim.requests("lazy-1") if r.method == "GET"]
    assert polls and all(r.auth_ok for r in polls)
