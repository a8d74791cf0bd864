"""The console's schedules page (issue 26): each contract's learnt distribution and each learn_key's, with a small
inline SVG plot (no script), its count, quantiles, planned checks and requests per job against the plain backoff."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from pollwarden.console.pages.schedules import MAX_TICKS, distribution_svg
from pollwarden.core.contract.parse import Schedule
from pollwarden.core.learnt import MIN_ENDED, Sample, summary
from pollwarden.engine.learning import summaries
from pollwarden.home.operating import open_store
from tests.engine.test_learning_keys import learnt_home


def test_the_schedules_page_plots_each_distribution(home: Path, client: httpx.Client) -> None:
    learnt_home(home)
    page = client.get("/schedules")
    assert page.status_code == 200
    html = page.text
    assert "<script" not in html and 'href="/schedules" class="here"' in html
    assert html.count('<svg class="distribution"') == 2  # the whole contract's and the key with enough jobs
    store = open_store(home, keys="none")
    try:
        found = summaries(store)
    finally:
        store.close()
    whole = next(one for one in found if one.key is None)
    assert whole.model is not None
    first_svg = html[html.index('<svg class="distribution"') : html.index("</svg>")]
    assert first_svg.count('class="check"') == min(len(whole.model.checks), MAX_TICKS)
    assert re.search(r'<polyline class="cdf" points="[0-9., ]+"', first_svg)
    assert f"{MIN_ENDED + 5} samples (0 censored)" in html and "Requests per job expected: <b>" in html
    assert "key &lt;slow&gt;" in html and "fewer than 20 ended: the contract&#x27;s whole history" in html


def test_no_plot_without_a_model_and_no_page_without_samples(client: httpx.Client) -> None:
    empty = summary("exports", [Sample(1.0, 2.0)] * (MIN_ENDED - 1), Schedule())
    assert empty.model is None and distribution_svg(empty) == ""
    page = client.get("/schedules")
    assert page.status_code == 200 and "every contract polls with its plain backoff" in page.text
