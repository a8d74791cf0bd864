"""[auth] token commands and [[rate_limit]] signals end to end: the real CLI against a loopback provider.

The provider accepts only the second token a command prints (the first has "expired"): the watch fetches the
token again once after the 401 and succeeds, and neither token appears in stdout, stderr, the database or the
audit. A GitHub-style 403 with `x-ratelimit-remaining: 0` waits until `x-ratelimit-reset` instead of stopping.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.conftest import run_cli

TOKEN_SCRIPT = """\
import pathlib, sys
counter = pathlib.Path(sys.argv[1])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
print(f"tok-{n}-7f3a9c1e-DO-NOT-LEAK")
"""


@dataclass(frozen=True)
class Seen:
    path: str
    headers: dict[str, str]
    at: float


Handler = Callable[[Seen, int], tuple[int, dict[str, str], bytes]]


@contextmanager
def provider(answer: Handler) -> Iterator[tuple[str, list[Seen]]]:
    seen: list[Seen] = []

    class _Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            request = Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, time.time())
            seen.append(request)
            status, headers, body = answer(request, len(seen))
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            """Quiet: the test reads `seen`."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def _contract(path: Path, base_url: str, auth: str, extra: str = "") -> Path:
    path.write_text(
        f"""name = "auth-e2e"
status_url = "{base_url}/jobs/{{job_id}}"
timeout = "5s"

[auth]
{auth}

[states]
pending = ["running"]
success = ["succeeded"]
failure = ["failed"]

[fields]
state = "state"
result = "result_url"

[schedule]
base_delay = "50ms"
max_delay = "100ms"

[limits]
deadline = "1m"
max_requests = 6
{extra}""",
        encoding="utf-8",
    )
    return path


def _all_bytes_under(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file())


SUCCEEDED = json.dumps({"state": "succeeded", "result_url": "https://files.example/r"}).encode()


def test_a_401_fetches_the_command_token_again_once_and_no_token_leaks(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "token.py"
    script.write_text(TOKEN_SCRIPT, encoding="utf-8")
    counter = tmp_path / "calls"

    def answer(request: Seen, n: int) -> tuple[int, dict[str, str], bytes]:
        token = request.headers.get("authorization", "")
        if token != "Bearer tok-2-7f3a9c1e-DO-NOT-LEAK":
            # a provider that echoes what it was sent: the scrubber must catch the echo
            return 401, {"WWW-Authenticate": f'Bearer error="{token}"'}, json.dumps({"error": token}).encode()
        return 200, {}, SUCCEEDED

    with provider(answer) as (url, seen):
        command = json.dumps([sys.executable, str(script), str(counter)])
        contract = _contract(tmp_path / "c.toml", url, f'token_command = {command}\ntoken_ttl = "50m"')
        ran = run_cli("watch", "--contract", str(contract), "--job", "j1", "--operation", "op-1", "--json", home=home)
        assert ran.code == 0, (ran.stdout, ran.stderr)
        assert [r.headers["authorization"] for r in seen] == [
            "Bearer tok-1-7f3a9c1e-DO-NOT-LEAK",
            "Bearer tok-2-7f3a9c1e-DO-NOT-LEAK",
        ]
    assert counter.read_text() == "2"
    outputs = [ran.stdout, ran.stderr, run_cli("story", "op-1", "--json", home=home).stdout]
    outputs.append(run_cli("why", "op-1", "--json", home=home).stdout)
    export = tmp_path / "export.jsonl"
    assert run_cli("audit", "export", "--out", str(export), home=home).code == 0
    outputs.append(export.read_text())
    assert "credential_refreshed" in outputs[2]
    for text in outputs:
        assert "DO-NOT-LEAK" not in text and "7f3a9c1e" not in text
    assert b"7f3a9c1e" not in _all_bytes_under(home)


def test_a_second_401_in_a_row_stops_authorization_denied(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "token.py"
    script.write_text(TOKEN_SCRIPT, encoding="utf-8")
    with provider(lambda request, n: (401, {}, b"{}")) as (url, seen):
        command = json.dumps([sys.executable, str(script), str(tmp_path / "calls")])
        contract = _contract(tmp_path / "c.toml", url, f"token_command = {command}")
        ran = run_cli("watch", "--contract", str(contract), "--job", "j1", "--json", home=home)
        assert len(seen) == 2  # never a loop
    assert ran.code == 4 and json.loads(ran.stdout.splitlines()[-1])["reason"] == "authorization_denied"
    assert "7f3a9c1e" not in ran.stdout + ran.stderr


def test_a_failing_token_command_is_exit_2_naming_it_and_never_its_output(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text("import sys\nprint('tok-secret-7f3a9c1e')\nsys.exit(3)\n", encoding="utf-8")
    contract = _contract(
        tmp_path / "c.toml", "http://127.0.0.1:9", f"token_command = {json.dumps([sys.executable, str(script)])}"
    )
    ran = run_cli("watch", "--contract", str(contract), "--job", "j1", home=home)
    assert ran.code == 2
    assert "exited with status 3" in ran.stderr and Path(sys.executable).name in ran.stderr
    assert "7f3a9c1e" not in ran.stdout + ran.stderr


def test_a_github_rate_limit_403_waits_until_the_reset_then_succeeds(home: Path, tmp_path: Path) -> None:
    resets: list[int] = []

    def answer(request: Seen, n: int) -> tuple[int, dict[str, str], bytes]:
        if n == 1:
            resets.append(int(request.at) + 2)  # GitHub's reset is whole epoch seconds, 1 to 2 s from now
            headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(resets[0])}
            return 403, headers, b'{"message": "API rate limit exceeded for user ID 1."}'
        return 200, {"x-ratelimit-remaining": "4999"}, SUCCEEDED

    signal = """
[[rate_limit]]
status = [403, 429]
header = "x-ratelimit-remaining"
equals = "0"
reset_header = "x-ratelimit-reset"
reset = "epoch_seconds"
"""
    with provider(answer) as (url, seen):
        contract = _contract(tmp_path / "c.toml", url, 'secret_env = "GH_TOKEN"', signal)
        ran = run_cli(
            "watch",
            "--contract",
            str(contract),
            "--job",
            "7",
            "--operation",
            "gh-1",
            "--json",
            home=home,
            env={"GH_TOKEN": "ghp_example_token_0001"},
        )
        assert ran.code == 0, (ran.stdout, ran.stderr)
        assert len(seen) == 2
        assert seen[1].at >= resets[0]  # the reset time is the floor, not the 50 ms backoff
    story = run_cli("story", "gh-1", "--json", home=home).stdout
    assert "provider_retry_after" in story and "rate_limited" in story
