"""Every shipped contract through the worker fleet and through MCP, in one run each (issue 11, "Done when").

Each provider's bodies, credentials and job ids are the ones its own module cites (test_NAME.py beside this
one); here one real worker, and one real MCP session, watch all eight lifecycles at once against their
imitations: pending, then the documented success, and the secret never in what a person or an agent sees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import run_cli
from tests.mcp.support import mcp_agent, run

from . import test_anthropic_message_batch as an
from . import test_aws_textract_analysis as tx
from . import test_azure_operation as az
from . import test_github_actions_run as gh
from . import test_gitlab_pipeline as gl
from . import test_google_operation as go
from . import test_openai_batch as oa
from . import test_replicate_prediction as rp
from .imitation import (
    Answer,
    Imitation,
    JSONValue,
    Profile,
    anthropic,
    azure,
    github,
    gitlab,
    google,
    ok,
    openai,
    replicate,
    textract,
)
from .support import assert_no_secret, record_of, run_worker_until_final, tuned


@dataclass(frozen=True)
class Case:
    contract: str
    profile: Callable[[], Profile]
    job: str  # the key the imitation scripts answers under (for Azure, the status URL's path)
    answers: tuple[Answer, ...]
    result: JSONValue
    secrets: tuple[str, ...]
    env: dict[str, str]
    vars: dict[str, str] = field(default_factory=dict)
    handle: bool = False  # watched by its status URL (`--status-url`), not a job id


CASES = (
    Case(
        "openai-batch", lambda: openai(oa.KEY), "batch_abc123", (ok(oa.VALIDATING), ok(oa.COMPLETED)),
        "file-cvaTdG", (oa.KEY,), oa.ENV,
    ),
    Case(
        "anthropic-message-batch", lambda: anthropic(an.KEY), an.ID,
        (an.batch("in_progress"), an.batch("ended", succeeded=95, errored=5)),
        f"https://api.anthropic.com/v1/messages/batches/{an.ID}/results", (an.KEY,), an.ENV,
    ),
    Case(
        "google-operation", lambda: google(go.TOKEN), go.NAME, (ok(go.PENDING), ok(go.DONE)), go.DATASET,
        (go.TOKEN,), go.ENV,
    ),
    Case(
        "github-actions-run", lambda: github(gh.TOKEN, repo=gh.REPO), gh.RUN,
        (gh.run("in_progress", None), gh.run("completed", "success")),
        f"https://github.com/{gh.REPO}/actions/runs/{gh.RUN}",
        (gh.TOKEN,), gh.ENV, {"repo": gh.REPO},
    ),
    Case(
        "replicate-prediction", lambda: replicate(rp.TOKEN), rp.ID, (ok(rp.STARTING), ok(rp.SUCCEEDED)),
        rp.SUCCEEDED["output"], (rp.TOKEN,), rp.ENV,
    ),
    Case(
        "azure-operation", lambda: azure(az.KEY), az.PATH,
        (ok(az.status("running")), ok(az.status("succeeded", analyzeResult=az.RESULT))), az.RESULT,
        (az.KEY,), az.ENV, handle=True,
    ),
    Case(
        "aws-textract-analysis", lambda: textract(tx.ACCESS, tx.SECRET, region=tx.REGION, session_token=tx.SESSION),
        tx.JOB, (ok(tx.IN_PROGRESS), ok(tx.SUCCEEDED)),
        {"pages": 3, "warnings": None, "model_version": "1.0", "more_blocks": True},
        (tx.SECRET, tx.SESSION), tx.ENV, {"region": tx.REGION},
    ),
    Case(
        "gitlab-pipeline", lambda: gitlab(gl.TOKEN, project=gl.PROJECT), gl.PIPELINE,
        (gl.pipeline("running"), gl.pipeline("success")), gl.WEB, (gl.TOKEN,), gl.ENV, {"project": gl.PROJECT},
    ),
)  # fmt: skip

ENV = {key: value for case in CASES for key, value in case.env.items()}


@contextmanager
def imitations() -> Iterator[dict[str, Imitation]]:
    with ExitStack() as stack:
        started = {case.contract: stack.enter_context(Imitation(case.profile())) for case in CASES}
        for case in CASES:
            started[case.contract].script(case.job, *case.answers)
        yield started


def _job_flags(case: Case, provider: Imitation) -> list[str]:
    if case.handle:
        return ["--status-url", f"{provider.url}{case.job}?{az.QUERY}"]
    return ["--job", case.job]


def test_one_worker_watches_every_shipped_contract(tmp_path: Path, home: Path) -> None:
    with imitations() as providers:
        for case in CASES:
            provider = providers[case.contract]
            contract = tuned(tmp_path / "c", case.contract, vars={"base_url": provider.url, **case.vars})
            assert run_cli("contracts", "install", str(contract), "--by", "operator", home=home, env=ENV).code == 0
            queued = run_cli(
                "enqueue", "--contract", str(contract), *_job_flags(case, provider), "--operation", case.contract,
                home=home, env=ENV,
            )  # fmt: skip
            assert queued.code == 0, (case.contract, queued.stderr)

        log = run_worker_until_final(home, ENV, [case.contract for case in CASES], within=60)

        for case in CASES:
            record = record_of(home, case.contract)
            assert (record["phase"], record["result"]) == ("succeeded", case.result), (case.contract, record)
            seen = providers[case.contract].status_requests(case.job)
            assert record["status_requests_used"] == seen == 2, (case.contract, record, seen)
            for secret in case.secrets:
                assert_no_secret(secret, log, run_cli("story", case.contract, home=home).stdout)


def test_one_mcp_session_watches_every_shipped_contract(tmp_path: Path) -> None:
    home, contracts = tmp_path / "home", tmp_path / "contracts"
    with imitations() as providers:
        for case in CASES:
            tuned(contracts, case.contract, vars={"base_url": providers[case.contract].url, **case.vars})

        async def body() -> None:
            async with mcp_agent(contracts, home, tmp_path / "stderr.txt", env=ENV) as agent:
                for case in CASES:
                    provider = providers[case.contract]
                    where = (
                        {"status_url": f"{provider.url}{case.job}?{az.QUERY}"} if case.handle else {"job_id": case.job}
                    )
                    started = await agent.call("start_watch", contract=case.contract, **where)
                    assert started.ok, (case.contract, started.text)
                    done = await agent.call(
                        "wait_operation", operation_id=started.data["operation_id"], max_wait_seconds=30
                    )
                    assert done.ok and done.data["status"] == "succeeded", (case.contract, done.text)
                    assert done.data["result"] == case.result, case.contract
                for _, _, reply in agent.replies:
                    for case in CASES:
                        for secret in case.secrets:
                            assert_no_secret(secret, reply.text)

        run(body)
        for case in CASES:
            assert providers[case.contract].status_requests(case.job) == 2, case.contract
