"""The console in a real browser (Playwright driving Debian's Chromium), end to end with real processes.

Budget exhausted -> decision listed -> extended by the console's button -> `watch` resumes and succeeds ->
the story shows it -> `audit verify` passes. Skips, saying exactly what is missing, only when the browser
or the Playwright package cannot be had; `.ci/run` installs Chromium so that CI runs it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pollwarden.simulator import Simulator, Step
from tests.conftest import run_cli, write_contract
from tests.engine.test_learning_keys import learnt_home

from .conftest import TOKEN, stop_operation

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

    from pollwarden.console import ConsoleServer

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "console.png"
"""Rewritten only when POLLWARDEN_UPDATE_SCREENSHOT=1, so a test run leaves the work tree clean."""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    sync_api = pytest.importorskip(
        "playwright.sync_api",
        reason="the Python package 'playwright' is not installed (it is in the dev extra: pip install -e '.[dev]')",
    )
    if not CHROMIUM.exists():
        pytest.skip(f"Debian's Chromium is not installed: {CHROMIUM} is missing (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        launched: Browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1180, "height": 600}, java_script_enabled=False)
    context.set_default_timeout(10_000)
    try:
        yield context.new_page()
    finally:
        context.close()


class ConsoleProcess:
    """`pollwarden console` as a person starts it, with its token taken from the environment."""

    def __init__(self, home: Path) -> None:
        env = {**os.environ, "POLLWARDEN_HOME": str(home), "CONSOLE_TOKEN": TOKEN}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pollwarden", "console", "--port", "0", "--token-env", "CONSOLE_TOKEN"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.match(r"pollwarden console on (http://[^/]+)/ ", line)
        if found is None:
            self.proc.kill()
            raise AssertionError(f"the console did not start: {line!r} {self.proc.communicate()[1]}")
        self.url = found.group(1)

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err


def test_budget_exhausted_then_extended_by_the_console_button_then_watch_succeeds(
    page: Page, sim: Simulator, home: Path, tmp_path: Path
) -> None:
    sim.add_job("exp_71c", [Step(body={"state": "running"})])
    contract = write_contract(
        tmp_path / "contract.toml",
        sim.url,
        base_delay="50ms",
        max_delay="100ms",
        extra='[escalation]\nconsole_url = "https://provider.example/jobs/{job_id}"\n',
    )
    stopped = run_cli(
        "watch", "--contract", str(contract), "--job", "exp_71c", "--operation", "report-export-01",
        "--max-requests", "2", home=home,
    )  # fmt: skip
    assert stopped.code == 4, stopped.stderr
    assert "request_budget_exhausted" in stopped.stdout

    console = ConsoleProcess(home)
    try:
        page.goto(console.url + "/decisions")
        assert page.url == console.url + "/login"
        page.fill("input[name=token]", "not the token")
        page.click("button[type=submit]")
        assert "That token is not this console's" in page.inner_text("main")
        page.fill("input[name=token]", TOKEN)
        page.click("button[type=submit]")
        assert page.url == console.url + "/"
        table = page.inner_text("table.operations")
        assert "report-export-01" in table and "stopped" in table and "request_budget_exhausted" in table

        page.click("text=Decisions (1 open)")
        card = page.locator("section.decision")
        assert card.count() == 1
        context = card.locator("ul.r31").inner_text()
        for line in (
            "Operation: report-export-01",
            "Provider job: exp_71c",
            "Last state: running",
            "Checks used: 2 of 2 checks",
            "Stopped because: request_budget_exhausted",
        ):
            assert line in context
        inspect = card.get_by_role("link", name="[2] inspect provider console")
        assert inspect.get_attribute("href") == "https://provider.example/jobs/exp_71c"
        assert inspect.get_attribute("target") == "_blank" and "noopener" in (inspect.get_attribute("rel") or "")
        card.locator("input[name=by]").fill("alice")
        card.locator("input[name=note]").fill("the export is large today")
        if os.environ.get("POLLWARDEN_UPDATE_SCREENSHOT") == "1":
            SCREENSHOT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
        shot = page.screenshot(full_page=True)
        assert shot.startswith(b"\x89PNG") and len(shot) > 10_000

        card.get_by_role("button", name=re.compile(r"^\[1\] extend by ")).click()
        assert page.url == console.url + "/decisions"
        flash = page.inner_text(".flash.ok")
        assert flash.startswith("extended operation report-export-01: deadline")
        assert "No open decisions" in page.inner_text("main")
        assert "alice" in page.inner_text("table")  # the recently decided

        sim.add_job(
            "exp_71c", [Step(body={"state": "succeeded", "result_url": "https://files.example/exports/exp_71c.csv"})]
        )
        resumed = run_cli("watch", "--contract", str(contract), "--operation", "report-export-01", home=home)
        assert resumed.code == 0, resumed.stdout + resumed.stderr
        assert "succeeded" in resumed.stdout

        page.goto(console.url + "/operations/report-export-01")
        assert page.inner_text("h1 .badge") == "succeeded"
        story = page.inner_text("ol.story")
        assert "alice chose [1] extend by" in story and "(the export is large today)" in story
        assert "extended: deadline" in story and "(extension)" in story
        assert "result validated, succeeded" in story

        page.click("text=Audit")
        assert page.inner_text("p.verdict") == "intact"
        assert TOKEN not in page.content()
    finally:
        code, err = console.stop()
    assert code == 0, err
    assert TOKEN not in err

    verified = run_cli("audit", "verify", home=home)
    assert verified.code == 0, verified.stdout + verified.stderr
    assert "intact" in verified.stdout


# -- part 12 at the size of a laptop screen: 1,280 x 800 ---------------------------------------------------

LONG_OPERATION = "nightly-warehouse-export." + "0123456789abcdef" * 6 + ".attempt-3"
LONG_JOB = "exp_" + "9f8e7d6c5b4a" * 8


@pytest.fixture
def laptop(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800}, java_script_enabled=True)
    context.set_default_timeout(10_000)
    try:
        yield context.new_page()
    finally:
        context.close()


def _scroll_width(page: Page) -> int:
    # Script in the test's context only (evaluate); the console's own CSP still forbids scripts on its pages.
    width: int = page.evaluate("document.documentElement.scrollWidth")
    return width


def _log_in(page: Page, url: str) -> None:
    page.goto(f"{url}/login?token={TOKEN}")
    assert page.url == url + "/"


def test_every_page_fits_at_1280_and_the_timeline_matches_the_story(
    laptop: Page, sim: Simulator, home: Path, contract_path: Path, console: ConsoleServer
) -> None:
    stop_operation(home, sim, contract_path, LONG_OPERATION, LONG_JOB, max_requests=3)
    stop_operation(home, sim, contract_path, "report-export-02", "exp_72a", state="running-" + "x" * 80)
    _log_in(laptop, console.url)
    for path in ("/", "/?show=awaiting", "/decisions", "/approvals", "/audit", f"/operations/{LONG_OPERATION}"):
        laptop.goto(console.url + path)
        assert _scroll_width(laptop) <= 1280, path
    laptop.goto(console.url + "/")
    cut = laptop.locator(f'tr[data-operation="{LONG_OPERATION}"] a.trunc')
    assert cut.get_attribute("title") == LONG_OPERATION  # the whole id on hover, the cell cut short
    cut.click()
    svg = laptop.locator("svg.timeline")
    assert svg.count() == 1 and svg.get_attribute("role") == "img"
    story = laptop.locator("ol.story li").all_inner_texts()
    polled = [line for line in story if "polled, state" in line]
    assert len(polled) == 3
    assert svg.locator(".tl-request").count() == len(polled) == int(svg.get_attribute("data-requests") or "0")
    assert svg.locator("#tl-stop").count() == 1
    assert "request budget exhausted" in (svg.get_attribute("aria-label") or "")
    box = svg.bounding_box()
    assert box is not None and box["width"] <= 1280 and box["height"] > 100


def test_a_cancel_clicked_is_followed_through_and_the_name_is_prefilled(
    laptop: Page, sim: Simulator, home: Path, tmp_path: Path, console: ConsoleServer
) -> None:
    contract = write_contract(
        tmp_path / "c.toml", sim.url, base_delay="50ms", extra=f'\n[cancel]\nurl = "{sim.url}/jobs/{{job_id}}/cancel"\n'
    )
    stop_operation(home, sim, contract, "op-cancel-1", "exp_c1")
    stop_operation(home, sim, contract, "op-cancel-2", "exp_c2")
    _log_in(laptop, console.url)
    laptop.goto(console.url + "/decisions")
    cards = laptop.locator("section.decision")
    assert cards.count() == 2
    first = cards.nth(0)
    assert first.locator("input[name=by]").input_value() == ""
    first.locator("input[name=by]").fill("alice")
    first.get_by_role("button", name=re.compile(r"cancel", re.I)).first.click()
    assert laptop.inner_text("h1") == "Cancel the job at the provider?"  # asked again, nothing sent yet
    assert laptop.locator("input[name=by]").input_value() == "alice"
    laptop.get_by_role("button", name="Yes, cancel the job at the provider").click()
    assert laptop.url == console.url + "/decisions"
    assert "cancel at provider sent" in laptop.inner_text(".flash.ok")
    remaining = laptop.locator("section.decision")
    assert remaining.count() == 1
    assert remaining.locator("input[name=by]").input_value() == "alice"  # remembered for the session
    laptop.goto(console.url + "/")
    cancelled = laptop.locator("tr[data-operation]").filter(has_text="stopped").filter(has_not_text="decide")
    laptop.goto(console.url + "/operations/" + (cancelled.first.get_attribute("data-operation") or "?"))
    follow = laptop.inner_text("ul.followups")
    assert "cancel requested by alice" in follow and "provider answered 200 (accepted)" in follow
    assert "operation stays stopped" in follow
    assert laptop.locator("svg.timeline [data-kind=action]").count() == 1
    assert _scroll_width(laptop) <= 1280


# -- issue 28: a phone's width, 390 px, as well as a laptop's ---------------------------------------------


@pytest.fixture(params=[1280, 390], ids=["laptop", "phone"])
def screen(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    width: int = request.param
    context = browser.new_context(viewport={"width": width, "height": 800}, java_script_enabled=True)
    context.set_default_timeout(10_000)
    try:
        yield context.new_page()
    finally:
        context.close()


def test_the_list_the_decisions_and_an_operation_fit_the_screen_with_no_horizontal_scroll(
    screen: Page, sim: Simulator, home: Path, contract_path: Path, console: ConsoleServer
) -> None:
    stop_operation(home, sim, contract_path, LONG_OPERATION, LONG_JOB, max_requests=3)
    stop_operation(home, sim, contract_path, "report-export-02", "exp_72a", state="running-" + "x" * 80)
    width = (screen.viewport_size or {"width": 0})["width"]
    _log_in(screen, console.url)
    for path in ("/", "/?show=awaiting&q=export", "/decisions", f"/operations/{LONG_OPERATION}"):
        screen.goto(console.url + path)
        assert _scroll_width(screen) == width, (path, width)
    screen.goto(console.url + "/")
    row = screen.locator(f'tr[data-operation="{LONG_OPERATION}"]')
    link = row.locator("a.trunc")
    assert link.get_attribute("title") == LONG_OPERATION
    shown = link.inner_text()
    assert shown.startswith(LONG_OPERATION[:14]) and shown.endswith(LONG_OPERATION[-8:]) and "…" in shown
    screen.keyboard.press("Tab")  # every link and control is reachable with the keyboard: no script, plain links
    assert screen.locator('meta[http-equiv="refresh"]').count() == 1
    screen.get_by_role("link", name="turn off").click()
    assert "refresh=off" in screen.url and screen.locator('meta[http-equiv="refresh"]').count() == 0


def test_the_schedules_page_and_its_plot_fit_the_screen(screen: Page, home: Path, console: ConsoleServer) -> None:
    """Issue 26: the learnt distribution's plot (inline SVG, no script) scales with the page."""
    learnt_home(home)
    width = (screen.viewport_size or {"width": 0})["width"]
    _log_in(screen, console.url)
    screen.goto(console.url + "/schedules")
    assert _scroll_width(screen) == width
    plots = screen.locator("svg.distribution")
    assert plots.count() == 2
    box = plots.first.bounding_box()
    assert box is not None and 0 < box["width"] <= width and box["height"] > 40
