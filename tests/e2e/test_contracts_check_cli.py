"""`pollwarden contracts check NAME|FILE --answer FILE` end to end: one recorded answer replayed through a
contract, sending nothing and opening no store; exit 0 for a meaning a watch acts on, 4 for one that would stop it
for a person, 2 for a bad file. What it says is what a watch does with the same answer (the same core path)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, write_contract
from tests.loopback import provider

GITLAB = ["--var", "project=42"]


def _check(home: Path, contract: str, answer: Path, *extra: str) -> tuple[int, str, str]:
    ran = run_cli("contracts", "check", contract, "--answer", str(answer), *extra, home=home)
    assert "Traceback" not in ran.stderr, ran.stderr
    return ran.code, ran.stdout, ran.stderr


def _write(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def test_a_pending_answer_prints_its_meaning_fields_and_next_wait(home: Path, tmp_path: Path) -> None:
    contract = str(write_contract(tmp_path / "c.toml", "http://127.0.0.1:9", base_delay="5s", max_delay="2m"))
    answer = _write(
        tmp_path / "a.json", {"state": "running", "poll_after_seconds": 12, "expires_at": "2999-01-01T00:00:00Z"}
    )
    code, out, _ = _check(home, contract, answer)
    assert code == 0, out
    assert "meaning: pending (state 'running')" in out
    assert "  hint           poll_after_seconds: " in out and ", in 12s" in out
    assert "  expires_at     2999-01-01T00:00:00Z, in " in out
    assert "next: wait 12s (provider's hint), then check again" in out
    plain = _write(tmp_path / "b.json", {"state": "queued"})
    code, out, _ = _check(home, contract, plain)
    assert code == 0 and "next: wait 5s to 10s (backoff: 10s, jittered), then check again" in out, out
    assert not home.exists() or not any(home.iterdir())  # no store, no keys: nothing was opened or created


def test_the_json_view_and_each_exit_code(home: Path, tmp_path: Path) -> None:
    contract = str(write_contract(tmp_path / "c.toml", "http://127.0.0.1:9"))
    cases: list[tuple[Any, int, str, str | None]] = [
        ({"state": "succeeded", "result_url": "/r/9"}, 0, "success", None),
        ({"state": "failed", "error": ["disk full", "retry later"]}, 0, "failure", "job_failed"),
        ({"state": "paused"}, 4, "unknown", "unknown_state"),
        ({"status": 418, "body": {}}, 4, "unknown", "integration_failure"),
        ({"status": 429, "headers": {"Retry-After": "30"}}, 0, "rate_limited", None),
        ({"status": 503, "body_text": "<html>maintenance</html>"}, 0, "server_error", None),
        ({"status": 401, "body": {"error": "bad key"}}, 4, "auth_denied", "authorization_denied"),
        ({"state": "succeeded"}, 4, "success", "result_invalid"),
    ]
    for n, (value, exit_code, meaning, reason) in enumerate(cases):
        code, out, err = _check(home, contract, _write(tmp_path / f"a{n}.json", value), "--json")
        assert code == exit_code, (value, out, err)
        shown = json.loads(out)
        assert (shown["meaning"], shown["decision"]["reason"]) == (meaning, reason), (value, shown)
        assert shown["contract"] == "exports" and shown["stops_the_watch"] is (exit_code == 4)
    succeeded = json.loads(_check(home, contract, tmp_path / "a0.json", "--json")[1])
    assert succeeded["observation"]["result"] == "/r/9" and succeeded["next_wait"] is None
    failed = json.loads(_check(home, contract, tmp_path / "a1.json", "--json")[1])
    assert failed["observation"]["provider_error"] == "disk full; retry later"
    limited = json.loads(_check(home, contract, tmp_path / "a4.json", "--json")[1])
    assert limited["next_wait"]["shortest"] == limited["next_wait"]["longest"] == "30s"
    assert limited["next_wait"]["shortest_source"] == "provider_retry_after"
    assert limited["answer"] == {"status": 429, "bytes": 0}


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("not json", "--answer {path}: not JSON (Expecting value at offset 0)"),
        ('{"status": 200, "body": {}, "body_text": "x"}', "give body (any JSON) or body_text (a string), not both"),
        ('{"status": 700, "body": {}}', "status must be an HTTP status from 100 to 599, got 700"),
    ],
)
def test_a_bad_answer_file_is_exit_2_naming_it(home: Path, tmp_path: Path, content: str, words: str) -> None:
    contract = str(write_contract(tmp_path / "c.toml", "http://127.0.0.1:9"))
    answer = tmp_path / "bad.json"
    answer.write_text(content, encoding="utf-8")
    code, out, err = _check(home, contract, answer)
    assert code == 2 and words.format(path=answer) in err and out == "", err
    missing = _check(home, contract, tmp_path / "nowhere.json")
    assert missing[0] == 2 and "--answer" in missing[2] and "nowhere.json" in missing[2]


def test_a_shipped_contract_by_name_with_its_vars_and_standard_input(home: Path, tmp_path: Path) -> None:
    body = json.dumps({"id": 7, "status": "waiting_for_resource", "web_url": "https://gitlab.example/p/7"})
    ran = run_cli("contracts", "check", "gitlab-pipeline", *GITLAB, "--answer", "-", home=home, env={}, timeout=60)
    assert ran.code == 2 and "--answer standard input" in ran.stderr  # nothing on standard input: not JSON
    answer = tmp_path / "p.json"
    answer.write_text(body, encoding="utf-8")
    code, out, _ = _check(home, "gitlab-pipeline", answer, *GITLAB)
    assert code == 0 and "meaning: pending (state 'waiting_for_resource')" in out, out
    needs = _check(home, "gitlab-pipeline", answer)
    assert needs[0] == 2 and "--var project=VALUE" in needs[2]


def test_it_sends_nothing_and_needs_no_credential(home: Path, tmp_path: Path) -> None:
    with provider() as server:
        contract = write_contract(tmp_path / "c.toml", server.url, secret_env="NEVER_SET_TOKEN")
        code, out, _ = _check(home, str(contract), _write(tmp_path / "a.json", {"state": "running"}))
        assert code == 0, out
        assert server.seen == []


@pytest.mark.parametrize(
    ("body", "watched", "checked"),
    [
        ({"state": "succeeded", "result_url": "/r/1"}, 0, 0),
        ({"state": "failed", "error": "boom"}, 3, 0),
        ({"state": "paused"}, 4, 4),
        ({"state": "succeeded"}, 4, 4),
    ],
)
def test_what_check_says_is_what_a_watch_does_with_the_same_answer(
    sim: Simulator, home: Path, tmp_path: Path, body: dict[str, Any], watched: int, checked: int
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    sim.add_job("same", [Step(body=body)])
    ran = run_cli("watch", "--contract", str(contract), "--job", "same", "--json", home=home)
    assert ran.code == watched, ran.stderr
    outcome = json.loads(ran.stdout.strip().splitlines()[-1])
    code, out, _ = _check(home, str(contract), _write(tmp_path / "a.json", body), "--json")
    shown = json.loads(out)
    assert code == checked
    assert shown["decision"]["reason"] == outcome["reason"]
    assert shown["observation"]["result"] == outcome["result"]
    assert shown["observation"]["provider_error"] == outcome["provider_error"]
