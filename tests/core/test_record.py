"""The record's transitions: each changes exactly the fields it names and keeps every other one, field by field.

A transition that forgot a field, or touched one it does not name, is how a limit gets widened or a spent budget
reset; the sample record has every field set, and away from what any transition writes, so a change shows.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import timedelta
from typing import Any

import pytest

from pollwarden.core import DelaySource, OperationRecord, Phase, StopReason

from .support import T0, make_record

MINUTE = timedelta(minutes=1)

ACTIVE = replace(
    make_record(request_fingerprint="sha256:request", status_location="http://127.0.0.1:9/jobs/exp_71c"),
    next_poll_at=T0 + 3 * MINUTE,
    delay_source=DelaySource.PROVIDER_POLL_HINT,
    phase=Phase.ACTIVE,
    reason=StopReason.RATE_LIMITED,
    detail="the detail before",
    status_requests_used=7,
    transport_failures_used=2,
    rate_limited_consecutive=3,
    polls_completed=6,
    last_state="queued",
    last_http_status=200,
    last_observed_at=T0 + MINUTE,
    last_request_id="req-before",
    provider_error="the provider error before",
    result="https://results.example/before",
    counts=(("completed", 1),),
    finished_at=T0 + 2 * MINUTE,
    pending_seen_at=T0 + MINUTE / 2,
    sample_key="gpt-4o",
    woken_at=T0 + MINUTE / 4,
)
STOPPED = replace(ACTIVE, phase=Phase.STOPPED)
WIDER_PLAN = replace(ACTIVE.plan, deadline_at=ACTIVE.plan.deadline_at + timedelta(hours=1), max_status_requests=99)
LATER = T0 + 10 * MINUTE


@dataclass(frozen=True)
class Case:
    transition: str
    before: OperationRecord
    apply: Callable[[OperationRecord], OperationRecord]
    changes: dict[str, Any]


CASES = [
    Case("reserved", ACTIVE, lambda r: r.reserved(), {"status_requests_used": 8}),
    Case(
        "observed",
        ACTIVE,
        lambda r: r.observed(at=LATER, http_status=429, request_id="req-now", state="running", rate_limited=True),
        {
            "polls_completed": 7,
            "last_http_status": 429,
            "last_observed_at": LATER,
            "last_request_id": "req-now",
            "last_state": "running",
            "rate_limited_consecutive": 4,
        },
    ),
    # An answer without a state (a 503, a timeout) keeps the state last seen; any answer but a 429 ends a run.
    Case(
        "observed",
        ACTIVE,
        lambda r: r.observed(at=LATER, http_status=None, request_id=None, state=None, rate_limited=False),
        {
            "polls_completed": 7,
            "last_http_status": None,
            "last_observed_at": LATER,
            "last_request_id": None,
            "rate_limited_consecutive": 0,
        },
    ),
    Case("seen_pending", ACTIVE, lambda r: r.seen_pending(LATER), {"pending_seen_at": LATER}),
    Case("keyed", replace(ACTIVE, sample_key=None), lambda r: r.keyed("batch-large"), {"sample_key": "batch-large"}),
    Case("keyed", ACTIVE, lambda r: r.keyed("another"), {}),  # the first key seen stays
    Case("transport_failed", ACTIVE, lambda r: r.transport_failed(), {"transport_failures_used": 3}),
    Case(
        "waiting",
        ACTIVE,
        lambda r: r.waiting(LATER, DelaySource.PROVIDER_RETRY_AFTER),
        {"next_poll_at": LATER, "delay_source": DelaySource.PROVIDER_RETRY_AFTER},
    ),
    Case("deferred", ACTIVE, lambda r: r.deferred(LATER), {"next_poll_at": LATER}),
    Case(
        "woken_by_push",
        ACTIVE,
        lambda r: r.woken_by_push(T0 + 2 * MINUTE),
        {"next_poll_at": T0 + 2 * MINUTE, "delay_source": DelaySource.PROVIDER_PUSH, "woken_at": T0 + 2 * MINUTE},
    ),
    Case(
        "succeeded",
        ACTIVE,
        lambda r: r.succeeded("https://results.example/now", "state succeeded", LATER, (("completed", 2),)),
        {
            "phase": Phase.SUCCEEDED,
            "result": "https://results.example/now",
            "detail": "state succeeded",
            "finished_at": LATER,
            "counts": (("completed", 2),),
        },
    ),
    Case(
        "stopped",
        ACTIVE,
        lambda r: r.stopped(StopReason.DEADLINE_EXCEEDED, "deadline passed", LATER),
        {
            "phase": Phase.STOPPED,
            "reason": StopReason.DEADLINE_EXCEEDED,
            "detail": "deadline passed",
            "finished_at": LATER,
        },
    ),
    Case(
        "ended",
        ACTIVE,
        lambda r: r.ended(StopReason.JOB_FAILED, "state failed", LATER, "quota exceeded"),
        {
            "phase": Phase.STOPPED,
            "reason": StopReason.JOB_FAILED,
            "detail": "state failed",
            "finished_at": LATER,
            "provider_error": "quota exceeded",
            "result": None,
            "counts": None,
        },
    ),
    # The provider ended the job with its finished part in the answer (an expired batch's output file).
    Case(
        "ended",
        ACTIVE,
        lambda r: r.ended(
            StopReason.JOB_EXPIRED, "state expired", LATER, None, result="file-part", counts=(("completed", 9),)
        ),
        {
            "phase": Phase.STOPPED,
            "reason": StopReason.JOB_EXPIRED,
            "detail": "state expired",
            "finished_at": LATER,
            "provider_error": None,
            "result": "file-part",
            "counts": (("completed", 9),),
        },
    ),
    Case(
        "extended",
        STOPPED,
        lambda r: r.extended(WIDER_PLAN, LATER),
        {
            "plan": WIDER_PLAN,
            "phase": Phase.ACTIVE,
            "reason": None,
            "detail": None,
            "finished_at": None,
            "next_poll_at": LATER,
            "delay_source": DelaySource.MANUAL_EXTENSION,
            "rate_limited_consecutive": 0,
        },
    ),
    Case(
        "rechecking",
        STOPPED,
        lambda r: r.rechecking(WIDER_PLAN, LATER),
        {
            "plan": WIDER_PLAN,
            "phase": Phase.ACTIVE,
            "reason": None,
            "detail": None,
            "finished_at": None,
            "next_poll_at": LATER,
            "delay_source": DelaySource.CREDENTIAL_RECHECK,
            "rate_limited_consecutive": 0,
            "token_refused_consecutive": 1,
        },
    ),
    Case("with_plan", ACTIVE, lambda r: r.with_plan(WIDER_PLAN), {"plan": WIDER_PLAN}),
]


def test_the_sample_record_sets_every_field() -> None:
    defaults = make_record()
    unset = [f.name for f in fields(OperationRecord) if getattr(ACTIVE, f.name) is None]
    assert unset == []
    assert ACTIVE.status_requests_used and ACTIVE.transport_failures_used and ACTIVE.rate_limited_consecutive
    assert ACTIVE.delay_source is not defaults.delay_source


@pytest.mark.parametrize("case", CASES, ids=[f"{c.transition}-{i}" for i, c in enumerate(CASES)])
def test_a_transition_changes_only_what_it_names(case: Case) -> None:
    after = case.apply(case.before)
    for name, value in case.changes.items():
        assert getattr(case.before, name) != value, f"the sample already holds {name}={value!r}: nothing to see"
    for f in fields(OperationRecord):
        expected = case.changes.get(f.name, getattr(case.before, f.name))
        assert getattr(after, f.name) == expected, f"{case.transition} left {f.name} wrong"


def test_every_transition_is_covered() -> None:
    transitions = {
        name
        for name, member in vars(OperationRecord).items()
        if inspect.isfunction(member)
        and not name.startswith("_")
        and inspect.signature(member).return_annotation == "OperationRecord"
    }
    assert transitions == {case.transition for case in CASES}


def test_there_is_no_untyped_way_to_rebuild_a_record() -> None:
    assert not hasattr(OperationRecord, "evolve")


def test_a_transition_can_only_change_fields_the_record_has() -> None:
    """The transitions copy the record without `dataclasses.replace`; a misspelt field must still be refused."""
    with pytest.raises(TypeError, match="status_request_used"):
        ACTIVE._with(status_request_used=8)
    changed, expected = ACTIVE._with(status_requests_used=8), replace(ACTIVE, status_requests_used=8)
    assert changed == expected and hash(changed) == hash(expected)
    assert ACTIVE.status_requests_used == 7
