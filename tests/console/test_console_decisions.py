"""`/decisions` at fleet scale (issue 28): grouped by reason with counts, paged, the provider's error on each card,
and the decisions about ended jobs closed in bulk by a person after one confirmation."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from pollwarden.simulator import Simulator

from .conftest import decision, stop_operation
from .test_console_http import csrf_of, flash_after

CRASH = "health check failed: 3/5 pods CrashLoopBackOff"


def test_decisions_are_grouped_by_reason_and_each_card_shows_the_providers_error(
    home: Path, sim: Simulator, contract_path: Path, client: httpx.Client
) -> None:
    failed = stop_operation(home, sim, contract_path, "op-failed", "exp_f", state="failed", error=CRASH)
    stop_operation(home, sim, contract_path, "op-budget", "exp_b")
    page = client.get("/decisions").text
    groups = re.search(r'<nav class="groups".*?</nav>', page)
    assert groups is not None
    assert "all (2)" in groups.group(0) and ">job_failed (1)</a>" in groups.group(0)
    assert ">request_budget_exhausted (1)</a>" in groups.group(0)
    card = re.search(rf'<section class="card decision" id="decision-{failed.decision_id}">.*?</section>', page)
    assert card is not None and f"<strong>The provider said:</strong> {CRASH}" in card.group(0)
    one = client.get("/decisions?reason=job_failed").text
    assert '<strong aria-current="page">job_failed (1)</strong>' in one
    assert one.count('<section class="card decision"') == 1 and f"decision-{failed.decision_id}" in one
    hostile = client.get("/decisions?reason=<script>&page=-1").text  # ignored: every group, the first page
    assert hostile.count('<section class="card decision"') == 2 and "<script>" not in hostile


def test_ended_jobs_decisions_close_in_bulk_after_one_confirmation(
    home: Path, sim: Simulator, contract_path: Path, client: httpx.Client
) -> None:
    failed = [
        stop_operation(home, sim, contract_path, f"op-failed-{n}", f"exp_f{n}", state="failed", error=CRASH)
        for n in range(3)
    ]
    budget = stop_operation(home, sim, contract_path, "op-budget", "exp_b")
    page = client.get("/decisions").text
    assert "Close the 3 job_failed decisions…" in page and "Close the 1 request_budget" not in page
    token = csrf_of(client)
    asked = client.post("/decisions/close", data={"csrf": token, "reason": "job_failed"})
    assert asked.status_code == 200 and "<h1>Close 3 job_failed decisions?</h1>" in asked.text
    assert 'name="confirm" value="yes"' in asked.text and asked.text.count(CRASH) == 3
    assert all(decision(home, f.decision_id).status == "open" for f in failed)  # asking changed nothing
    nameless = client.post("/decisions/close", data={"csrf": token, "reason": "job_failed", "confirm": "yes"})
    assert flash_after(client, nameless).startswith("error: Type your name in &#x27;Decided by&#x27;")
    wrong = client.post(
        "/decisions/close",
        data={"csrf": token, "reason": "request_budget_exhausted", "confirm": "yes", "by": "alice"},
    )
    assert flash_after(client, wrong).startswith("error: Only decisions about jobs that ended at the provider")
    done = client.post(
        "/decisions/close",
        data={"csrf": token, "reason": "job_failed", "confirm": "yes", "by": "alice", "note": "known outage"},
    )
    assert flash_after(client, done) == "ok: Closed 3 job_failed decisions; each is in the audit log."
    for f in failed:
        closed = decision(home, f.decision_id)
        assert (closed.status, closed.decided_by, closed.note) == ("decided", "alice", "known outage")
    assert decision(home, budget.decision_id).status == "open"
    after = client.get("/decisions").text
    assert "Close the" not in after and "all (1)" in after


def test_the_lists_decide_link_opens_that_decision_whatever_page_it_is_on(
    home: Path, sim: Simulator, contract_path: Path, client: httpx.Client
) -> None:
    first = stop_operation(home, sim, contract_path, "op-one", "exp_1")
    second = stop_operation(home, sim, contract_path, "op-two", "exp_2")
    listed = client.get("/").text
    link = re.search(r'<tr data-operation="op-two".*?<a href="([^"]+)">decide</a>', listed)
    assert (
        link is not None and link.group(1) == f"/decisions?decision={second.decision_id}#decision-{second.decision_id}"
    )
    page = client.get(link.group(1).replace("&amp;", "&").split("#")[0]).text
    assert page.count('<section class="card decision"') == 1 and f'id="decision-{second.decision_id}"' in page
    assert f'id="decision-{first.decision_id}"' not in page
    assert client.get("/decisions?decision=nonesuch").status_code == 200
    hostiles = ("/decisions?decision=%00", "/?q=%00&contract=%00x&phase=%1b", "/?page=99999999999&show=%e2%80%ae")
    for hostile in (*hostiles, "/?page=%C2%B2", "/decisions?page=%C2%B2"):  # '²' passes str.isdigit, not int()
        answer = client.get(hostile)
        assert answer.status_code == 200 and "\x00" not in answer.text and "\u202e" not in answer.text, hostile
