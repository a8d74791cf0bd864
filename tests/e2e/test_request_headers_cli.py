"""What a provider sees: exactly the contract's headers (issue 24). pollwarden sends nothing of its own (no
reservation, no lease) unless the contract's `[headers]` ask for it with `{reservation}` / `{lease}`, and then only
on status requests; the identifiers stay in the record and the audit either way."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pollwarden.simulator import Simulator
from tests.conftest import run_cli, write_contract

TRANSPORT = {"host", "user-agent", "accept", "accept-encoding"}
"""What the HTTP client itself writes on a status poll (framing aside)."""

ASKED = """
[headers]
X-Api-Version = "2024-01"
X-Slot = "n-{reservation}"
X-Fence = "{lease}"
"""


def _names(headers: dict[str, str]) -> set[str]:
    return {name for name in headers if name not in ("content-length", "connection")}


def test_without_headers_in_the_contract_the_provider_sees_no_pollwarden_header(
    sim: Simulator, home: Path, tmp_path: Path
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url)
    ran = run_cli("watch", "--contract", str(contract), "--job", "happy-1", "--operation", "op", home=home)
    assert ran.code == 0, ran.stderr
    requests = sim.requests("happy-1")
    assert len(requests) == 4
    for request in requests:
        assert _names(dict(request.headers)) == TRANSPORT, request.headers
        assert not any(name.startswith("x-pollwarden") for name in request.headers)
    # The reservation numbers and lease tokens are still in the record and the audit.
    trail = json.loads(run_cli("story", "op", "--json", home=home).stdout)
    reserved = [e["data"] for e in trail if e["kind"] == "reserved"]
    assert [r["request_no"] for r in reserved] == [1, 2, 3, 4]
    assert all(isinstance(r.get("lease_token"), int) for r in reserved), reserved


def test_a_contract_that_asks_gets_its_headers_on_status_requests_only(
    sim: Simulator, home: Path, tmp_path: Path
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url, extra=ASKED)
    ran = run_cli("watch", "--contract", str(contract), "--job", "happy-2", "--operation", "op", home=home)
    assert ran.code == 0, ran.stderr
    polls = sim.requests("happy-2")
    assert [r.headers["x-slot"] for r in polls] == ["n-1", "n-2", "n-3", "n-4"]
    fences = [int(r.headers["x-fence"]) for r in polls]
    assert fences == sorted(fences) and len(set(fences)) == len(fences)  # one lease per step, tokens grow
    assert all(_names(dict(r.headers)) == TRANSPORT | {"x-api-version", "x-slot", "x-fence"} for r in polls)
    trail = json.loads(run_cli("story", "op", "--json", home=home).stdout)
    assert [e["data"]["lease_token"] for e in trail if e["kind"] == "reserved"] == fences
    fetched = run_cli("fetch-result", "op", "--out", str(tmp_path / "out.json"), home=home)
    assert fetched.code == 0, fetched.stderr
    (download,) = [r for r in sim.requests() if r.path.startswith("/results/")]
    assert download.headers["x-api-version"] == "2024-01"
    assert "x-slot" not in download.headers and "x-fence" not in download.headers


def test_a_placeholder_the_headers_do_not_know_is_exit_2_naming_it(home: Path, tmp_path: Path) -> None:
    contract = write_contract(tmp_path / "c.toml", "http://127.0.0.1:9", extra='\n[headers]\nX-Op = "{operation}"\n')
    ran = run_cli("watch", "--contract", str(contract), "--job", "j", home=home)
    assert ran.code == 2, ran.stdout + ran.stderr
    assert re.search(r"\[headers\]\.X-Op: \{operation\} names no declared var and no placeholder", ran.stderr)
    assert "lease" in ran.stderr and "reservation" in ran.stderr
