"""Hostile answers and echoed credentials through `python -m pollwarden watch`: no traceback, the right exit, and
the credential in no output and in no byte under the home (the SQLite file and its -wal read as bytes)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import quote

from pollwarden.simulator import Simulator, Step, contract_text
from tests.conftest import Ran, run_cli

# Characters that percent-encode and base64 differently from plain text, so every form is really searched for.
SECRET = "sk-live/7f3a+9c1e=DO-NOT-LEAK-42"


def forms(secret: str) -> list[bytes]:
    raw = secret.encode()
    return [
        raw,
        f"Bearer {secret}".encode(),
        base64.b64encode(raw).rstrip(b"="),
        base64.urlsafe_b64encode(raw).rstrip(b"="),
        quote(secret, safe="").encode(),
        json.dumps(secret).encode()[1:-1],
    ]


def all_bytes_under(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file())


def assert_nowhere(secret: str, outputs: list[str], home: Path) -> None:
    stored = all_bytes_under(home)
    assert any(p.name.endswith("-wal") for p in home.rglob("*")) or stored  # the home was really written
    for form in forms(secret):
        for text in outputs:
            assert form.decode() not in text, (form, text[:400])
        assert form not in stored, form


def write(tmp_path: Path, base_url: str, *, secret_env: str | None = "PW_TOKEN", extra_top: str = "") -> Path:
    text = contract_text(base_url, secret_env=secret_env, max_transport_failures=5)
    text = text.replace("safe_status = true\n", f"safe_status = true\n{extra_top}")
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    return path


def watch(contract: Path, job: str, home: Path, env: dict[str, str] | None = None) -> Ran:
    return run_cli("watch", "--contract", str(contract), "--job", job, "--operation", job, "--json", home=home, env=env)


def reads(job: str, home: Path) -> list[str]:
    runs = [run_cli(*cmd, home=home) for cmd in (("story", job), ("story", job, "--json"), ("status", "--json"))]
    runs.append(run_cli("why", job, "--json", home=home))
    for ran in runs:
        assert "Traceback" not in ran.stderr, ran.stderr
    return [text for ran in runs for text in (ran.stdout, ran.stderr)]


def test_item6_a_lone_surrogate_is_a_recorded_invalid_response(home: Path, tmp_path: Path) -> None:
    with Simulator() as sim:
        sim.add_job("sur-1", [Step(body=b'{"state": "\\ud800", "error": "\\udfff"}')])
        ran = watch(write(tmp_path, sim.url, secret_env=None), "sur-1", home)
    assert "Traceback" not in ran.stderr, ran.stderr
    assert ran.code == 4, (ran.stdout, ran.stderr)
    assert json.loads(ran.stdout)["reason"] == "invalid_response"
    assert "lone surrogate" in ran.stdout
    story = run_cli("story", "sur-1", home=home)
    assert story.code == 0 and "invalid response" in story.stdout, story.stdout + story.stderr
    assert run_cli("audit", "verify", home=home).code == 0


def test_item12_a_credential_with_a_trailing_newline_is_sent_stripped_and_never_shown(
    home: Path, tmp_path: Path
) -> None:
    with Simulator(token=SECRET) as sim:
        contract = write(tmp_path, sim.url)
        ran = watch(contract, "happy-1", home, env={"PW_TOKEN": SECRET + "\n"})
        assert ran.code == 0, (ran.stdout, ran.stderr)
        assert all(r.auth_ok for r in sim.requests("happy-1"))
        refused = watch(contract, "happy-2", home, env={"PW_TOKEN": SECRET + "\n\x1b[2J"})
    assert refused.code == 2 and "Traceback" not in refused.stderr
    assert "PW_TOKEN" in refused.stderr and "printable ASCII" in refused.stderr
    statuses = json.loads(run_cli("status", "--json", home=home).stdout)
    assert [s["operation"] for s in statuses] == ["happy-1"]  # the refused one created nothing
    assert_nowhere(SECRET, [ran.stdout, ran.stderr, refused.stdout, refused.stderr, *reads("happy-1", home)], home)


def test_item13_a_provider_that_echoes_the_credential_gets_it_stored_and_shown_nowhere(
    home: Path, tmp_path: Path
) -> None:
    echo = {"X-Echo-Id": SECRET, "Retry-After": f"Bearer {SECRET}"}
    error = {"message": f"token Bearer {SECRET} is weak", "b64": base64.b64encode(SECRET.encode()).decode()}
    with Simulator(token=SECRET) as sim:
        sim.add_job(
            "echo-1",
            [
                Step(status=503, body={"error": SECRET}, headers=echo),
                Step(body={"state": "running", "error": error}, headers=echo),
                Step(body={"state": SECRET, "result_url": quote(SECRET, safe="")}, headers=echo),
            ],
        )
        sim.add_job("echo-2", [Step(body={"state": "failed", "error": error}, headers=echo)])
        contract = write(tmp_path, sim.url, extra_top='request_id_header = "X-Echo-Id"\n')
        env = {"PW_TOKEN": SECRET}
        first = watch(contract, "echo-1", home, env)
        second = watch(contract, "echo-2", home, env)
    for ran in (first, second):
        assert "Traceback" not in ran.stderr, ran.stderr
    assert first.code == 4 and json.loads(first.stdout)["reason"] == "unknown_state", first.stdout
    assert second.code == 3 and json.loads(second.stdout)["reason"] == "job_failed", second.stdout
    assert "[secret]" in first.stdout
    outputs = [first.stdout, first.stderr, second.stdout, second.stderr, *reads("echo-1", home), *reads("echo-2", home)]
    assert_nowhere(SECRET, outputs, home)


def test_item15_a_bad_url_is_exit_2_before_anything_is_created(home: Path, tmp_path: Path) -> None:
    for bad in ("http://127.0.0.1:1:80", "http://[::1", "http://127.0.0.1:99999"):
        contract = write(tmp_path, bad, secret_env=None)
        ran = watch(contract, "job-1", home)
        assert ran.code == 2, (bad, ran.stdout, ran.stderr)
        assert "Traceback" not in ran.stderr and "status_url" in ran.stderr, ran.stderr
    assert json.loads(run_cli("status", "--json", home=home).stdout) == []
