"""One vocabulary for waits and checks in every output: one test over every template (`core/words.py`).

Every story line (each event kind, with its fields filled and with them missing), every decision request (each
stop reason), the live progress line, and every string a command, the console or the MCP server writes are held
to it: a status request is a *check*, its time the *next check*, who chose it said by `delay_words`; counts agree
with their nouns; an ended job says what happened at the provider."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pollwarden import events as ev
from pollwarden.core import new_record, parse_contract
from pollwarden.core.escalation import build_request
from pollwarden.core.reasons import DelaySource, StopReason
from pollwarden.core.words import DELAY_WORDS, delay_words, plural, span_words, stop_title
from pollwarden.engine import NotYet
from pollwarden.events.base import EVENT_TYPES
from pollwarden.report.progress import progress_of
from pollwarden.report.story import render_event
from pollwarden.store.base import Event

from .core.support import contract_text

T = datetime(2026, 12, 6, 18, 40, tzinfo=UTC)
SRC = Path(__file__).resolve().parent.parent / "src" / "pollwarden"

OTHER_WORDS = [
    re.compile(r"\bnext poll\b", re.I),
    re.compile(r"provider guidance|local backoff", re.I),
    re.compile(r"\bstatus requests?\b(?!_)", re.I),
    re.compile(r"\brequests (used|\d|\?)", re.I),
    re.compile(r"\d+ requests\b|\? requests\b", re.I),
    re.compile(r"\b1 (minutes|checks|seconds|hours)\b"),
    re.compile(r"\blast poll\b", re.I),
]
"""What the old wordings looked like: none may come back."""

OUTPUT_MODULES = [
    "cli",
    "report",
    "events",
    "console",
    "mcp_server",
    "core/escalation.py",
    "core/words.py",
    "actions",
    "api.py",
]
"""Where the strings people and agents read are written."""

HELP_AND_CONTRACT_TERMS = re.compile(
    r"status[_ ]request(s)? (budget|in flight|per second|is an action)|--max-requests|max_status"
    r"|\((one |a )?status requests?\b[^)]*\)"
)
"""The flags and contract fields keep their names (`max_requests`, `max_status_requests`): they are keys, not
sentences; a contract's status request is an action or not (`safe_status`); a check may be defined in brackets
once, for an agent that knows the HTTP word."""


def _other_words(text: str) -> list[str]:
    return [pattern.pattern for pattern in OTHER_WORDS if pattern.search(HELP_AND_CONTRACT_TERMS.sub("", text))]


def _sample(value: str | None) -> dict[str, object]:
    """Fields of every event filled with plausible values (a time, a count, a delay source)."""
    return {
        "job": "exp_71c",
        "contract": "exports",
        "deadline_at": "2026-12-06T19:20:00Z",
        "next_poll_at": "2026-12-06T18:41:00Z",
        "until": "2026-12-06T18:41:00Z",
        "delay_source": value,
        "action": "wait",
        "max_status_requests": 1,
        "status_requests_used": 1,
        "max_transport_failures": 1,
        "reason": "job_failed",
        "decision_id": "d1",
        "operation": "op",
        "resumable": True,
        "by": "alice",
    }


@pytest.mark.parametrize("kind", sorted(EVENT_TYPES))
def test_every_story_line_speaks_the_one_vocabulary(kind: str) -> None:
    for data in ({}, *(_sample(source.value) for source in DelaySource)):
        line = render_event(Event("op", 1, T, kind, data))
        if line is None:
            continue
        assert not _other_words(line), (kind, line)
        assert line.startswith("2026-12-06T18:40:00Z "), line  # with its date and zone: what `why --at` takes


def test_a_wait_names_who_chose_it_in_the_shared_words() -> None:
    for source in DelaySource:
        line = render_event(Event("op", 1, T, "decision", _sample(source.value)))
        assert line is not None and f"next check 2026-12-06T18:41:00Z ({DELAY_WORDS[source.value]})" in line


@pytest.mark.parametrize("reason", list(StopReason))
def test_every_decision_request_speaks_the_one_vocabulary(reason: StopReason) -> None:
    contract = parse_contract(contract_text())
    record = new_record(contract, operation_id="op", job_id="job", now=T)
    record = replace(record, status_requests_used=1, last_observed_at=T, last_http_status=200)
    stopped = record.stopped(reason, "detail", T + timedelta(seconds=61))
    text = build_request(stopped, contract, T + timedelta(seconds=61), decision_id="d").render()
    assert not _other_words(text), text
    assert "Elapsed time: 1 minute 1 second" in text and "Checks used: 1 of" in text
    if reason.job_ended:
        assert text.startswith("External job ") and "needs a decision" not in text.splitlines()[0]
    else:
        assert text.startswith("External job needs a decision")


def test_the_live_line_speaks_the_one_vocabulary() -> None:
    contract = parse_contract(contract_text())
    record = new_record(contract, operation_id="op", job_id="job", now=T)
    for source in DelaySource:
        shown = progress_of(NotYet(replace(record, delay_source=source), T + timedelta(seconds=12)))
        line = shown.message(T)
        assert "checks 0/" in line and f"next check in 12s ({delay_words(source)})" in line, line
        assert not _other_words(line), line


def test_plural_forms() -> None:
    assert [plural(n, "minute") for n in (0, 1, 2)] == ["0 minutes", "1 minute", "2 minutes"]
    assert span_words(timedelta(minutes=1)) == "1 minute"
    assert span_words(timedelta(hours=1, minutes=2, seconds=3)) == "1 hour 2 minutes"
    assert span_words(timedelta(0)) == "0 seconds"
    assert stop_title(StopReason.JOB_FAILED) == "External job failed"
    assert stop_title(StopReason.DEADLINE_EXCEEDED) == "External job needs a decision"


def _strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module a person or an agent may read: its docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.append((node.lineno, node.value))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            docstrings.add(id(node.value))  # an attribute's docstring
    return found


def test_no_template_in_any_output_module_uses_another_wording() -> None:
    offenders = []
    for name in OUTPUT_MODULES:
        root = SRC / name
        for path in [root] if root.suffix == ".py" else sorted(root.rglob("*.py")):
            for line, text in _strings(path):
                if text in (ev.AuditEvent.__doc__ or ""):
                    continue
                for pattern in _other_words(text):
                    offenders.append(f"{path.relative_to(SRC)}:{line}: {pattern}: {text[:80]!r}")
    assert not offenders, "\n".join(offenders)
