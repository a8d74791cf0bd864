"""Every shipped contract through the worker fleet and through MCP, in one run each (issue 11, "Done when").

Each provider's bodies, credentials and job ids are the ones its own module cites (test_NAME.py beside this
one); here one real worker, and one real MCP session, watch every shipped contract's lifecycle at once against
its imitation: pending, then the documented success, and the secret never in what a person or an agent sees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import run_cli
from tests.mcp.support import mcp_agent, run

from . import test_anthropic_message_batch as an
from . import test_assemblyai_transcript as aai
from . import test_aws_step_functions_execution as sfn
from . import test_aws_textract_analysis as tx
from . import test_azure_operation as az
from . import test_bigquery_job as bq
from . import test_databricks_run as dbx
from . import test_github_actions_run as gh
from . import test_gitlab_pipeline as gl
from . import test_google_operation as go
from . import test_kubernetes_job as k8s
from . import test_openai_batch as oa
from . import test_replicate_prediction as rp
from . import test_vertex_ai_batch_prediction as vx
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
from .imitation_jobs import assemblyai, bigquery, databricks, kubernetes, step_functions, vertex
from .support import assert_no_secret, record_of, run_worker_until_final, tuned

TOKEN_FILE = "{token_file}"
"""kubernetes-job's token is a file; each test writes it under its own tmp_path (`_vars`)."""


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
    Case(
        "kubernetes-job", lambda: kubernetes(k8s.TOKEN, namespace=k8s.NAMESPACE), k8s.JOB,
        (k8s.RUNNING, k8s.COMPLETE),
        {"name": k8s.JOB, "namespace": k8s.NAMESPACE, "uid": "94bd4a8b-6c17-4ae5-b2e3-3d2c6f1f0c6e",
         "succeeded": 1, "completed_indexes": None, "completion_time": "2022-06-06T14:59:16Z"},
        (k8s.TOKEN,), k8s.ENV, {"namespace": k8s.NAMESPACE, "token_file": TOKEN_FILE},
    ),
    Case(
        "bigquery-job", lambda: bigquery(bq.TOKEN, project=bq.PROJECT, location=bq.LOCATION), bq.JOB,
        (bq.job("RUNNING"), bq.job("DONE")),
        {"job": bq.REFERENCE, "destination_table": bq.TABLE, "destination_uris": None, "errors": None},
        (bq.TOKEN,), bq.ENV, {"project": bq.PROJECT, "location": bq.LOCATION},
    ),
    Case(
        "databricks-run", lambda: databricks(dbx.TOKEN), dbx.RUN,
        (dbx.run("RUNNING"), dbx.run("TERMINATED", "SUCCESS")),
        {"run_id": int(dbx.RUN), "job_id": 11223344, "run_page_url": dbx.PAGE, "result_state": "SUCCESS"},
        (dbx.TOKEN,), dbx.ENV,
    ),
    Case(
        "aws-step-functions-execution",
        lambda: step_functions(sfn.ACCESS, sfn.SECRET, region=sfn.REGION, session_token=sfn.SESSION), sfn.ARN,
        (sfn.execution("RUNNING"), sfn.execution("SUCCEEDED", output=sfn.OUTPUT)), sfn.OUTPUT,
        (sfn.SECRET, sfn.SESSION), sfn.ENV, {"region": sfn.REGION},
    ),
    Case(
        "vertex-ai-batch-prediction", lambda: vertex(vx.TOKEN, project=vx.PROJECT, location=vx.LOCATION), vx.JOB,
        (vx.batch("JOB_STATE_RUNNING"), vx.DONE),
        {"output": vx.OUTPUT, "completion_stats": {"successfulCount": "1000"}, "partial_failures": None},
        (vx.TOKEN,), vx.ENV, {"project": vx.PROJECT, "location": vx.LOCATION},
    ),
    Case(
        "assemblyai-transcript", lambda: assemblyai(aai.KEY), aai.ID,
        (aai.transcript("processing"), aai.transcript("completed", text="Smoke", words=[], audio_duration=3)),
        aai.ID, (aai.KEY,), aai.ENV,
    ),
)  # fmt: skip

ENV = {key: value for case in CASES for key, value in case.env.items()}


def _vars(case: Case, tmp_path: Path) -> dict[str, str]:
    token = tmp_path / "serviceaccount-token"
    token.write_text(k8s.TOKEN, encoding="utf-8")
    return {name: str(token) if value == TOKEN_FILE else value for name, value in case.vars.items()}


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
            contract = tuned(tmp_path / "c", case.contract, vars={"base_url": provider.url, **_vars(case, tmp_path)})
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
            tuned(contracts, case.contract, vars={"base_url": providers[case.contract].url, **_vars(case, tmp_path)})

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
