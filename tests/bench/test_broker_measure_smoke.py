"""The broker measure's smoke version, so it cannot silently rot: `bench.broker_measure` in its quick mode for real
(root only: it creates OS users, as the isolation tests do), its counts asserted exactly and its timings only
against the shortened bounds' generous guards."""

from __future__ import annotations

import pytest

from bench import broker_measure as bm
from tests.isolation.users import why_not


@pytest.fixture(scope="module")
def measured() -> bm.Measured:
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    measured = bm.run(bm.QUICK)
    assert measured.failures == []
    return measured


def test_no_attempt_of_the_agent_user_succeeds(measured: bm.Measured) -> None:
    assert len(measured.attempts) == 16, measured.attempts
    assert measured.succeeded() == []


def test_a_person_awaited_never_leaves_a_call_silent_and_a_cut_call_keeps_its_grant(measured: bm.Measured) -> None:
    waited, answered = measured.no_token
    assert answered == "approval_pending" and waited < 1.5 + 5 + 10  # the cap, its margin, slack for load
    gap, notes, status = measured.with_token
    assert status == "succeeded" and notes >= 1 and gap < 15
    assert measured.cut["the grant after the cut"] == "pending"
    assert measured.cut["the next call"] == "succeeded" and measured.cut["provider requests"] == "1"


def test_the_shim_costs_two_calls_and_no_request_beyond_the_plan(measured: bm.Measured) -> None:
    assert measured.results == {"with progress": (2, 0, "succeeded"), "without progress": (2, 0, "succeeded")}


def test_the_section_says_when_a_goal_is_not_met() -> None:
    """The measure's verdicts can fail: an attempt that read the secrets and a call silent for 20 s."""
    bad = bm.Measured(
        attempts={"read secrets file": "SUCCEEDED: read", "decide through the broker": "refused: exit 2"},
        no_token=(60.0, "approval_pending"),
        with_token=(20.0, 1, "succeeded"),
    )
    text = bm.section(bad, bm.FULL, "cmd")
    assert "attempts that succeeded: 1 of 2** (goal 0: NOT met)" in text
    assert "| 60.0 s (`approval_pending`) | under 50 s: NOT met |" in text
    assert "under 15 s: NOT met |" in text
    failed = bm.section(bm.Measured(failures=["cut: OSError: gone"]), bm.FULL, "cmd")
    assert "- **FAILED**: cut: OSError: gone" in failed and "(goal 0: NOT met)" in failed
