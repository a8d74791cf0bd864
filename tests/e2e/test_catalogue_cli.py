"""The shipped catalogue end to end: `pollwarden contracts`, `watch --contract NAME --var ...`, a `use` file,
[status]/[headers] on the wire, path job ids and `--status-url`, against a loopback provider.

GitLab bodies follow https://docs.gitlab.com/ee/api/pipelines.html#get-a-single-pipeline (trimmed to the
fields the contract reads)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli
from tests.loopback import provider

TOKEN = {"GITLAB_TOKEN": "glpat-secret-test-token-123"}


def pipeline(status: str, base: str) -> dict[str, object]:
    return {
        "id": 7,
        "iid": 3,
        "project_id": 42,
        "status": status,
        "ref": "main",
        "web_url": f"{base}/g/p/-/pipelines/7",
    }


def _last_json(stdout: str) -> dict[str, object]:
    result: dict[str, object] = json.loads(stdout.strip().splitlines()[-1])
    return result


def test_contracts_lists_and_shows_the_shipped_ones(home: Path) -> None:
    listed = run_cli("contracts", "--json", home=home)
    assert listed.code == 0, listed.stderr
    gitlab = next(c for c in json.loads(listed.stdout) if c["name"] == "gitlab-pipeline")
    assert gitlab["credentials"] == ["GITLAB_TOKEN"] and gitlab["required_vars"] == ["project"]
    assert gitlab["docs"].startswith("https://docs.gitlab.com/")
    table = run_cli("contracts", home=home)
    assert table.code == 0 and "gitlab-pipeline" in table.stdout and "--var project=..." in table.stdout
    shown = run_cli("contracts", "show", "gitlab-pipeline", home=home)
    assert shown.code == 0 and 'name = "gitlab-pipeline"' in shown.stdout
    unknown = run_cli("contracts", "show", "gitlub", home=home)
    assert unknown.code == 2 and "shipped: " in unknown.stderr and "gitlab-pipeline" in unknown.stderr


def test_watch_a_shipped_contract_by_name_with_vars(home: Path) -> None:
    with provider() as gitlab:
        path = "/api/v4/projects/42/pipelines/7"
        gitlab.answer(path, (200, pipeline("success", gitlab.url)))
        ran = run_cli(
            "watch", "--contract", "gitlab-pipeline", "--var", f"base_url={gitlab.url}", "--var", "project=42",
            "--job", "7", "--json", home=home, env=TOKEN,
        )  # fmt: skip
        assert ran.code == 0, ran.stderr
        result = _last_json(ran.stdout)
        assert result["result"] == f"{gitlab.url}/g/p/-/pipelines/7"
        [seen] = gitlab.requests(path)
        assert seen.method == "GET" and seen.headers["private-token"] == TOKEN["GITLAB_TOKEN"]
        assert "authorization" not in seen.headers
    assert TOKEN["GITLAB_TOKEN"] not in ran.stdout + ran.stderr
    # A resume reads the stored envelope: same vars, same URL, nothing more sent for a finished operation.
    again = run_cli("watch", "--operation", str(result["operation"]), "--json", home=home, env=TOKEN)
    assert again.code == 0, again.stderr


def test_bad_vars_and_names_are_exit_2_and_create_nothing(home: Path) -> None:
    cases = [
        (("--var", "project=42", "--var", "projct=1"), "unknown var projct; this contract declares: base_url, project"),
        ((), "var project is required: give it with --var project=VALUE"),
        (("--var", "project=../admin"), "var project: holds '..'"),
        (("--var", "project=42", "--var", "base_url=http://x.example/?q=1"), "var base_url:"),
        (("--var", "project"), "NAME=VALUE"),
        (("--var", "project=1", "--var", "project=2"), "--var project is given twice"),
    ]
    for flags, words in cases:
        ran = run_cli("watch", "--contract", "gitlab-pipeline", "--job", "7", *flags, home=home, env=TOKEN)
        assert ran.code == 2, (flags, ran.stderr)
        assert words in ran.stderr, (flags, ran.stderr)
    ran = run_cli("watch", "--contract", "gitlub-pipeline", "--job", "7", home=home, env=TOKEN)
    assert ran.code == 2 and "shipped: " in ran.stderr
    assert list(home.iterdir()) == []  # no database, no keys: nothing was created


def _use_file(tmp_path: Path, base: str) -> Path:
    path = tmp_path / "mine.toml"
    path.write_text(
        f'use = "gitlab-pipeline"\n[vars]\nbase_url = "{base}"\nproject = "42"\n'
        '[schedule]\nbase_delay = "50ms"\nmax_delay = "100ms"\n',
        encoding="utf-8",
    )
    return path


def test_a_use_file_runs_the_whole_lifecycle_and_enqueue_stores_it(home: Path, tmp_path: Path) -> None:
    with provider() as gitlab:
        path = "/api/v4/projects/42/pipelines/9"
        gitlab.answer(
            path,
            (200, pipeline("created", gitlab.url)),
            (200, pipeline("running", gitlab.url)),
            (200, pipeline("failed", gitlab.url)),
        )
        contract = _use_file(tmp_path, gitlab.url)
        ran = run_cli("watch", "--contract", str(contract), "--job", "9", "--json", home=home, env=TOKEN)
        assert ran.code == 3, ran.stderr
        assert _last_json(ran.stdout)["reason"] == "job_failed" and len(gitlab.requests(path)) == 3
        # Another project is another version of the contract: an operator installs it before it is enqueued.
        refused = run_cli("enqueue", "--contract", str(contract), "--job", "10", "--var", "project=43", home=home)
        assert refused.code == 2 and "pollwarden contracts install" in refused.stderr, refused.stderr
        installed = run_cli("contracts", "install", str(contract), "--var", "project=43", "--by", "alice", home=home)
        assert installed.code == 0, installed.stderr
        queued = run_cli("enqueue", "--contract", str(contract), "--job", "10", "--var", "project=43", home=home)
        assert queued.code == 0, queued.stderr
        status = json.loads(run_cli("status", "--json", home=home).stdout)
        assert {row["job"] for row in status} >= {"9", "10"}


def _custom(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(body, encoding="utf-8")
    return path


def test_a_post_status_with_static_headers_on_the_wire(home: Path, tmp_path: Path) -> None:
    with provider() as aws:
        contract = _custom(
            tmp_path,
            f'name = "post"\nstatus_url = "{{base_url}}/?j={{job_id}}"\n[vars]\nbase_url = "{aws.url}"\n'
            '[status]\nmethod = "POST"\nbody = \'{"JobId": {job_id}, "MaxResults": 1}\'\n'
            'content_type = "application/x-amz-json-1.1"\n'
            '[headers]\nX-Amz-Target = "Textract.GetDocumentAnalysis"\n'
            '[states]\npending = ["IN_PROGRESS"]\nsuccess = ["SUCCEEDED"]\nfailure = ["FAILED"]\n'
            '[fields]\nstate = "JobStatus"\nresult = "JobStatus"\n',
        )
        aws.answer("/?j=job%201", (200, {"JobStatus": "SUCCEEDED"}))
        ran = run_cli("watch", "--contract", str(contract), "--job", "job 1", "--json", home=home)
        assert ran.code == 0, ran.stderr
        [seen] = aws.requests("/?j=job%201")
        assert seen.method == "POST" and json.loads(seen.body) == {"JobId": "job 1", "MaxResults": 1}
        assert seen.headers["x-amz-target"] == "Textract.GetDocumentAnalysis"
        assert seen.headers["content-type"] == "application/x-amz-json-1.1"


HANDLES = (
    'name = "ops"\nstatus_url = "{{base_url}}/v1/{{job_id:path}}"\nstatus_url_handles = true\n'
    '[vars]\nbase_url = "{base}"\n'
    '[states]\npending = ["running"]\nsuccess = ["succeeded"]\nfailure = ["failed"]\n'
    '[fields]\nstate = "status"\nresult = "status"\n'
)


def test_path_job_ids_and_status_urls(home: Path, tmp_path: Path) -> None:
    with provider() as ops:
        contract = _custom(tmp_path, HANDLES.format(base=ops.url))
        ops.answer("/v1/projects/p/operations/1", (200, {"status": "succeeded"}))
        ran = run_cli("watch", "--contract", str(contract), "--job", "projects/p/operations/1", "--json", home=home)
        assert ran.code == 0, ran.stderr
        for bad in ("projects/../operations/1", "/etc", "a//b", "a?x"):
            refused = run_cli("watch", "--contract", str(contract), "--job", bad, home=home)
            assert refused.code == 2 and "--job" in refused.stderr, (bad, refused.stderr)
        ops.answer("/op/abc?api-version=2024-01-01", (200, {"status": "succeeded"}))
        url = f"{ops.url}/op/abc?api-version=2024-01-01"
        ran = run_cli("watch", "--contract", str(contract), "--status-url", url, "--json", home=home)
        assert ran.code == 0, ran.stderr
        assert _last_json(ran.stdout)["job"] == url and len(ops.requests("/op/abc?api-version=2024-01-01")) == 1
        before = len(ops.seen)
        for bad, words in [
            ("http://evil.example/op/abc", "is not on"),
            (url.replace("http://", "http://u:p@"), "userinfo"),
        ]:
            refused = run_cli("watch", "--contract", str(contract), "--status-url", bad, home=home)
            assert refused.code == 2 and f"--status-url {words}" in refused.stderr.replace("must not carry ", ""), (
                bad,
                refused.stderr,
            )
        plain = _custom(tmp_path, HANDLES.format(base=ops.url).replace("status_url_handles = true\n", ""))
        refused = run_cli("watch", "--contract", str(plain), "--status-url", url, home=home)
        assert refused.code == 2 and "does not take a status URL" in refused.stderr
        assert len(ops.seen) == before  # nothing refused was ever sent


def test_enqueue_a_status_url_and_the_worker_polls_exactly_it(home: Path, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys
    import time

    with provider() as ops:
        # The default schedule's 5 s base delay would be a 2.5-5 s wait for the second poll, which is all this
        # test waits for.
        contract = _custom(tmp_path, HANDLES.format(base=ops.url) + '[schedule]\nbase_delay = "100ms"\n')
        url = f"{ops.url}/op/xyz?api-version=2024-01-01"
        ops.answer("/op/xyz?api-version=2024-01-01", (200, {"status": "running"}), (200, {"status": "succeeded"}))
        assert run_cli("contracts", "install", str(contract), "--by", "alice", home=home).code == 0
        assert run_cli("enqueue", "--contract", str(contract), home=home).code == 2  # neither --job nor --status-url
        off = run_cli("enqueue", "--contract", str(contract), "--status-url", "http://evil.example/op/1", home=home)
        assert off.code == 2 and "--status-url" in off.stderr
        queued = run_cli("enqueue", "--contract", str(contract), "--status-url", url, "--operation", "az-1", home=home)
        assert queued.code == 0, queued.stderr
        worker = subprocess.Popen(
            [sys.executable, "-m", "pollwarden", "worker", "--home", str(home)],
            env={**os.environ, "POLLWARDEN_HOME": str(home)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                shown = json.loads(run_cli("status", "az-1", "--json", home=home).stdout)
                if shown["phase"] != "active" or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
        finally:
            worker.terminate()
            worker.wait(timeout=30)
        assert shown["phase"] == "succeeded", shown
        assert [s.path for s in ops.seen] == ["/op/xyz?api-version=2024-01-01"] * 2
