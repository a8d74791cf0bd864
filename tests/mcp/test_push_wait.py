"""An MCP wait woken by the provider (issue 27): a `wait_operation` pausing ten minutes for its next check
polls at once when a signed push reaches the receiver, through the store's bell (FIFOs on SQLite, LISTEN/NOTIFY
on PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from pollwarden.fleet.hooks import HooksServer, Receiver
from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator, Step
from pollwarden.store.owner import process_owner
from tests.e2e.test_push_cli import PUSH, SECRET, signed
from tests.loopback import post
from tests.store.conftest import create_database, drop_database

from .support import Note, agent_contract, mcp_agent, run


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The MCP server's environment for its store (none: the home's SQLite file); this process opens the same."""
    if request.param == "sqlite":
        yield {}
        return
    url = create_database(upgraded=True)
    monkeypatch.setenv("POLLWARDEN_DB", url)
    try:
        yield {"POLLWARDEN_DB": url}
    finally:
        drop_database(url)


def test_a_wait_operation_is_woken_by_a_signed_push(sim: Simulator, tmp_path: Path, database: dict[str, str]) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    agent_contract(contracts, sim.url, agent=PUSH, base_delay="10m", max_delay="10m", deadline="1h")
    sim.add_job("exp-3", [Step(body={"state": "running"}), Step(body={"state": "succeeded", "result_url": "/r/3"})])

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env=database or None) as agent:
            op = (await agent.call("start_watch", contract="exports", job_id="exp-3")).data["operation_id"]
            first = await agent.call("check_operation", operation_id=op)
            assert sim.request_count("exp-3") == 1, first.text
            store = open_store(home, keys="write")
            server = HooksServer(Receiver(store, owner=process_owner("hooks"), environ={"EXPORTS_HOOK": SECRET}))
            server.start()
            try:
                notes: list[Note] = []
                waited: dict[str, object] = {}

                async def wait() -> None:
                    reply = await agent.call_reporting("wait_operation", notes, operation_id=op, max_wait_seconds=300)
                    waited.update(reply.data)

                async def push_once_it_pauses() -> None:
                    while not notes:  # the wait's first look found nothing due: it pauses until the next check
                        await anyio.sleep(0.01)
                    status = await anyio.to_thread.run_sync(
                        lambda: post(f"{server.url}/hooks/exports", *signed("exp-3", "msg_mcp"))
                    )
                    assert status == 202

                with anyio.fail_after(120):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(wait)
                        tg.start_soon(push_once_it_pauses)
            finally:
                server.stop()
                store.close()
            assert waited["status"] == "succeeded", waited
            assert sim.request_count("exp-3") == 2

    run(body)
