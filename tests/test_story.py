"""The story speaks for every event kind a person meets: polls, decisions, actions, agent sessions, pacing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pollwarden.store.base import Event
from pollwarden.story import story_lines

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
        "10:20:31 received 503, Retry-After 120, next poll 10:22:31 from provider guidance",
        "10:20:31 polled, state running, request budget exhausted, escalated",
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
        "10:20:31 agent session s1 started (pollwarden 0.1.0), client {'name': 'agent'}",
        "10:20:31 session approval g1 requested for exports",
        "10:20:31 approval g1 approved by alice",
        "10:20:31 call 1: poll for op (approval session, requests 0/12)",
        "10:20:31 call 1: polled",
        "10:20:31 call for op denied: approval_timeout",
        "10:20:31 paced by the fleet's cap for exports: next poll not before 10:20:40",
    ]
