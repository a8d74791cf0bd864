"""assemblyai-transcript against an imitation of AssemblyAI's GET /v2/transcript/{id}, through the real CLI.

Bodies: the transcript resource of the API reference (assemblyai.com/docs/api-reference/transcripts/get: id,
audio_url, status, text, words [{text, start, end, confidence, speaker}], audio_duration, error) with
assemblyai-python-sdk @ 530eca5a (1.0.0) types.py TranscriptStatus (queued, processing, completed, error); the key
in the bare `authorization` header (client.py); errors `{"error": message}`. The account's HTTP rate limit is
20,000 requests per five minutes (the Concurrency page); a 429 carries Retry-After. Every documented value is in
tests/providers/fidelity/assemblyai-transcript.toml.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .imitation import Answer, Imitation, JSONValue, ok
from .imitation_jobs import assemblyai
from .support import assert_no_secret, fetch_result, tuned, watch

KEY = "imitation0123456789abcdef0123456789ab"
ENV = {"ASSEMBLYAI_API_KEY": KEY}
ID = "5552493-16d8-42d8-8feb-c2a16b56f6e8"


def transcript(status: str, **members: JSONValue) -> Answer:
    body: dict[str, JSONValue] = {
        "id": ID, "audio_url": "https://assembly.ai/wildfires.mp3", "status": status, "language_code": "en_us",
        "speech_model": "universal", "punctuate": True, "format_text": True, "text": None, "words": None,
        "utterances": None, "confidence": None, "audio_duration": None, "webhook_url": None, **members,
    }  # fmt: skip
    return ok(body)


def words(count: int) -> list[JSONValue]:
    return [
        {"text": f"word{n}", "start": n * 300, "end": n * 300 + 250, "confidence": 0.97, "speaker": None}
        for n in range(count)
    ]


@pytest.fixture
def provider() -> Iterator[Imitation]:
    with Imitation(assemblyai(KEY)) as imitation:
        yield imitation


@pytest.fixture
def contract(tmp_path: Path) -> Path:
    return tuned(tmp_path / "contracts", "assemblyai-transcript")


def aai_watch(contract: Path, provider: Imitation, home: Path, **kw: Any) -> Any:
    return watch(contract, base_url=provider.url, home=home, env=kw.pop("env", ENV), job=ID, **kw)


def test_hours_of_audio_to_a_transcript_fetched_whole(
    provider: Imitation, contract: Path, home: Path, tmp_path: Path
) -> None:
    """A completed transcript answers with every word: 3 MB here, over the 1 MiB a status answer may have by
    default (the contract's max_body_bytes is 64 MiB); fetch-result downloads the whole resource with the key."""
    spoken = words(30_000)
    text = " ".join(f"word{n}" for n in range(len(spoken)))
    done = transcript("completed", text=text, words=spoken, audio_duration=9000, confidence=0.94)
    assert isinstance(done.body, dict) and len(done.encoded()) > 2 * 1_048_576
    provider.script(ID, transcript("queued"), transcript("processing"), done)
    watched = aai_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["result"] == ID
    seen = provider.seen(ID)
    assert len(seen) == 3 and all(s.headers["authorization"] == KEY for s in seen)  # the bare key, no scheme
    out = tmp_path / "transcript.json"
    fetched = fetch_result("op", out, home=home, env=ENV)
    assert fetched.code == 0, fetched.stdout + fetched.stderr
    assert json.loads(out.read_bytes()) == done.body
    (download,) = provider.seen(ID)[3:]
    assert (download.path, download.headers["authorization"]) == (f"/v2/transcript/{ID}", KEY)
    assert_no_secret(KEY, watched.ran.stdout, watched.ran.stderr, fetched.stdout, fetched.stderr)


def test_an_error_keeps_its_message(provider: Imitation, contract: Path, home: Path) -> None:
    message = "Download error, unable to download https://assembly.ai/wildfires.mp3. Please make sure the file exists."
    provider.script(ID, transcript("queued"), transcript("error", error=message))
    watched = aai_watch(contract, provider, home)
    assert (watched.code, watched.outcome["reason"]) == (3, "job_failed"), watched.ran.stdout + watched.ran.stderr
    assert watched.outcome["provider_error"] == message


def test_a_rate_limit_waits_its_retry_after(provider: Imitation, contract: Path, home: Path) -> None:
    limited = Answer(429, {"error": "Too many requests"}, {"Retry-After": "1"})
    provider.script(ID, limited, transcript("completed", text="", words=[], audio_duration=3))
    watched = aai_watch(contract, provider, home)
    assert watched.code == 0, watched.ran.stdout + watched.ran.stderr
    first, second = provider.seen(ID)
    assert (first.status, second.status) == (429, 200)
    assert second.at - first.at >= 0.9


@pytest.mark.parametrize(
    ("answer", "env", "code", "reason"),
    [
        pytest.param(transcript("completed"), {"ASSEMBLYAI_API_KEY": "wrong"}, 4, "authorization_denied", id="bad-key"),
        pytest.param(transcript("transcribing"), ENV, 4, "unknown_state", id="undocumented"),
    ],
)
def test_refusals(
    provider: Imitation, contract: Path, home: Path, answer: Answer, env: dict[str, str], code: int, reason: str
) -> None:
    provider.script(ID, answer)
    watched = aai_watch(contract, provider, home, env=env)
    assert (watched.code, watched.outcome["reason"]) == (code, reason), watched.ran.stdout + watched.ran.stderr
