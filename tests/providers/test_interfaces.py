"""Shipped contracts through the worker fleet and through MCP, not only `watch` (issue 11, "Done when").

The bodies are the ones the per-provider modules cite (test_openai_batch.py, test_replicate_prediction.py,
test_github_actions_run.py); the imitation is the same.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.mcp.support import mcp_agent, run

from . import test_anthropic_message_batch as an
from . import test_github_actions_run as gh
from . import test_openai_batch as oa
from . import test_replicate_prediction as rp
from .imitation import Imitation, JSONValue, anthropic, github, ok, openai, replicate
from .support import assert_no_secret, enqueue, fetch_result, record_of, run_worker_until_final, tuned


def test_worker_watches_openai_batch_and_github_runs(tmp_path: Path, home: Path) -> None:
    with Imitation(openai(oa.KEY)) as batches, Imitation(github(gh.TOKEN, repo=gh.REPO)) as runs:
        batches.script("batch_abc123", ok(oa.VALIDATING), ok(oa.COMPLETED))
        batches.file("/v1/files/file-cvaTdG/content", oa.OUTPUT_JSONL)
        runs.script(gh.RUN, gh.run("in_progress", None), gh.run("completed", "failure"))
        openai_contract = tuned(tmp_path / "c", "openai-batch")
        github_contract = tuned(tmp_path / "c", "github-actions-run", vars={"repo": gh.REPO})
        env = {**oa.ENV, **gh.ENV}
        queued = enqueue(openai_contract, "batch_abc123", base_url=batches.url, home=home, env=env, operation="w-batch")
        assert queued.code == 0, queued.stderr
        queued = enqueue(github_contract, gh.RUN, base_url=runs.url, home=home, env=env, operation="w-run")
        assert queued.code == 0, queued.stderr

        log = run_worker_until_final(home, env, ["w-batch", "w-run"])

        batch = record_of(home, "w-batch")
        assert (batch["phase"], batch["result"]) == ("succeeded", "file-cvaTdG"), batch
        assert batch["status_requests_used"] == batches.status_requests("batch_abc123") == 2
        ci = record_of(home, "w-run")
        assert (ci["phase"], ci["reason"]) == ("stopped", "job_failed"), ci
        assert all(s.headers["x-github-api-version"] == "2022-11-28" for s in runs.seen(gh.RUN))

        out = tmp_path / "out.jsonl"
        fetched = fetch_result("w-batch", out, home=home, env=env)
        assert fetched.code == 0, fetched.stderr
        assert out.read_bytes() == oa.OUTPUT_JSONL
        assert_no_secret(oa.KEY, log, fetched.stdout, fetched.stderr)
        assert_no_secret(gh.TOKEN, log)


def test_mcp_agent_watches_replicate_and_openai(tmp_path: Path) -> None:
    """An MCP contracts directory names shipped contracts with their vars; the secrets stay in the server."""
    home, contracts = tmp_path / "home", tmp_path / "contracts"
    with Imitation(replicate(rp.TOKEN)) as predictions, Imitation(openai(oa.KEY)) as batches:
        predictions.script(rp.ID, ok(rp.STARTING), ok(rp.SUCCEEDED))
        batches.script("batch_abc123", ok(oa.ALL_FAILED))
        tuned(contracts, "replicate-prediction", vars={"base_url": predictions.url})
        tuned(contracts, "openai-batch", vars={"base_url": batches.url})

        async def body() -> None:
            async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env={**rp.ENV, **oa.ENV}) as agent:
                started = await agent.call("start_watch", contract="replicate-prediction", job_id=rp.ID)
                assert started.ok, started.text
                done = await agent.call(
                    "wait_operation", operation_id=started.data["operation_id"], max_wait_seconds=30
                )
                assert done.ok, done.text
                assert done.data["status"] == "succeeded"
                assert done.data["result"] == rp.SUCCEEDED["output"]

                started = await agent.call("start_watch", contract="openai-batch", job_id="batch_abc123")
                assert started.ok, started.text
                ended = await agent.call(
                    "wait_operation", operation_id=started.data["operation_id"], max_wait_seconds=30
                )
                assert ended.data["status"] == "stopped", ended.text
                assert "job_failed" in json.dumps(ended.data)
                for _, _, reply in agent.replies:
                    assert_no_secret(rp.TOKEN, reply.text)
                    assert_no_secret(oa.KEY, reply.text)

        run(body)
        assert predictions.status_requests(rp.ID) == 2
        assert batches.status_requests("batch_abc123") == 1


def test_mcp_agent_fetches_the_finished_part_of_a_cancelled_batch(tmp_path: Path) -> None:
    """The partial result is the same on every interface: the agent reads it in the stop, and `fetch_result`
    downloads it, saying what part it is (the provider's counts), as `pollwarden fetch-result` does."""
    home, contracts = tmp_path / "home", tmp_path / "contracts"
    with Imitation(anthropic(an.KEY)) as batches:
        ended = an.batch("ended", cancel=True, origin=batches.url, succeeded=40, canceled=60)
        batches.script(an.ID, an.batch("canceling", cancel=True), ended)
        batches.file(f"/v1/messages/batches/{an.ID}/results", an.RESULTS, content_type="application/binary")
        tuned(contracts, "anthropic-message-batch", vars={"base_url": batches.url})
        counts = {"processing": 0, "succeeded": 40, "errored": 0, "canceled": 60, "expired": 0}

        async def body() -> None:
            async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env=an.ENV) as agent:
                started = await agent.call("start_watch", contract="anthropic-message-batch", job_id=an.ID)
                assert started.ok, started.text
                operation = started.data["operation_id"]
                done = await agent.call("wait_operation", operation_id=operation, max_wait_seconds=30)
                assert done.data["status"] == "stopped" and done.data["reason"] == "job_cancelled", done.text
                assert done.data["operation"]["partial"] is True
                assert done.data["operation"]["counts"] == counts
                assert "fetch_result(operation_id) retrieves" in done.data["message"]
                fetched = await agent.call("fetch_result", operation_id=operation)
                assert fetched.ok, fetched.text
                assert fetched.data["text"] == an.RESULTS.decode()
                assert (fetched.data["partial"], fetched.data["ended"]) == (True, "job_cancelled")
                assert fetched.data["counts"] == counts
                for _, _, reply in agent.replies:
                    assert_no_secret(an.KEY, reply.text)

        run(body)
        assert len(batches.downloads(f"/v1/messages/batches/{an.ID}/results")) == 1


def test_worker_keeps_the_finished_part_of_an_expired_batch(tmp_path: Path, home: Path) -> None:
    with Imitation(openai(oa.KEY)) as batches:
        counts: dict[str, JSONValue] = {"total": 100, "completed": 60, "failed": 0}
        expired = ok({**oa.VALIDATING, "status": "expired", "output_file_id": "file-part9", "request_counts": counts})
        batches.script("batch_abc123", ok(oa.VALIDATING), expired)
        batches.file("/v1/files/file-part9/content", oa.OUTPUT_JSONL)
        contract = tuned(tmp_path / "c", "openai-batch")
        queued = enqueue(contract, "batch_abc123", base_url=batches.url, home=home, env=oa.ENV, operation="w-part")
        assert queued.code == 0, queued.stderr
        run_worker_until_final(home, oa.ENV, ["w-part"])
        record = record_of(home, "w-part")
        assert (record["reason"], record["result"], record["counts"]) == ("job_expired", "file-part9", counts)
        out = tmp_path / "part.jsonl"
        fetched = fetch_result("w-part", out, home=home, env=oa.ENV)
        assert fetched.code == 0, fetched.stderr
        assert out.read_bytes() == oa.OUTPUT_JSONL and "a partial result" in fetched.stdout
