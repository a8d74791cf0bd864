"""A contract that learns, with a history to learn from, for the interface tests of the learnt first check (issue
26): the CLI's `enqueue` and `watch`, the worker fleet, the MCP server and the Python API each place a new
operation's first check by it, record it, and `why` and `story` tell it.

The history is `MIN_ENDED` jobs of about four seconds, run through an engine on a simulated clock against an
in-process provider (no HTTP, no sleep: about a second), ended an hour ago, inside the 30-day window, so their
samples are in the store for every process that opens it. The contract's checks are short (a p95 lag of 2 s), so
a first check placed by that history falls a few seconds after creation: a test waits seconds for its first poll,
and the plain backoff's first check (`first_check`, 0 s, at creation) is easy to tell from it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pollwarden.core.contract.parse import Contract, load_contract
from pollwarden.core.durations import parse_rfc3339
from pollwarden.core.learnt import MIN_ENDED
from pollwarden.engine import Engine
from pollwarden.simulator import Step, contract_text
from pollwarden.store.base import Store
from tests.conftest import Ran, install, run_cli
from tests.engine.test_learning import Clock
from tests.engine.test_learning_keys import KindedJobs, _run

MAX_DELAY = "10s"
LAG_TARGET = "2s"
MEDIAN = 4.0
"""Seconds the history's jobs take at the median (spread as `test_learning_keys._run` spreads them)."""


def learnt_contract(path: Path, base_url: str, *, learn: bool = True, extra: str = "") -> Contract:
    """The simulator's contract at `path`, its `[schedule]` learning (or not) for a p95 lag of `LAG_TARGET`."""
    text = contract_text(
        base_url, base_delay="500ms", max_delay=MAX_DELAY, deadline="10m", max_requests=40, extra=extra
    )
    line = f'max_delay = "{MAX_DELAY}"'
    schedule = f'{line}\nlag_target = "{LAG_TARGET}"' + ("" if learn else "\nlearn = false")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace(line, schedule, 1), encoding="utf-8")
    return load_contract(path)


def learn_history(store: Store, contract: Contract) -> None:
    """`contract` installed in `store`, and `MIN_ENDED` of its jobs ended there: enough to learn from."""
    install(store, contract)
    clock = Clock()
    clock.now = datetime.now(UTC) - timedelta(hours=1)
    jobs = KindedJobs(clock)
    _run(Engine(store, owner="tests", clock=clock), contract, jobs, "any", MEDIAN, MIN_ENDED)


SUBMIT = """
[submit]
url = "{base}/jobs"
idempotency_header = "Idempotency-Key"
job_id = "job_id"
"""
"""A `[submit]` table (`learnt_contract`'s `extra`, formatted with the simulator's URL) for its `POST /jobs`."""
ENDS_AT_ONCE = [Step(body={"job_id": "{job_id}", "state": "succeeded", "result_url": "/results/{job_id}"})]
"""A simulated job that has ended by its first check: the first request is its only one, sent at the first check."""


def told(operation: str, home: Path, *db: str, ended: int = MIN_ENDED) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`operation`'s first check, learnt from `ended` jobs, as `pollwarden why` (of the creating event) replays it
    and `pollwarden story` tells it (`db`: the commands' `--db URL`, if any): the recorded placement, and the
    operation's events (`story --json`)."""
    story = run_cli("story", operation, "--json", *db, home=home)
    assert story.code == 0, story.stderr
    events: list[dict[str, Any]] = json.loads(story.stdout)
    created = next(e for e in events if e["kind"] in ("created", "submitted"))
    why = run_cli("why", operation, "--seq", str(created["seq"]), "--json", *db, home=home)
    placed = assert_first_check_told(why, run_cli("story", operation, *db, home=home), created["seq"], ended)
    assert created["data"]["placed"] == placed  # what `why` showed is what the event recorded
    return placed, events


def first_sent(events: list[dict[str, Any]]) -> datetime:
    """When the operation's first status request went out (its first `observed` event)."""
    return parse_rfc3339(next(str(e["data"]["sent_at"]) for e in events if e["kind"] == "observed"))


def assert_first_check_told(why: Ran, story: Ran, seq: int, ended: int = MIN_ENDED) -> dict[str, Any]:
    """`pollwarden why OP --seq SEQ --json` (the creating event) replays the first check, learnt from `ended` jobs,
    as it was made, and `pollwarden story OP` tells it; the recorded placement is returned."""
    assert why.code == 0, why.stderr
    said = json.loads(why.stdout)
    assert said["seq"] == seq and said["rule"] == "first_check", said
    placed = said["decision"]
    assert placed["delay_source"] == "learnt", placed
    assert placed["detail"].startswith("first check in "), placed
    assert f"learnt from {ended} ended jobs of exports (p5 " in placed["detail"], placed
    assert said["inputs"]["learnt"]["count"] == ended
    assert said["same_today"] is True and said["replay"] == placed, said["differences"]
    assert story.code == 0, story.stderr
    (told,) = [line for line in story.stdout.splitlines() if "; first check in " in line]  # the creating event's
    assert f"learnt from {ended} ended jobs of exports (p5 " in told, told
    return dict(placed)
