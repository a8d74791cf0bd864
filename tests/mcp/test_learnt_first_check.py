"""The learnt first check through the MCP server (issue 26), a real client over stdio: a contract that learns, with
`MIN_ENDED` ended jobs in the home's store, gets the first check of a job an agent watches (`start_watch`) or
submits (`submit_job`) placed by that history; the agent is told when (`next_check_at`), the creating event records
it, `pollwarden why` replays it as made and `pollwarden story` tells it, and the server's waits send the first
request no sooner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio.to_thread

from pollwarden.core.durations import parse_rfc3339
from pollwarden.core.learnt import MIN_ENDED
from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator
from tests.learnt_history import ENDS_AT_ONCE, SUBMIT, first_sent, learn_history, learnt_contract, told

from .support import mcp_agent, run


async def _told(operation: str, home: Path, ended: int = MIN_ENDED) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`told`, from another terminal while the agent's server runs."""
    return await anyio.to_thread.run_sync(lambda: told(operation, home, ended=ended))


def test_an_agents_watch_and_submission_get_their_first_check_from_the_history(sim: Simulator, tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    contract = learnt_contract(contracts / "exports.toml", sim.url, extra=SUBMIT.format(base=sim.url))
    store = open_store(home)
    try:
        learn_history(store, contract)
    finally:
        store.close()
    sim.add_job("j-m", ENDS_AT_ONCE)

    async def body() -> None:
        async with mcp_agent(contracts, home, tmp_path / "stderr.txt") as agent:
            started = await agent.call("start_watch", contract="exports", job_id="j-m")
            assert started.ok, started.text
            op = started.data["operation_id"]
            placed, _ = await _told(op, home)
            assert started.data["next_check_at"] == placed["next_poll_at"]  # what the agent is told is the record
            assert started.data["delay_source"] == "learnt", started.text  # and that the history placed it
            for _ in range(10):  # each wait ends by its own bound; the job ends at its first check
                waited = await agent.call("wait_operation", operation_id=op, max_wait_seconds=30)
                assert waited.ok, waited.text
                if waited.data["status"] == "succeeded":
                    break
            assert waited.data["status"] == "succeeded", waited.text
            assert sim.request_count("j-m") == 1
            _, events = await _told(op, home)
            assert first_sent(events) >= parse_rfc3339(placed["next_poll_at"])

            submitted = await agent.call("submit_job", contract="exports", body={"scenario": "happy"})
            assert submitted.ok, submitted.text
            # Learnt from one job more: the watch above ended, and every process sharing the store counts it.
            placed, events = await _told(submitted.data["operation_id"], home, MIN_ENDED + 1)
            assert [e["kind"] for e in events if e["kind"] in ("created", "submitted")] == ["submitted"]
            assert submitted.data["next_check_at"] == placed["next_poll_at"]
            assert submitted.data["delay_source"] == "learnt", submitted.text

    run(body)
