"""The transitions table (`core.transitions`): every change of an operation has one row, its events exist, and
the rules the engine and the interfaces read from it hold."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pollwarden.core.reasons import Phase
from pollwarden.core.transitions import BRIEF_WAIT, TRANSITIONS, Change, Claim, allowed, patience
from pollwarden.events.base import EVENT_TYPES

TTL = timedelta(seconds=65)


def test_every_change_has_one_row_and_writes_only_events_that_exist() -> None:
    import pollwarden.events  # noqa: F401  (registers every event class)

    assert set(TRANSITIONS) == set(Change)
    for change, row in TRANSITIONS.items():
        assert row.change is change
        unknown = [kind for kind in row.writes if kind not in EVENT_TYPES]
        assert unknown == [], (change, unknown)


@pytest.mark.parametrize(
    ("change", "phases", "creates"),
    [
        (Change.ADMIT, set(Phase), True),
        (Change.SUBMIT, set(), True),
        (Change.POLL, {Phase.ACTIVE}, False),
        (Change.PACE, {Phase.ACTIVE}, False),
        (Change.NARROW, {Phase.ACTIVE}, False),
        (Change.ANSWER, set(Phase), False),
        (Change.REQUEST_EXTENSION, {Phase.STOPPED}, False),
        (Change.REQUEST_CANCEL, {Phase.ACTIVE, Phase.STOPPED}, False),
        (Change.INTERRUPT, {Phase.ACTIVE}, False),
        (Change.RELEASE, set(Phase), False),
    ],
)
def test_from_which_phase_each_change_may_start(change: Change, phases: set[Phase], creates: bool) -> None:
    assert {phase for phase in Phase if allowed(change, phase)} == phases
    assert allowed(change, None) is creates


def test_a_succeeded_operation_takes_no_request_but_may_be_answered() -> None:
    assert not allowed(Change.REQUEST_CANCEL, Phase.SUCCEEDED)
    assert not allowed(Change.REQUEST_EXTENSION, Phase.SUCCEEDED)
    assert not allowed(Change.POLL, Phase.SUCCEEDED) and not allowed(Change.POLL, Phase.STOPPED)


def test_each_claim_waits_as_its_row_says() -> None:
    waits = {change: patience(change, TTL) for change in Change}
    assert waits[Change.ANSWER] == TTL  # a person's answer outlasts any one step
    assert waits[Change.REQUEST_CANCEL] == BRIEF_WAIT
    assert waits[Change.REQUEST_EXTENSION] == waits[Change.NARROW] == timedelta(0)
    for change, row in TRANSITIONS.items():
        if row.claim in (Claim.NONE, Claim.HELD, Claim.AT_ONCE):
            assert waits[change] == timedelta(0), change


def test_every_change_that_asks_a_person_opens_a_decision_request_and_ends_pacing() -> None:
    asking = {change for change, row in TRANSITIONS.items() if row.asks_a_person}
    assert asking == {Change.POLL, Change.REQUEST_EXTENSION, Change.REQUEST_CANCEL}
    for change in asking - {Change.POLL}:  # a poll's stop writes its decision as `decision` and `escalated`
        assert "decision_requested" in TRANSITIONS[change].writes
    assert all(TRANSITIONS[change].ends_pacing for change in asking)
    assert not TRANSITIONS[Change.PACE].ends_pacing  # it is the pacing
