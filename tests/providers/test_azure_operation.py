"""azure-operation against an imitation of Azure AI operation monitors (Document Intelligence, Translator, Language).

States and their case-insensitive reading: azure-core `sdk/core/azure-core/azure/core/polling/base_polling.py`
(`_FINISHED`, `_FAILED`, `_SUCCEEDED`, compared with `str(status).lower()`; Retry-After honoured on every
poll, 200 included). Bodies: the Document Intelligence REST type `AnalyzeResultOperationOutput`
(learn.microsoft.com/javascript/api/@azure-rest/ai-document-intelligence/analyzeresultoperationoutput): status,
createdDateTime, lastUpdatedDateTime, error, analyzeResult; the values are illustrative (no verbatim example
was found, docs/plans/part8-providers.md section 6). The 401 body is the Cognitive Services key refusal.
Translator batches: azure-ai-translation-document `models/_enums.py` (Status) and `_polling.py` (ValidationFailed
raises the body's error, innerError first), the TranslationStatus body (id, status, summary, error). Language jobs:
azure-ai-textanalytics `_generated/v2022_05_01/models/_text_analytics_client_enums.py` (State) and `_lro.py` (the
tasks counts; partiallycompleted counted among the successes); see tests/providers/fidelity/azure-operation.toml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .imitation import Answer, Imitation, JSONValue, azure, ok
from .support import assert_no_secret, tuned, watch

KEY = "azure-imitation-key-5be0"
ENV = {"AZURE_API_KEY": KEY}
PATH = "/documentintelligence/documentModels/prebuilt-layout/analyzeResults/3b31320d-8bab-4f88-b19c-2322a7f11034"
QUERY = "api-version=2024-11-30"

RESULT: dict[str, JSONValue] = {
    "apiVersion": "2024-11-30", "modelId": "prebuilt-layout", "content": "Contoso\nInvoice ...",
    "pages": [{"pageNumber": 1, "width": 8.5, "height": 11, "unit": "inch"}],
}  # fmt: skip
ERROR: dict[str, JSONValue] = {
    "code": "InvalidRequest", "message": "Invalid request.",
    "innererror": {"code": "InvalidContent", "message": "The file is corrupted or format is unsupported."},
}  # fmt: skip


def status(value: str, **extra: JSONValue) -> dict[str, JSONValue]:
    return {
        "status": value,
        "createdDateTime": "2024-03-27T17:09:11Z",
        "lastUpdatedDateTime": "2024-03-27T17:09:12Z",
        **extra,
    }


@pytest.fixture
def provider() -> Any:
    with Imitation(azure(KEY)) as imitation:
        yield imitation


def handle(provider: Imitation) -> str:
    return f"{provider.url}{PATH}?{QUERY}"


def test_the_operation_location_url_is_watched_as_given(provider: Imitation, home: Path) -> None:
    """--status-url with the shipped name: its api-version kept, the key only as Ocp-Apim-Subscription-Key."""
    provider.script(
        PATH, ok(status("notStarted")), ok(status("Running")), ok(status("succeeded", analyzeResult=RESULT))
    )
    # The shipped contract by name; the shipped 2 s base delay (two waits of 1-4 s) narrowed as a user may.
    flags = ("--status-url", handle(provider), "--base-delay", "50ms", "--max-delay", "100ms")
    watched = watch("azure-operation", base_url=provider.url, home=home, env=ENV, flags=flags)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["result"] == RESULT
    for seen in provider.seen(PATH):  # the canonical URL: Azure reads paths without case, so they are folded
        assert (seen.method, seen.path, seen.query) == ("GET", PATH.lower(), QUERY)
        assert seen.headers["ocp-apim-subscription-key"] == KEY
        assert "authorization" not in seen.headers
    assert_no_secret(KEY, watched.ran.stdout, watched.ran.stderr)


def test_retry_after_on_a_200_poll_is_honoured(provider: Imitation, tmp_path: Path, home: Path) -> None:
    contract = tuned(tmp_path / "c", "azure-operation")
    provider.script(
        PATH, Answer(200, status("running"), {"Retry-After": "1"}), ok(status("succeeded", analyzeResult=RESULT))
    )
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, flags=("--status-url", handle(provider)))
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    first, second = provider.seen(PATH)
    assert second.at - first.at >= 1.0, "the poll after a 200 with Retry-After: 1 came too early"


def test_a_429_waits_x_ms_retry_after_ms(provider: Imitation, tmp_path: Path, home: Path) -> None:
    contract = tuned(tmp_path / "c", "azure-operation")
    throttled = Answer(
        429, {"error": {"code": "429", "message": "Rate limit is exceeded."}}, {"x-ms-retry-after-ms": "1200"}
    )
    provider.script(PATH, throttled, ok(status("succeeded", analyzeResult=RESULT)))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, flags=("--status-url", handle(provider)))
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    first, second = provider.seen(PATH)
    assert second.at - first.at >= 1.2, "the poll after x-ms-retry-after-ms: 1200 came too early"


@pytest.mark.parametrize(
    ("body", "code", "reason"),
    [
        pytest.param(status("failed", error=ERROR), 3, "job_failed", id="failed"),
        pytest.param(status("Canceled"), 3, "job_cancelled", id="canceled"),
        pytest.param(status("cancelled"), 3, "job_cancelled", id="two-Ls-is-Language-and-Translator"),
        pytest.param(status("skipped"), 3, "job_cancelled", id="skipped"),
        pytest.param(status("Completed"), 4, "unknown_state", id="undocumented"),
        pytest.param(status(""), 4, "unknown_state", id="empty-status"),
        pytest.param({"createdDateTime": "2024-03-27T17:09:11Z"}, 4, "invalid_response", id="no-status"),
        pytest.param({"status": 5}, 4, "invalid_response", id="status-a-number"),
    ],
)
def test_documented_endings(
    provider: Imitation, tmp_path: Path, home: Path, body: dict[str, JSONValue], code: int, reason: str
) -> None:
    contract = tuned(tmp_path / "c", "azure-operation")
    provider.script(PATH, ok(status("running")), ok(body))
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, flags=("--status-url", handle(provider)))
    assert watched.code == code, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["reason"] == reason
    if reason == "job_failed":
        assert watched.outcome["provider_error"] == ERROR


def test_a_status_url_on_another_origin_is_refused_before_any_request(provider: Imitation, home: Path) -> None:
    with Imitation(azure(KEY)) as elsewhere:
        watched = watch(
            "azure-operation", base_url=provider.url, home=home, env=ENV, flags=("--status-url", handle(elsewhere))
        )
        assert watched.code == 2, watched.ran.stdout + watched.ran.stderr
        assert elsewhere.seen() == [] and provider.seen() == []


def test_wrong_key(provider: Imitation, home: Path) -> None:
    provider.script(PATH, ok(status("running")))
    watched = watch(
        "azure-operation",
        base_url=provider.url,
        home=home,
        env={"AZURE_API_KEY": "nope"},
        flags=("--status-url", handle(provider)),
    )
    assert (watched.code, watched.outcome["reason"]) == (4, "authorization_denied")


TRANSLATION = "/translator/document/batches/727bf148-f327-47a0-9481-abae6362f11e"
TRANSLATOR_QUERY = "api-version=2024-05-01"


def batch(value: str, **summary: int) -> dict[str, JSONValue]:
    """A Translator TranslationStatus body: the batch's status and its documents' summary."""
    counts: dict[str, JSONValue] = {
        "total": 10, "failed": 0, "success": 0, "inProgress": 0, "notYetStarted": 0, "cancelled": 0,
        "totalCharacterCharged": 0, **summary,
    }  # fmt: skip
    return {"id": TRANSLATION.rpartition("/")[2], **status(value), "summary": counts}


def test_a_translation_cancelled_while_running_ends_cancelled_with_its_counts(
    provider: Imitation, tmp_path: Path, home: Path
) -> None:
    """Issue 24: Cancelling and Cancelled stopped as unknown_state, so a cancelled translation never ended as one."""
    contract = tuned(tmp_path / "c", "azure-operation", vars={"api_version": "2024-05-01"})
    provider.script(
        TRANSLATION,
        ok(batch("NotStarted", notYetStarted=10)),
        ok(batch("Running", inProgress=4, success=3, notYetStarted=3)),
        ok(batch("Cancelling", success=3, inProgress=2, notYetStarted=5)),
        ok(batch("Cancelled", success=3, cancelled=7)),
    )
    handle = f"{provider.url}{TRANSLATION}?{TRANSLATOR_QUERY}"
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, flags=("--status-url", handle))
    assert watched.code == 3, watched.ran.stdout + watched.ran.stderr
    assert (watched.outcome["reason"], watched.outcome["last_state"]) == ("job_cancelled", "cancelled")
    assert watched.outcome["counts"]["success"] == 3 and watched.outcome["counts"]["cancelled"] == 7
    assert provider.status_requests(TRANSLATION) == 4


def test_a_translation_that_fails_validation_keeps_its_error(provider: Imitation, tmp_path: Path, home: Path) -> None:
    contract = tuned(tmp_path / "c", "azure-operation", vars={"api_version": "2024-05-01"})
    error: dict[str, JSONValue] = {
        "code": "InvalidRequest",
        "message": "Cannot access source document location with the current permissions.",
        "target": "Operation",
        "innerError": {"code": "InvalidDocumentAccessLevel", "message": "Cannot access source document location."},
    }
    provider.script(TRANSLATION, ok(batch("NotStarted")), ok({**batch("ValidationFailed", total=0), "error": error}))
    handle = f"{provider.url}{TRANSLATION}?{TRANSLATOR_QUERY}"
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, flags=("--status-url", handle))
    assert (watched.code, watched.outcome["reason"]) == (3, "job_failed"), watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["provider_error"] == error


LANGUAGE = "/language/analyze-text/jobs/7a9a3a93-5a43-4bd3-8a8b-41c9c4a8bb1f"
LANGUAGE_QUERY = "api-version=2023-04-01"


def test_a_language_job_partly_completed_is_a_success_that_says_what_part(
    provider: Imitation, tmp_path: Path, home: Path
) -> None:
    contract = tuned(tmp_path / "c", "azure-operation", vars={"api_version": "2023-04-01"})

    def job(value: str, **tasks: JSONValue) -> dict[str, JSONValue]:
        counts: dict[str, JSONValue] = {"completed": 0, "failed": 0, "inProgress": 0, "total": 2, "items": [], **tasks}
        return {"jobId": LANGUAGE.rpartition("/")[2], **status(value), "tasks": counts}

    items: list[JSONValue] = [{"kind": "KeyPhraseExtractionLROResults", "status": "succeeded", "results": {}}]
    final = job("partiallyCompleted", completed=1, failed=1, items=items)
    provider.script(LANGUAGE, ok(job("running", inProgress=2)), ok(final))
    handle = f"{provider.url}{LANGUAGE}?{LANGUAGE_QUERY}"
    watched = watch(contract, base_url=provider.url, home=home, env=ENV, flags=("--status-url", handle))
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["result"] == final
    assert watched.outcome["counts"] == {"completed": 1, "failed": 1, "inProgress": 0, "total": 2}
