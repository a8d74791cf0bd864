"""replicate-prediction against an imitation of the Replicate predictions API, through the real CLI.

Bodies: replicate-python's recorded API answers `tests/cassettes/predictions-get.yaml` (`SUCCEEDED`) and
`predictions-cancel.yaml` (`CANCELED`); the webhook sample in trigger.dev
`internal-packages/webhook-sources/src/handAuthored/replicate.ts` (`STARTING`; Replicate's webhook body "is
the prediction object itself"); states and their meaning from the "Prediction lifecycle" page
(replicate.com/docs/topics/predictions/lifecycle), `aborted` from replicate-python PR #460; the 429 body and
ratelimit-reset header from the "Rate limits" page and the cassettes (docs/plans/part8-providers.md section 5).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pollwarden.catalogue import shipped_contract
from pollwarden.core.contract.result import result_url_problem

from .imitation import Answer, Imitation, JSONValue, ok, replicate
from .support import assert_no_secret, fetch_result, tuned, watch

TOKEN = "r8_imitation_0f9e8d"
ENV = {"REPLICATE_API_TOKEN": TOKEN}
ID = "vgcm4plb7tgzlyznry5d5jkgvu"

STARTING: dict[str, JSONValue] = {
    "id": ID, "model": "black-forest-labs/flux-schnell", "status": "starting",
    "input": {"prompt": "a studio photo of a golden retriever wearing sunglasses"}, "logs": None, "output": None,
    "error": None, "created_at": "2026-07-14T09:12:03.221000Z", "source": "api", "data_removed": False,
    "started_at": None, "completed_at": None, "metrics": {},
    "urls": {"web": f"https://replicate.com/p/{ID}", "get": f"https://api.replicate.com/v1/predictions/{ID}",
             "cancel": f"https://api.replicate.com/v1/predictions/{ID}/cancel"},
}  # fmt: skip
SUCCEEDED: dict[str, JSONValue] = {
    "id": ID, "model": "stability-ai/sdxl",
    "version": "39ed52f2a78e934b3ba6e2a89f5b1c712de7dfea535525255b1aa35c5565e08b",
    "input": {"height": 512, "prompt": "a studio photo of a rainbow colored corgi", "seed": 42069, "width": 512},
    "logs": "Using seed: 42069\n...100%|##########| 50/50 [00:02<00:00, 17.09it/s]\n",
    "output": ["https://replicate.delivery/pbxt/9inf36wjsEWuQ6XTf84iezPftv9QZdePfGySnU5tUai3BOrWE/out-0.png"],
    "error": None, "status": "succeeded", "created_at": "2023-08-16T18:57:08.360785Z",
    "started_at": "2023-08-16T18:57:08.366092Z", "completed_at": "2023-08-16T18:57:12.17042Z",
    "metrics": {"predict_time": 3.804328},
    "urls": {"cancel": f"https://api.replicate.com/v1/predictions/{ID}/cancel",
             "get": f"https://api.replicate.com/v1/predictions/{ID}"},
}  # fmt: skip
CANCELED: dict[str, JSONValue] = {
    "completed_at": "2024-04-22T11:15:15.504128Z", "created_at": "2024-04-22T11:15:15.329000Z", "error": None,
    "id": ID,
    "input": {"seed": 42069, "width": 512, "height": 512, "prompt": "a studio photo of a rainbow colored corgi"},
    "logs": None, "metrics": {"predict_time": 0.128148, "total_time": 0.175128}, "output": None,
    "started_at": "2024-04-22T11:15:15.375980Z", "status": "canceled",
    "urls": {"get": f"https://api.replicate.com/v1/predictions/{ID}", "cancel": f"https://api.replicate.com/v1/predictions/{ID}/cancel"},
    "model": "stability-ai/sdxl", "version": "39ed52f2a78e934b3ba6e2a89f5b1c712de7dfea535525255b1aa35c5565e08b",
    "webhook_completed": None,
}  # fmt: skip


def with_(base: dict[str, JSONValue], **changes: JSONValue) -> Answer:
    return ok({**base, **changes})


@pytest.fixture
def provider() -> Any:
    with Imitation(replicate(TOKEN)) as imitation:
        yield imitation


@pytest.fixture
def contract(tmp_path: Path) -> Path:
    return tuned(tmp_path / "contracts", "replicate-prediction")


def test_the_shipped_name_watches_directly(provider: Imitation, home: Path) -> None:
    """`--contract replicate-prediction`, no tuning: the shipped first check is 1 s."""
    provider.script(ID, ok(SUCCEEDED))
    watched = watch("replicate-prediction", base_url=provider.url, home=home, env=ENV, job=ID)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["result"] == SUCCEEDED["output"]  # an array stays an array
    (seen,) = provider.seen(ID)
    assert (seen.method, seen.path, seen.headers["authorization"]) == (
        "GET",
        f"/v1/predictions/{ID}",
        f"Bearer {TOKEN}",
    )


@pytest.mark.parametrize(
    "output",
    [
        pytest.param(["https://replicate.delivery/a/out-0.png", "https://replicate.delivery/a/out-1.png"], id="list"),
        pytest.param({"text": "hello", "tokens": 5}, id="object"),
        pytest.param("plain text answer", id="text"),
        pytest.param(0.73, id="number"),
        pytest.param([], id="empty-list"),
        pytest.param(False, id="false"),
    ],
)
def test_any_json_output_is_the_result(provider: Imitation, contract: Path, home: Path, output: JSONValue) -> None:
    provider.script(ID, ok(STARTING), with_(STARTING, status="processing"), with_(SUCCEEDED, output=output))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=ID)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["result"] == output


def test_a_url_output_is_fetched_without_the_token(
    provider: Imitation, contract: Path, home: Path, tmp_path: Path
) -> None:
    """The output file where the imitation serves it (base_url's origin: replicate.delivery, the host the contract
    names, cannot be played on loopback), fetched without the token: [result].credential = false."""
    url = f"{provider.url}/pbxt/9inf36/out-0.png"
    provider.file("/pbxt/9inf36/out-0.png", b"\x89PNG\r\n\x1a\nimage", content_type="image/png", credential=False)
    provider.script(ID, with_(SUCCEEDED, output=url))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=ID, operation="r1")
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    out = tmp_path / "out.png"
    fetched = fetch_result("r1", out, home=home, env=ENV)
    assert fetched.code == 0, fetched.stderr
    assert out.read_bytes() == b"\x89PNG\r\n\x1a\nimage"
    (download,) = provider.downloads("/pbxt/9inf36/out-0.png")
    assert "authorization" not in download.headers
    assert_no_secret(TOKEN, watched.ran.stdout, watched.ran.stderr, fetched.stdout, fetched.stderr)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://replicate.delivery/pbxt/9inf36/out-0.png", True),
        ("https://pbxt.replicate.delivery/9inf36/out-0.png", True),
        ("https://replicate.delivery.evil.example/out-0.png", False),
        ("http://169.254.169.254/latest/meta-data/", False),
    ],
)
def test_output_urls_are_fetched_from_replicate_delivery_only(url: str, allowed: bool) -> None:
    result = shipped_contract("replicate-prediction").result
    assert (result_url_problem(result, "https://api.replicate.com", url) is None) is allowed


@pytest.mark.parametrize(
    ("final", "code", "reason"),
    [
        pytest.param(with_(STARTING, status="failed", error="CUDA out of memory."), 3, "job_failed", id="failed"),
        pytest.param(ok(CANCELED), 3, "job_cancelled", id="canceled"),
        pytest.param(with_(STARTING, status="aborted"), 3, "job_expired", id="aborted"),
        pytest.param(with_(STARTING, status="cancelled"), 4, "unknown_state", id="two-Ls-is-not-theirs"),
        # Replicate removed the output after its retention hour: the result expired (docs/providers.md).
        pytest.param(with_(SUCCEEDED, output=None, data_removed=True), 3, "job_expired", id="output-removed"),
        pytest.param(with_(SUCCEEDED, output=None), 4, "result_invalid", id="output-null"),
        pytest.param(
            Answer(401, {"title": "Unauthenticated", "detail": "Invalid token", "status": 401}),
            4,
            "authorization_denied",
            id="401",
        ),
    ],
)
def test_documented_endings(
    provider: Imitation, contract: Path, home: Path, final: Answer, code: int, reason: str
) -> None:
    provider.script(ID, ok(STARTING), final)
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=ID)
    assert watched.code == code, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["reason"] == reason


def test_failure_keeps_error_and_logs(provider: Imitation, contract: Path, home: Path) -> None:
    provider.script(ID, with_(STARTING, status="failed", error="CUDA out of memory.", logs="loading\nOOM\n"))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=ID)
    assert watched.outcome["provider_error"] == {"error": "CUDA out of memory.", "logs": "loading\nOOM\n"}


def test_429_waits_ratelimit_reset_seconds(provider: Imitation, contract: Path, home: Path) -> None:
    throttled = Answer(
        429,
        {"detail": "Request was throttled. Your rate limit resets in ~1s."},
        {"ratelimit-reset": "1", "ratelimit-remaining": "0"},
    )
    provider.script(ID, throttled, ok(SUCCEEDED))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, job=ID)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    first, second = provider.seen(ID)
    assert second.at - first.at >= 1.0
