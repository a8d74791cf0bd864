"""Part 12 in the console over real HTTP: the fleet at a glance, the ownership flags and their filters, no
countdown on a final operation, the timeline SVG drawn from the audit events (hostile text escaped), the name
remembered for the session, and what became of a decision (the console and `status OP` alike)."""

from __future__ import annotations

import re
import subprocess
from datetime import timedelta
from pathlib import Path

import httpx

from pollwarden import events as ev
from pollwarden.clock import utcnow
from pollwarden.core.contract.parse import load_contract
from pollwarden.core.record import new_record
from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator
from pollwarden.store.owner import OwnerKind, process_owner, this_host
from tests.conftest import install, run_cli, write_contract
from tests.console.conftest import decision, stop_operation
from tests.console.test_console_http import csrf_of, flash_after

HOSTILE = '</text><script>alert(1)</script>\u202e"x'


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()  # reaped: the pid names no process now
    return proc.pid


def _late_operation(home: Path, contract_path: Path, operation_id: str, *, owner_kind: OwnerKind) -> None:
    """An active operation due ten minutes ago whose last watcher (a process of this host) is gone."""
    contract = load_contract(contract_path)
    past = utcnow() - timedelta(minutes=10)
    store = open_store(home)
    try:
        record = new_record(contract, operation_id=operation_id, job_id=f"job-{operation_id}", now=past)
        install(store, contract)
        store.create(record, contract.source_text, ev.Created.prepared(record.summary()))
        claimed = store.claim(operation_id, process_owner(owner_kind, pid=_dead_pid()), past, timedelta(1))
        assert claimed is not None
        store.release(claimed[0])
    finally:
        store.close()


def _row(page: str, operation_id: str) -> str:
    found = re.search(rf'<tr data-operation="{re.escape(operation_id)}".*?</tr>', page)
    assert found is not None, f"no row for {operation_id}"
    return found.group(0)


def _listed(page: str) -> list[str]:
    return re.findall(r'<tr data-operation="([^"]+)"', page)


def test_fleet_counts_flags_and_filters(home: Path, sim: Simulator, contract_path: Path, client: httpx.Client) -> None:
    stop_operation(home, sim, contract_path, "op-stopped", "exp_stopped")
    _late_operation(home, contract_path, "op-orphan", owner_kind="watch")
    _late_operation(home, contract_path, "op-late", owner_kind="worker")
    page = client.get("/").text

    fleet = re.search(r'<table class="fleet".*?</table>', page)
    assert fleet is not None
    counts = dict(re.findall(r'data-count="(\w+)">(\d+)<', fleet.group(0)))
    assert counts == {"active": "2", "due": "2", "overdue": "2", "awaiting": "1"}

    orphan = _row(page, "op-orphan")
    assert 'data-flags="overdue orphaned"' in orphan
    assert '<span class="badge flag-orphaned">orphaned</span>' in orphan
    assert f"watch on {this_host()} (pid " in orphan and "gone" in orphan
    late = _row(page, "op-late")
    assert 'data-flags="overdue"' in late and "flag-orphaned" not in late
    assert 'data-flags=""' in _row(page, "op-stopped")

    assert sorted(_listed(page)) == ["op-late", "op-orphan", "op-stopped"]
    assert sorted(_listed(client.get("/?show=overdue").text)) == ["op-late", "op-orphan"]
    assert _listed(client.get("/?show=orphaned").text) == ["op-orphan"]
    assert _listed(client.get("/?show=awaiting").text) == ["op-stopped"]
    assert sorted(_listed(client.get("/?show=nonsense").text)) == sorted(_listed(page))
    assert '<strong aria-current="page">orphaned (1)</strong>' in client.get("/?show=orphaned").text


def test_no_countdown_on_a_final_operation(
    home: Path, sim: Simulator, contract_path: Path, client: httpx.Client
) -> None:
    stopped = stop_operation(home, sim, contract_path, "op-final", "exp_final")
    row = _row(client.get("/").text, "op-final")
    assert re.search(r'stopped at</span> <time datetime="[^"]+">\d\d:\d\d:\d\d UTC</time>', row), row
    assert not re.search(r">in \d", row), row
    page = client.get(f"/operations/{stopped.operation_id}").text
    assert "Deadline</span> in" not in page and "stopped at</span> <time" in page


def _svg(page: str) -> str:
    found = re.search(r'<svg class="timeline".*?</svg>', page, re.S)
    assert found is not None, "no timeline on the page"
    return found.group(0)


def test_the_timeline_is_drawn_from_the_audit_events(
    home: Path, sim: Simulator, contract_path: Path, client: httpx.Client
) -> None:
    stopped = stop_operation(home, sim, contract_path, "op-tl", "exp_tl", max_requests=3)
    store = open_store(home, keys="read")
    try:
        events = store.events(stopped.operation_id)
    finally:
        store.close()
    observed = [e for e in events if e.kind == "observed"]
    waits = [e.data["delay_source"] for e in events if e.kind == "decision" and e.data.get("action") == "wait"]
    svg = _svg(client.get(f"/operations/{stopped.operation_id}").text)
    assert 'role="img"' in svg and "aria-label=" in svg and "<title>" in svg
    assert f'data-requests="{len(observed)}"' in svg and len(observed) == 3
    assert svg.count('class="tl-request"') == 3
    assert re.findall(r'class="tl-wait" id="tl-wait-\d+" data-source="(\w+)"', svg) == waits and waits
    assert 'id="tl-stop"' in svg and 'data-stop="stopped: request budget exhausted"' in svg
    assert "3 checks from" in svg and "answers: running, running, running" in svg
    assert 'class="tl-budget"' in svg and 'id="tl-deadline"' in svg


def test_hostile_provider_text_is_escaped_inside_the_svg(
    home: Path, sim: Simulator, contract_path: Path, client: httpx.Client
) -> None:
    stopped = stop_operation(home, sim, contract_path, "op-svg", "exp_svg", state=HOSTILE)
    page = client.get(f"/operations/{stopped.operation_id}").text
    svg = _svg(page)
    assert "<script>" not in page and "\u202e" not in page
    assert "&lt;/text&gt;&lt;script&gt;alert(1)&lt;/script&gt;\\u202e&quot;x" in svg
    assert svg.count("<svg") == 1 and svg.count("</svg>") == 1


CANCEL = '\n[cancel]\nurl = "{base}/jobs/{{job_id}}/cancel"\n'


def test_a_cancel_is_followed_through_on_the_page_and_in_status(
    home: Path, sim: Simulator, tmp_path: Path, client: httpx.Client
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url, base_delay="50ms", extra=CANCEL.format(base=sim.url))
    stopped = stop_operation(home, sim, contract, "op-cancel", "exp_cancel")
    options = {o.kind.value: o.number for o in decision(home, stopped.decision_id).request.options}
    url = f"/decisions/{stopped.decision_id}/decide"
    sent = client.post(
        url, data={"option": str(options["cancel"]), "by": "alice", "csrf": csrf_of(client), "confirm": "yes"}
    )
    assert flash_after(client, sent).startswith("ok: cancel at provider sent")
    page = client.get("/operations/op-cancel").text
    followed = re.search(r'<ul class="followups">(.*?)</ul>', page)
    assert followed is not None, page
    line = followed.group(1)
    assert re.search(r"cancel requested by alice at \d\d:\d\d:\d\d UTC — provider answered 200 \(accepted\)", line)
    assert "operation stays stopped (request budget exhausted)" in line
    assert 'id="tl-stop"' in page and 'data-kind="action"' in page and 'data-kind="decided"' in page
    status = run_cli("status", "op-cancel", home=home)
    assert status.code == 0, status.stderr
    follow = [ln for ln in status.stdout.splitlines() if ln.startswith("follow-up")]
    assert len(follow) == 1 and "cancel requested by alice" in follow[0] and "provider answered 200" in follow[0]


def test_an_extension_is_followed_through_and_the_name_is_remembered(
    home: Path, sim: Simulator, contract_path: Path, client: httpx.Client
) -> None:
    first = stop_operation(home, sim, contract_path, "op-ext", "exp_ext")
    second = stop_operation(home, sim, contract_path, "op-ext2", "exp_ext2")
    third = stop_operation(home, sim, contract_path, "op-ext3", "exp_ext3")
    assert 'name="by" required maxlength="100" value=""' in client.get("/decisions").text
    options = {o.kind.value: o for o in decision(home, first.decision_id).request.options}
    extend = options["extend"]
    url = f"/decisions/{first.decision_id}/decide"
    done = client.post(url, data={"option": str(extend.number), "by": "bob", "csrf": csrf_of(client)})
    assert flash_after(client, done).startswith("ok: extended operation op-ext")
    cards = client.get("/decisions").text
    assert f'id="decision-{second.decision_id}"' in cards
    assert 'name="by" required maxlength="100" value="bob"' in cards  # prefilled, still an editable input
    page = client.get("/operations/op-ext").text
    assert re.search(rf"extension granted: \+[0-9a-z]+, \+{extend.extra_checks} checks by bob at \d\d:", page)
    assert "active again" in page
    status = run_cli("status", "op-ext", home=home).stdout
    assert "extension granted" in status and "by bob" in status and "active again" in status
    # Another name on the next decision replaces the remembered one.
    url = f"/decisions/{second.decision_id}/decide"
    client.post(url, data={"option": "refuse", "by": "carol", "csrf": csrf_of(client)})
    cards = client.get("/decisions").text
    assert f'id="decision-{third.decision_id}"' in cards and 'value="carol"' in cards and 'value="bob"' not in cards
