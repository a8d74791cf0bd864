"""The console with 10,000 operations and 2,000 open decisions, on SQLite and PostgreSQL (issue 28): each page
stays small (under 200 KB) and shows what needs a person first. Its time is measured by bench/console.py, not here
(docs/benchmarks.md): a test asserts what the page holds, never how fast it came."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator

import httpx
import pytest
from bench.console import build_fleet

from pollwarden.clock import utcnow
from pollwarden.console import ConsoleServer
from pollwarden.home.operating import open_store
from tests.store.conftest import create_database, drop_database

from .conftest import TOKEN

OPERATIONS = 10_000
DECISIONS = 2_000
MOST = 200 * 1024


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def fleet_console(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A console over a home of 10,000 operations (built once per backend for this module's tests); its URL."""
    home = tmp_path_factory.mktemp("scale") / "home"
    url = create_database(upgraded=True) if request.param == "postgres" else None
    patch = pytest.MonkeyPatch()
    if url is not None:
        patch.setenv("POLLWARDEN_DB", url)
    try:
        store = open_store(home)
        try:
            build_fleet(store, operations=OPERATIONS, decisions=DECISIONS, now=utcnow())
        finally:
            store.close()
        with ConsoleServer(home, token=TOKEN, log=io.StringIO()) as console:
            yield console.url
    finally:
        patch.undo()
        if url is not None:
            drop_database(url)


@pytest.fixture
def http(fleet_console: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fleet_console, timeout=60) as client:
        assert client.get(f"/login?token={TOKEN}").status_code == 303
        yield client


def _page(http: httpx.Client, path: str) -> str:
    response = http.get(path)
    assert response.status_code == 200, response.text[:500]
    assert len(response.content) < MOST, (path, len(response.content))
    return response.text


def _rows(page: str) -> list[str]:
    return re.findall(r'<tr data-operation="([^"]+)"', page)


def test_the_operations_list_is_one_small_page_of_what_needs_a_person_first(http: httpx.Client) -> None:
    page = _page(http, "/")
    rows = _rows(page)
    assert len(rows) == 50
    assert page.count('">decide</a>') == 50  # 2,000 await a decision: they come first
    assert "1–50 of 10000" in page and "Page 1 of 200" in page
    assert re.search(r"all \(10000\).*awaiting a decision \(2000\).*overdue \(800\)", page)
    assert '<meta http-equiv="refresh"' in page
    cut = re.search(r'class="mono trunc" href="[^"]+" title="([^"]+)">([^<]+)</a>', page)
    assert cut is not None and "…" in cut.group(2) and cut.group(1).endswith(cut.group(2).split("…")[1])
    overdue = _page(http, "/?show=overdue&page=2")
    assert len(_rows(overdue)) == 50 and 'data-flags="overdue"' in overdue and "Page 2 of 16" in overdue
    last = _page(http, "/?page=200")
    assert len(_rows(last)) == 50 and ">ended</span>" not in last and "stopped" not in "".join(_rows(last))
    assert "succeeded" in last  # ended ones come last, newest first
    assert len(_rows(_page(http, "/?page=201"))) == 0


def test_search_and_filters_narrow_the_list_in_the_database(http: httpx.Client) -> None:
    found = _page(http, "/?q=JOB-000412")
    assert _rows(found) == ["exports-20261202-193332-00019c"]  # operation 412 = 0x19c, of contract 412 % 3 = 1
    exports = _page(http, "/?contract=exports&phase=stopped&reason=job_failed")
    assert len(_rows(exports)) == 50 and all(r.startswith("exports-") for r in _rows(exports))
    assert "1–50 of 133" in exports  # the job_failed stops (every 5th of 2,000) of exports (every 3rd, from 1)


def test_the_decisions_page_groups_2000_open_decisions_and_shows_one_page_of_them(http: httpx.Client) -> None:
    page = _page(http, "/decisions")
    assert page.count('<section class="card decision"') == 20
    assert "all (2000)" in page and ">job_failed (400)</a>" in page and ">deadline_exceeded (400)</a>" in page
    assert "Close the 400 job_failed decisions…" in page and "Close the 400 job_expired decisions…" in page
    assert "Close the 400 deadline_exceeded" not in page
    assert "<strong>The provider said:</strong> health check failed: 3/5 pods CrashLoopBackOff" in page
    one = _page(http, "/decisions?reason=job_expired&page=20")
    assert one.count('<section class="card decision"') == 20 and "Page 20 of 20" in one
    assert "Decisions (2000 open)" in _page(http, "/operations/deploys-20261202-193332-000000")
