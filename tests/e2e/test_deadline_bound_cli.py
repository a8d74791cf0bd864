"""The deadline bounds every wait, with the real CLI: a first check at or after the deadline (or the usefulness
window) is refused at start with an exit-2 message naming both durations, before anything is created or sent; and
an operation whose limits a resume narrows below its next poll stops at the new deadline instead of sleeping on."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from pollwarden import events as ev
from pollwarden.clock import utcnow
from pollwarden.core.contract.parse import load_contract
from pollwarden.core.durations import parse_rfc3339
from pollwarden.core.reasons import DelaySource
from pollwarden.core.record import new_record
from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator, Step
from tests.conftest import install, run_cli, write_contract


def _late_contract(path: Path, base: str, first_check: str, deadline: str = "2h") -> Path:
    written = write_contract(path, base, deadline=deadline)
    text = written.read_text(encoding="utf-8").replace("[schedule]\n", f'[schedule]\nfirst_check = "{first_check}"\n')
    written.write_text(text, encoding="utf-8")
    return written


def test_a_deadline_shorter_than_the_first_check_is_refused_naming_both(
    sim: Simulator, home: Path, tmp_path: Path
) -> None:
    contract = _late_contract(tmp_path / "c.toml", sim.url, "30s")
    ran = run_cli("watch", "--contract", str(contract), "--job", "happy-1", "--deadline", "2s", home=home)
    assert ran.code == 2, ran.stdout + ran.stderr
    assert "--deadline 2s is not longer than contract 'exports''s first_check 30s" in ran.stderr
    assert "nothing could be sent" in ran.stderr and "Traceback" not in ran.stderr
    useful = run_cli("watch", "--contract", str(contract), "--job", "happy-1", "--useful-for", "30s", home=home)
    assert useful.code == 2 and "--useful-for 30s is not longer than" in useful.stderr, useful.stderr
    assert sim.request_count("happy-1") == 0
    listed = run_cli("status", "--json", home=home)
    assert listed.code in (0, 2) and "happy-1" not in listed.stdout  # nothing was created


def test_a_contract_whose_first_check_falls_after_its_own_deadline_is_refused(
    sim: Simulator, home: Path, tmp_path: Path
) -> None:
    contract = _late_contract(tmp_path / "c.toml", sim.url, "30s", deadline="2s")
    ran = run_cli("watch", "--contract", str(contract), "--job", "happy-2", home=home)
    assert ran.code == 2, ran.stdout + ran.stderr
    assert "[schedule].first_check 30s is not shorter than [limits].deadline 2s" in ran.stderr
    assert sim.request_count("happy-2") == 0


def test_a_resume_that_narrows_the_deadline_below_the_next_poll_stops_at_the_new_deadline(
    sim: Simulator, home: Path, tmp_path: Path
) -> None:
    """The operation's next poll is an hour away (a provider's Retry-After); a resume narrows its deadline to 3 s.
    Without the bound the watch slept that hour (the run below would time out); it stops at the new deadline."""
    sim.add_job("late-1", [Step(body={"state": "succeeded", "result_url": "/r"})])
    contract_path = write_contract(tmp_path / "c.toml", sim.url, deadline="2h")
    contract = load_contract(contract_path)
    store = open_store(home)
    try:
        install(store, contract)
        created = utcnow()
        record = new_record(contract, operation_id="late-op", job_id="late-1", now=created)
        record = record.waiting(created + timedelta(hours=1), DelaySource.PROVIDER_RETRY_AFTER)
        store.create(record, contract.source_text, ev.Created.prepared(record.summary()))
    finally:
        store.close()
    ran = run_cli("watch", "--contract", str(contract_path), "--operation", "late-op", "--deadline", "3s", "--json",
                  home=home, timeout=120)  # fmt: skip
    assert ran.code == 4, ran.stdout + ran.stderr
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["reason"] == "deadline_exceeded" and result["status_requests_used"] == 0
    assert parse_rfc3339(result["finished_at"]) - created < timedelta(hours=1)
    assert sim.request_count("late-1") == 0


def test_submit_refuses_such_a_deadline_before_anything_is_sent(sim: Simulator, home: Path, tmp_path: Path) -> None:
    contract = _late_contract(tmp_path / "c.toml", sim.url, "30s")
    contract.write_text(contract.read_text() + f'\n[submit]\nurl = "{sim.url}/jobs"\njob_id = "job_id"\n')
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"scenario": "happy"}))
    ran = run_cli("submit", "--contract", str(contract), "--body", str(body), "--deadline", "10s", home=home)
    assert ran.code == 2, ran.stdout + ran.stderr
    assert "--deadline 10s is not longer than contract 'exports''s first_check 30s" in ran.stderr
    assert "nothing was sent" in ran.stderr
    assert [r for r in sim.requests() if r.method == "POST"] == []
