"""The conformance benchmark's smoke version, so it cannot silently rot.

It runs `bench.conformance`'s quick mode for real: two scenarios compressed 5x (503 with Retry-After, then an
unknown state), each peer in its own process against the loopback simulator. pollwarden and the hand-written
fixed loop always run; the library peer (tenacity) only when the `bench` extra is installed.
"""

from __future__ import annotations

import pytest

from bench import conformance, peers

Rows = dict[tuple[str, str], conformance.Row]


@pytest.fixture(scope="module")
def rows() -> Rows:
    names = [name for name in conformance.QUICK_PEERS if peers.PEERS[name].available]
    assert {"pollwarden", "fixed-10s"} <= set(names)
    measured = conformance.collect(conformance.quick_scenarios(), names)
    return {(row.scenario, row.peer): row for scenario in measured for row in scenario}


def test_pollwarden_honours_retry_after_and_succeeds(rows: Rows) -> None:
    row = rows["retry_after_seconds", "pollwarden"]
    assert row.requests >= 2
    assert row.ra_violations == 0
    assert row.after_deadline == 0
    assert (row.verdict, row.outcome) == ("correct terminal", "success")
    assert row.lag is not None and row.lag >= 0
    assert row.attempts == row.requests  # every request the provider saw was counted (reserved) first


def test_pollwarden_stops_on_the_unknown_state(rows: Rows) -> None:
    row = rows["unknown_state", "pollwarden"]
    assert (row.verdict, row.detail) == ("correct stop", "unknown_state")
    assert row.after_deadline == 0


def test_the_fixed_loop_violates_retry_after_and_polls_the_unknown_state_until_killed(rows: Rows) -> None:
    retry_after = rows["retry_after_seconds", "fixed-10s"]
    assert retry_after.ra_violations >= 1
    unknown = rows["unknown_state", "fixed-10s"]
    assert unknown.verdict == "wrong"
    assert unknown.outcome == "hung"
    assert unknown.requests > rows["unknown_state", "pollwarden"].requests


def test_a_library_peer_runs_too(rows: Rows) -> None:
    pytest.importorskip("tenacity")
    retry_after = rows["retry_after_seconds", "tenacity"]
    assert retry_after.ra_violations >= 1  # tenacity has no notion of Retry-After
    assert retry_after.verdict == "correct terminal"
    assert rows["unknown_state", "tenacity"].verdict == "wrong"  # "until done" keeps polling awaiting_review
