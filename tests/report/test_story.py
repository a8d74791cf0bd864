"""The story speaks for every event kind a person meets: polls, decisions, actions, agent sessions, pacing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pollwarden.events import EVENT_TYPES, AuditEvent
from pollwarden.report.story import story_lines
from pollwarden.store.base import Event

T = datetime(2025, 4, 18, 10, 20, 31, tzinfo=UTC)


def _e(seq: int, kind: str, **data: Any) -> Event:
    return Event("op", seq, T, kind, data)


def test_the_seed_style_lines() -> None:
    lines = story_lines(
        [
            _e(1, "observed", http_status=503, state=None, retry_after_header="120"),
            _e(2, "decision", action="wait", next_poll_at="2025-04-18T10:22:31Z", delay_source="provider_retry_after"),
            _e(3, "observed", http_status=200, state="running"),
            _e(4, "decision", action="stop", reason="request_budget_exhausted"),
        ]
    )
    assert lines == [
        "2025-04-18T10:20:31Z received 503, Retry-After 120, next check 2025-04-18T10:22:31Z (provider's Retry-After)",
        "2025-04-18T10:20:31Z polled, state running, request budget exhausted, escalated",
    ]


def test_agent_session_and_fleet_events_are_told() -> None:
    lines = story_lines(
        [
            _e(1, "session_started", session="s1", server="pollwarden 0.1.0", client={"name": "agent"}),
            _e(2, "session_approval_requested", grant_id="g1", scope="exports"),
            _e(3, "approval_approved", grant_id="g1", by="alice"),
            _e(
                4,
                "call_intent",
                call=1,
                purpose="poll",
                operation="op",
                approval="session",
                status_requests_used=0,
                max_status_requests=12,
            ),
            _e(5, "call_result", call=1, outcome="polled"),
            _e(6, "call_denied", operation="op", why="approval_timeout"),
            _e(7, "paced", provider="exports", until="2025-04-18T10:20:40Z"),
        ]
    )
    assert lines == [
        "2025-04-18T10:20:31Z agent session s1 started (pollwarden 0.1.0), client {'name': 'agent'}",
        "2025-04-18T10:20:31Z session approval g1 requested for exports",
        "2025-04-18T10:20:31Z approval g1 approved by alice",
        "2025-04-18T10:20:31Z call 1: poll for op (approval session, checks 0/12)",
        "2025-04-18T10:20:31Z call 1: polled",
        "2025-04-18T10:20:31Z call for op denied: approval_timeout",
        "2025-04-18T10:20:31Z paced by the fleet's cap for exports: next check not before 2025-04-18T10:20:40Z",
    ]


def test_an_agent_extension_in_the_operations_own_log_names_the_operation_not_none() -> None:
    # The MCP server writes the operation's copy without "operation": the log is the operation (issue item 21).
    lines = story_lines([Event("report-export-01", 9, T, "extension_requested", {"reason": "large export"})])
    assert lines == ["2025-04-18T10:20:31Z the agent asked for more time for report-export-01: large export"]


def test_records_missing_fields_still_tell_their_line_and_never_say_none() -> None:
    # Written by an older version (or cut down): every kind the log knows must still render, with "?".
    for kind in sorted(EVENT_TYPES):
        lines = story_lines([_e(1, kind)])
        assert all("None" not in line for line in lines), (kind, lines)
        assert all(line.startswith("2025-04-18T10:20:31Z") for line in lines), (kind, lines)


def test_wrongly_typed_fields_do_not_break_the_story() -> None:
    lines = story_lines(
        [
            _e(1, "created", job=["x"], contract=7, deadline_at="not a time", max_status_requests="12"),
            _e(2, "decision_requested", decision_id="d1", reason="unknown_state", options=[{"label": "pause"}, 3]),
            _e(3, "decision", action="wait", next_poll_at=12, delay_source=None),
        ]
    )
    assert lines == [
        "2025-04-18T10:20:31Z watching job ? (?), deadline ?, budget ? checks, ? transport failures",
        "2025-04-18T10:20:31Z asked for a decision d1 (unknown_state): pause",
        "2025-04-18T10:20:31Z ?, next check ? (?)",
    ]


def test_a_kind_from_another_version_is_named_not_hidden() -> None:
    assert story_lines([_e(1, "teleported", to="mars")]) == [
        "2025-04-18T10:20:31Z teleported (recorded by another version; see `story --json`)"
    ]


def test_every_kind_tells_its_own_line() -> None:
    """`line` is each kind's (or its family's), never the base's, which refuses."""
    assert [kind for kind, cls in EVENT_TYPES.items() if cls.line is AuditEvent.line] == []


def test_submission_outcomes_are_told_in_words() -> None:
    lines = story_lines(
        [
            _e(1, "submission_unknown", failure="read_timeout", detail="no answer in 5s"),
            _e(2, "submission_rejected", http_status=409),
        ]
    )
    assert lines == [
        "2025-04-18T10:20:31Z submission unknown: no answer in 5s",
        "2025-04-18T10:20:31Z submission rejected: HTTP 409",
    ]
