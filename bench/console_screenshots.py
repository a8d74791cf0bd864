"""The console's screenshots in docs/img/, at 1,280 x 800, from a real home and the simulated provider.

Not a test: it builds a throwaway home with a few operations (one stopped after a Retry-After and local
backoff, one cancelled by a person, one orphaned, one succeeded after an extension), serves the console on
loopback and has Debian's Chromium (through Playwright) render the operations page and one operation's page.
Run from the repository root:

    python -m bench.console_screenshots [--out docs/img]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from pollwarden import events as ev
from pollwarden.clock import utcnow
from pollwarden.console import ConsoleServer
from pollwarden.core.contract.parse import load_contract
from pollwarden.core.record import new_record
from pollwarden.engine import Engine
from pollwarden.engine.installed import install
from pollwarden.home.operating import decide, open_store
from pollwarden.simulator import Simulator, Step, contract_text
from pollwarden.store.owner import this_host
from pollwarden.transport.http import StatusClient

CHROMIUM = "/usr/bin/chromium"
TOKEN = "screenshot-token-0123456789abcdef"


def _run(home: Path, contract_path: Path, operation_id: str, job_id: str, max_requests: int) -> None:
    contract = load_contract(contract_path)
    store = open_store(home)
    try:
        record = new_record(contract, operation_id=operation_id, job_id=job_id, now=utcnow(), max_requests=max_requests)
        # As an operator would have first (`pollwarden contracts install`): a decision runs only installed contracts.
        install(store, contract, by="screenshots", via="screenshots", source=str(contract_path), now=utcnow())
        store.create(record, contract.source_text, ev.Created.prepared(record.summary()))
        with StatusClient(contract, None, clock=utcnow) as client:
            Engine(store, owner="screenshots").run(contract, client, operation_id)
    finally:
        store.close()


def _decide(home: Path, operation_id: str, kind: str, by: str) -> None:
    store = open_store(home)
    try:
        (open_one,) = store.decisions(operation_id, open_only=True)
        option = next(o.number for o in open_one.request.options if o.kind.value == kind)
        decide(store, open_one.request.decision_id, option=option, refuse=False, by=by, note=None)
    finally:
        store.close()


def _orphan(home: Path, contract_path: Path, operation_id: str) -> None:
    """An active operation due minutes ago whose `watch` process is gone."""
    contract = load_contract(contract_path)
    past = utcnow() - timedelta(minutes=4)
    proc = subprocess.Popen(["true"])
    proc.wait()
    store = open_store(home)
    try:
        record = new_record(contract, operation_id=operation_id, job_id="exp_orphan_5d2", now=past)
        store.create(record, contract.source_text, ev.Created.prepared(record.summary()))
        claimed = store.claim(operation_id, f"watch/{this_host()}:{proc.pid}:0000", past, timedelta(seconds=60))
        if claimed is not None:
            store.release(claimed[0])
    finally:
        store.close()


def build(home: Path, sim: Simulator, workdir: Path) -> str:
    """The operations to show; returns the id of the one whose timeline is shot."""
    cancel = f'\n[cancel]\nurl = "{sim.url}/jobs/{{job_id}}/cancel"\n'
    path = workdir / "exports.toml"
    path.write_text(
        contract_text(sim.url, base_delay="150ms", max_delay="1500ms", deadline="2m", extra=cancel), encoding="utf-8"
    )
    running = Step(body={"state": "running"})
    sim.add_job(
        "exp_nightly_7f3",
        [
            Step(body={"state": "queued"}),
            running,
            Step(status=503, headers={"Retry-After": "1"}),
            Step(body={"state": "running"}, times=50),
        ],
    )
    _run(home, path, "nightly-export-2026-12-01", "exp_nightly_7f3", 7)
    sim.add_job("exp_report_19a", [running])
    _run(home, path, "report-export-01", "exp_report_19a", 3)
    _decide(home, "report-export-01", "cancel", "alice")
    sim.add_job("exp_ledger_44b", [running])
    _run(home, path, "ledger-sync-" + "0f9e8d7c6b5a" * 5, "exp_ledger_44b", 2)
    _decide(home, "ledger-sync-" + "0f9e8d7c6b5a" * 5, "extend", "bob")
    sim.add_job("exp_ledger_44b", [Step(body={"state": "succeeded", "result_url": "https://files.example/l.csv"})])
    store = open_store(home)
    try:
        contract = load_contract(path)
        with StatusClient(contract, None, clock=utcnow) as client:
            Engine(store, owner="screenshots").run(contract, client, "ledger-sync-" + "0f9e8d7c6b5a" * 5)
    finally:
        store.close()
    _orphan(home, path, "invoice-batch-311")
    return "nightly-export-2026-12-01"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, Simulator() as sim:
        home = Path(tmp) / "home"
        home.mkdir()
        shown = build(home, sim, Path(tmp))
        with ConsoleServer(home, token=TOKEN, log=open("/dev/null", "w")) as console, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{console.url}/login?token={TOKEN}")
            for name, path in (
                ("console-operations.png", "/"),
                ("console-timeline.png", f"/operations/{shown}"),
                ("console-followup.png", "/operations/report-export-01"),
            ):
                page.goto(console.url + path)
                width = page.evaluate("document.documentElement.scrollWidth")
                page.screenshot(path=str(args.out / name))
                print(f"{args.out / name}: {path} (scrollWidth {width})")
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
