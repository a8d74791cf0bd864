"""The four shipped `[push]` tables held to their providers' published webhook definitions (issue 27).

Each provider's documented deliveries (tests/providers/pushes/CONTRACT.json, trimmed only of fields nothing
reads) are signed as the provider signs them and POSTed to the real receiver (`fleet.hooks` on loopback) for
an operation of the shipped contract whose next check is 10 minutes away. The documented end of that job
wakes it (its check is due now, with a `woken_by_push` event); a documented event type the table does not list
wakes nothing, nor does the documented end of another job. Sources (cited in docs/providers.md):

- openai-batch: openai/openai-python@e43b422 `api_reference/openapi.transformed.yml`, the `x-oaiMeta` examples
  of WebhookBatchCompleted/Failed/Cancelled/Expired, WebhookFineTuningJobSucceeded, WebhookResponseCompleted
  (the types: `src/openai/types/webhooks/batch_*_webhook_event.py`; signing: `src/openai/lib/_webhooks.py`).
- replicate-prediction: the body is the prediction itself (replicate.com/docs/topics/webhooks/receive-webhook):
  that page's "starting" example (a `start` event) and the succeeded prediction recorded in
  replicate/replicate-python@0110c2c `tests/cassettes/predictions-get.yaml` (a `completed` event; its logs cut).
- github-actions-run: octokit/webhooks@3a58428 `payload-examples/api.github.com/workflow_run/completed.payload.json`,
  `requested.payload.json` (in_progress: that body with the action and status of
  `payload-schemas/api.github.com/workflow_run/in_progress.schema.json`), `workflow_job/completed.success.with-
  organization.payload.json`, `ping/payload.json`; repository, organization and sender cut to their ids.
- gitlab-pipeline: gitlabhq/gitlabhq@88d3e50 `doc/user/project/integrations/webhook_events.md`, "Pipeline events"
  (its `builds` cut to one), "Job events" and "Deployment events".
"""

from __future__ import annotations

import copy
import json
import time
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from pollwarden.catalogue import shipped_contract, shipped_names, shipped_text
from pollwarden.core.admission import WatchRequest
from pollwarden.core.contract.parse import Contract
from pollwarden.core.push_signature import hex_signature, standard_headers
from pollwarden.core.reasons import DelaySource
from pollwarden.engine import Engine
from pollwarden.events import Paced
from pollwarden.fleet.hooks import HooksServer, Receiver
from pollwarden.home.operating import open_store
from pollwarden.store.base import Store
from pollwarden.store.owner import process_owner
from tests.conftest import install
from tests.loopback import post

PUSHES = Path(__file__).with_name("pushes")

SECRETS = {
    # openai-python tests/lib/test_webhooks.py TEST_SECRET (its signed vector: tests/core/test_push_signature.py)
    "OPENAI_WEBHOOK_SECRET": "whsec_RdvaYFYUXuIFuEbvZHwMfYFhUf7aMYjYcmM24+Aj40c=",
    # replicate-python tests/test_webhooks.py, the Standard Webhooks vector's secret
    "REPLICATE_WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    # GitHub's "Validating webhook deliveries" example secret
    "GITHUB_WEBHOOK_SECRET": "It's a Secret to Everybody",
    "GITLAB_WEBHOOK_SECRET": "gitlab-imitation-token-5d1e",
}


def documented(contract: str, event: str) -> dict[str, Any]:
    events: dict[str, dict[str, Any]] = json.loads((PUSHES / f"{contract}.json").read_text(encoding="utf-8"))
    return copy.deepcopy(events[event])


def signed(contract: Contract, event: str, body: dict[str, Any]) -> tuple[dict[str, str], bytes]:
    """The headers and bytes the provider sends: its signature over exactly these bytes, its delivery id."""
    assert contract.push is not None
    secret = SECRETS[contract.push.secret_env]
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if contract.push.kind == "standard-webhooks":
        headers |= standard_headers(secret, f"msg_{uuid.uuid4().hex}", int(time.time()), data)
    elif contract.push.kind == "github":
        headers |= {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": "sha256=" + hex_signature(secret, data),
            "User-Agent": "GitHub-Hookshot/044aadd",
        }
    else:
        # The headers GitLab 17.11 sends (a captured delivery: remember-5/gitlab-bot, test/gitlab-hooks/); a retry
        # keeps `Idempotency-Key` (gitlab-org/gitlab!160952), which names the delivery.
        headers |= {
            "X-Gitlab-Event": event,
            "X-Gitlab-Token": secret,
            "Idempotency-Key": str(uuid.uuid4()),
            "X-Gitlab-Webhook-UUID": str(uuid.uuid4()),
            "X-Gitlab-Event-UUID": str(uuid.uuid4()),
            "X-Gitlab-Instance": "https://gitlab.example.com",
            "User-Agent": "GitLab/17.11.1-ee",
        }
    return headers, data


@dataclass(frozen=True)
class Case:
    contract: str
    job_id: str
    """The operation's job: the id the documented end event names."""
    event: str
    """The key of the documented body in pushes/CONTRACT.json, and the event header GitHub and GitLab send."""
    wakes: bool
    vars: dict[str, str] = field(default_factory=dict)
    change: dict[str, Any] = field(default_factory=dict)
    """Top-level keys, or `a.b` paths, set in the documented body (a status of the enum, another job's id)."""
    header: str | None = None
    """The event header when it is not the body's key (GitHub's X-GitHub-Event)."""

    @property
    def id(self) -> str:
        changed = ",".join(f"{k}={v}" for k, v in self.change.items())
        return f"{self.contract}:{self.event}{'[' + changed + ']' if changed else ''}"


def _set(body: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        body = body[key]
    body[last] = value


OA, OA_JOB = "openai-batch", "batch_abc123"
RE, RE_JOB = "replicate-prediction", "vgcm4plb7tgzlyznry5d5jkgvu"
GH, GH_JOB, GH_VARS = "github-actions-run", "289782451", {"repo": "octo-org/octo-repo"}
GL, GL_JOB, GL_VARS = "gitlab-pipeline", "31", {"project": "1"}
RUN = "workflow_run"

CASES = [
    # OpenAI: the four batch.* events of the API reference wake; another product's event naming the same id does
    # not; the documented end of another batch wakes nothing.
    *(Case(OA, OA_JOB, e, True) for e in ("batch.completed", "batch.failed", "batch.cancelled", "batch.expired")),
    Case(OA, OA_JOB, "fine_tuning.job.succeeded", False, change={"data.id": OA_JOB}),
    Case(OA, OA_JOB, "response.completed", False, change={"data.id": OA_JOB}),
    Case(OA, OA_JOB, "batch.completed", False, change={"data.id": "batch_other456"}),
    # Replicate: the body is the prediction; a `completed` delivery carries a terminal status (succeeded,
    # failed, canceled; aborted when its deadline passed first); `start`, `output` and `logs` deliveries carry
    # starting or processing and wake nothing.
    *(Case(RE, RE_JOB, "completed", True, change={"status": s})
      for s in ("succeeded", "failed", "canceled", "aborted")),
    Case(RE, RE_JOB, "start", False, change={"id": RE_JOB}),
    Case(RE, RE_JOB, "completed", False, change={"status": "processing"}),
    Case(RE, RE_JOB, "completed", False, change={"id": "ufawqhfynnddngldkgtslldrkq"}),
    # GitHub: workflow_run's actions are requested, in_progress and completed; only completed wakes (its
    # conclusion may be success, failure, cancelled, action_required...: the check reads it).
    Case(GH, GH_JOB, "workflow_run.completed", True, GH_VARS, header=RUN),
    Case(GH, GH_JOB, "workflow_run.completed", True, GH_VARS, {"workflow_run.conclusion": "action_required"}, RUN),
    Case(GH, GH_JOB, "workflow_run.requested", False, GH_VARS, header=RUN),
    Case(GH, GH_JOB, "workflow_run.requested", False, GH_VARS,
         {"action": "in_progress", f"{RUN}.status": "in_progress"}, RUN),
    # A job of the run completed (the example's job id is the run's number): the run has not ended.
    Case(GH, GH_JOB, "workflow_job.completed", False, GH_VARS, header="workflow_job"),
    Case(GH, GH_JOB, "ping", False, GH_VARS, header="ping"),
    Case(GH, GH_JOB, "workflow_run.completed", False, GH_VARS, {"workflow_run.id": 289782452}, RUN),
    # GitLab: a Pipeline Hook at each status change; those that end the wait (or hold it for a person) wake.
    *(Case(GL, GL_JOB, "Pipeline Hook", True, GL_VARS, {"object_attributes.status": s})
      for s in ("success", "failed", "canceled", "skipped", "manual")),
    *(Case(GL, GL_JOB, "Pipeline Hook", False, GL_VARS, {"object_attributes.status": s})
      for s in ("created", "waiting_for_resource", "preparing", "pending", "running", "canceling", "scheduled")),
    Case(GL, GL_JOB, "Job Hook", False, GL_VARS, {"pipeline_id": 31, "commit.id": 31, "build_status": "success"}),
    Case(GL, GL_JOB, "Deployment Hook", False, GL_VARS, {"deployable_id": 31}),
    Case(GL, GL_JOB, "Pipeline Hook", False, GL_VARS, {"object_attributes.id": 32}),
]  # fmt: skip


@pytest.fixture
def receiver(home: Path) -> Iterator[tuple[HooksServer, Store]]:
    store = open_store(home, keys="write")
    server = HooksServer(Receiver(store, owner=process_owner("hooks"), environ=SECRETS)).start()
    try:
        yield server, store
    finally:
        server.stop()
        store.close()


def _parked(store: Store, contract: Contract, job_id: str) -> str:
    """An operation of the shipped contract as its first check leaves it: the next one 10 minutes away."""
    install(store, contract)
    operation_id = Engine(store, owner="watch-1").admit(WatchRequest(contract, job_id, by="test")).record.operation_id
    now = store.db_now()
    claimed = store.claim(operation_id, "watch-1", now, timedelta(seconds=30))
    assert claimed is not None
    lease, record = claimed
    later = record.waiting(now + timedelta(minutes=10), DelaySource.LOCAL_BACKOFF)
    assert store.write(lease, later, [Paced(provider="test", until=None)], now, release=True)
    return operation_id


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_a_documented_delivery_wakes_exactly_what_its_table_says(
    case: Case, receiver: tuple[HooksServer, Store]
) -> None:
    server, store = receiver
    contract = shipped_contract(case.contract, case.vars)
    operation_id = _parked(store, contract, case.job_id)
    body = documented(case.contract, case.event)
    for path, value in case.change.items():
        _set(body, path, value)
    headers, data = signed(contract, case.header or case.event, body)
    assert post(f"{server.url}/hooks/{case.contract}", headers, data) == 202  # whatever it woke: no oracle
    stored = store.get(operation_id)
    assert stored is not None
    kinds = [event.kind for event in store.events(operation_id)]
    if case.wakes:
        assert kinds[-1] == "woken_by_push", kinds
        assert stored.record.delay_source is DelaySource.PROVIDER_PUSH
        assert stored.record.next_poll_at <= store.db_now()
        assert server.receiver.counts[(case.contract, "woken")] == 1
    else:
        assert "woken_by_push" not in kinds
        assert stored.record.next_poll_at > store.db_now() + timedelta(minutes=9)
        assert server.receiver.counts[(case.contract, "woken")] == 0


def test_every_shipped_push_table_is_held_to_a_documented_delivery() -> None:
    """A fifth shipped `[push]` table needs its provider's documented deliveries here too."""
    pushed = {name for name in shipped_names() if "push" in tomllib.loads(shipped_text(name))}
    assert pushed == {case.contract for case in CASES} == {p.stem for p in PUSHES.glob("*.json")}
