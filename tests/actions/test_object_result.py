"""An object result (Google's `response`, Replicate's `output`) through the API outcome, `status`, the MCP
views and `fetch-result`: JSON stays JSON, text output is compact JSON through the hostile-text rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pollwarden import Succeeded, Watch
from pollwarden.clock import utcnow
from pollwarden.home.operating import open_store
from pollwarden.mcp_server.views import final, view
from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, write_contract

OUTPUT = {"files": ["https://cdn.example/a.png"], "note": "line\x1b[2Jcleared", "n": 2}


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_an_object_result_end_to_end(sim: Simulator, tmp_path: Path, home: Path) -> None:
    sim.add_job("obj-1", [Step(body={"state": "succeeded", "result_url": OUTPUT})])
    contract = write_contract(tmp_path / "c.toml", sim.url, extra='\n[result]\ntype = "object"\n')
    outcome = Watch(contract, "obj-1", home=home, operation_id="obj").run()
    assert isinstance(outcome, Succeeded) and outcome.result == OUTPUT

    status = json.loads(run_cli("status", "obj", "--json", home=home).stdout)
    assert status["result"] == OUTPUT
    text = run_cli("status", "obj", home=home).stdout
    line = next(row for row in text.splitlines() if row.startswith("result "))
    assert line.split(None, 1)[1] == '{"files":["https://cdn.example/a.png"],"n":2,"note":"line\\u001b[2Jcleared"}'
    assert "\x1b" not in text

    store = open_store(home)
    try:
        stored = store.get("obj")
        assert stored is not None
        now = utcnow()
        assert view(stored.record, now)["result"] == OUTPUT
        assert final(store, stored.record, now)["result"] == OUTPUT
    finally:
        store.close()

    out = tmp_path / "out.json"
    fetched = run_cli("fetch-result", "obj", "--out", str(out), home=home)
    assert fetched.code == 0, fetched.stderr
    assert "bytes of JSON" in fetched.stdout and json.loads(out.read_text(encoding="utf-8")) == OUTPUT
    assert sim.request_count("obj-1") == 1  # written from the record: nothing more was asked of the provider


@pytest.mark.slow  # starts a process: `make test` only (tests/conftest.py FAST)
def test_an_empty_object_is_not_a_success(sim: Simulator, tmp_path: Path, home: Path) -> None:
    sim.add_job("obj-2", [Step(body={"state": "succeeded", "result_url": {}})])
    contract = write_contract(tmp_path / "c.toml", sim.url, extra='\n[result]\ntype = "object"\n')
    outcome = Watch(contract, "obj-2", home=home, operation_id="empty").run()
    assert not isinstance(outcome, Succeeded)
    status = json.loads(run_cli("status", "empty", "--json", home=home).stdout)
    assert status["reason"] == "result_invalid" and "is an empty object" in status["detail"]
