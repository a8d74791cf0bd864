"""The one rule for the person named on a decision, kept by every interface and by `apply_decision` itself."""

from __future__ import annotations

import pytest

from pollwarden.actions.decisions import MAX_DECIDER, MAX_NOTE, person_problem


@pytest.mark.parametrize(
    ("by", "note", "which"),
    [
        ("", None, "by"),
        ("   ", None, "by"),
        (None, None, "by"),
        ("al\x1b[2Jice", None, "by"),
        ("a" * (MAX_DECIDER + 1), None, "by"),
        ("alice", "line\nbreak", "note"),
        ("alice", "n" * (MAX_NOTE + 1), "note"),
        ("alice", 7, "note"),
    ],
)
def test_what_cannot_name_a_person_is_refused_and_says_which(by: object, note: object, which: str) -> None:
    problem = person_problem(by, note)
    assert problem is not None and problem[0] == which


def test_a_plain_name_and_note_pass() -> None:
    assert person_problem("alice", "worth another hour") is None
    assert person_problem(" bob ", None) is None
