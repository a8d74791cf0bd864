"""An MCP contracts directory that names a shipped contract (`use =`), and start_watch(status_url=)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.loopback import provider

from .support import mcp_agent, run

TOKEN = "glpat-mcp-test-token-456"


def test_a_use_file_is_served_and_status_urls_keep_to_the_origin(tmp_path: Path) -> None:
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    contracts.mkdir()

    with provider() as gitlab:
        (contracts / "gitlab.toml").write_text(
            f'use = "gitlab-pipeline"\nname = "ci"\n[vars]\nbase_url = "{gitlab.url}"\nproject = "42"\n'
            '[schedule]\nbase_delay = "50ms"\nmax_delay = "100ms"\n',
            encoding="utf-8",
        )
        (contracts / "ops.toml").write_text(
            f'name = "ops"\nstatus_url = "{gitlab.url}/v1/{{job_id:path}}"\nstatus_url_handles = true\n'
            '[states]\npending = ["running"]\nsuccess = ["succeeded"]\nfailure = ["failed"]\n'
            '[fields]\nstate = "status"\nresult = "status"\n',
            encoding="utf-8",
        )
        gitlab.answer("/op/1?api-version=2", (200, {"status": "succeeded"}))
        path = "/api/v4/projects/42/pipelines/7"
        gitlab.answer(path, (200, {"status": "running"}), (200, {"status": "success", "web_url": f"{gitlab.url}/p/7"}))

        async def body() -> None:
            async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env={"GITLAB_TOKEN": TOKEN}) as agent:
                started = await agent.call("start_watch", contract="ci", job_id="7")
                assert started.ok, started.text
                done = await agent.call(
                    "wait_operation", operation_id=started.data["operation_id"], max_wait_seconds=30
                )
                assert done.ok and done.data["status"] == "succeeded", done.text
                assert done.data["result"] == f"{gitlab.url}/p/7"
                # gitlab-pipeline takes no status URL; neither a URL elsewhere nor a bad path id creates anything
                refused = await agent.call("start_watch", contract="ci", status_url=f"{gitlab.url}/x")
                assert refused.error == "invalid_argument" and "status_url" in refused.text, refused.text
                bare = await agent.call("start_watch", contract="ci")
                assert bare.error == "invalid_argument", bare.text
                off = await agent.call("start_watch", contract="ops", status_url="http://evil.example/op/1")
                assert off.error == "invalid_argument" and "is not on" in off.text, off.text
                dots = await agent.call("start_watch", contract="ops", job_id="a/../b")
                assert dots.error == "invalid_argument" and "path segment" in dots.text, dots.text
                listing = await agent.call("list_operations")
                assert len(listing.data["operations"]) == 1
                url = f"{gitlab.url}/op/1?api-version=2"
                handled = await agent.call("start_watch", contract="ops", status_url=url)
                assert handled.ok and handled.data["job_id"] == url, handled.text
                ended = await agent.call(
                    "wait_operation", operation_id=handled.data["operation_id"], max_wait_seconds=30
                )
                assert ended.data["status"] == "succeeded", ended.text
            for _, _, reply in agent.replies:
                assert TOKEN not in reply.text

        run(body)
        assert [seen.headers["private-token"] for seen in gitlab.requests(path)] == [TOKEN, TOKEN]
        assert len(gitlab.requests("/op/1?api-version=2")) == 1 and len(gitlab.seen) == 3


AZURE_KEY = "azure-mcp-test-key-789"


def test_an_azure_operation_location_is_watched_by_its_status_url(tmp_path: Path) -> None:
    """The shipped azure-operation contract: the agent hands over the Operation-Location a submit answered with;
    the key goes in Ocp-Apim-Subscription-Key to that origin only, and never reaches the agent."""
    contracts, home = tmp_path / "contracts", tmp_path / "home"
    contracts.mkdir()

    with provider() as azure:
        (contracts / "azure.toml").write_text(
            f'use = "azure-operation"\nname = "layout"\n[vars]\nbase_url = "{azure.url}"\n'
            '[schedule]\nfirst_check = "50ms"\nbase_delay = "50ms"\nmax_delay = "100ms"\n',
            encoding="utf-8",
        )
        path = "/documentintelligence/documentModels/prebuilt-layout/analyzeResults/r-1?api-version=2024-11-30"
        azure.answer(
            path.lower(),  # what is sent: Azure reads paths without case, so the contract folds them
            (200, {"status": "notStarted"}),
            (200, {"status": "running"}),
            (200, {"status": "succeeded", "analyzeResult": {"pages": 2, "content": "Invoice"}}),
        )
        url = azure.url + path

        async def body() -> None:
            async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env={"AZURE_API_KEY": AZURE_KEY}) as agent:
                started = await agent.call("start_watch", contract="layout", status_url=url)
                assert started.ok and started.data["job_id"] == url.lower(), started.text
                elsewhere = await agent.call("start_watch", contract="layout", status_url="https://evil.example" + path)
                assert elsewhere.error == "invalid_argument" and "is not on" in elsewhere.text, elsewhere.text
                op = started.data["operation_id"]
                done = await agent.call("wait_operation", operation_id=op, max_wait_seconds=30)
                assert done.ok and done.data["status"] == "succeeded", done.text
                assert done.data["result"] == {"pages": 2, "content": "Invoice"}
                assert done.data["operation"]["status_requests_used"] == 3
                fetched = await agent.call("fetch_result", operation_id=op)
                assert fetched.ok and json.loads(fetched.data["text"]) == {"pages": 2, "content": "Invoice"}
            for _, _, reply in agent.replies:
                assert AZURE_KEY not in reply.text

        run(body)
        seen = azure.requests(path.lower())
        assert [s.headers["ocp-apim-subscription-key"] for s in seen] == [AZURE_KEY] * 3
        assert len(azure.seen) == 3  # the result was the last answer's object: fetching it sent nothing
