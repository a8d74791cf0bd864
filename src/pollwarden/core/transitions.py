"""Every change of an operation, in one table (h11 style): from which phase, under which claim, what it writes,
whether it asks a person.

The engine carries each change out (`engine.flow` for a poll, `engine.changes` for the others, `engine.driver`
for admission) and every interface calls the engine; this table is what they all keep. A change not allowed from
the operation's phase is refused before anything is written (`allowed`); the claim says how long a change waits
for the lease a watcher holds while one step runs (`patience`). docs/transitions.md shows the table and who
calls what.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from types import MappingProxyType

from .reasons import Phase


class Change(StrEnum):
    ADMIT = "admit"
    """A watch creates its operation, or resumes it (narrowing is its own change)."""
    SUBMIT = "submit"
    """A submission is recorded, sent once, and on acceptance creates its operation."""
    POLL = "poll"
    """One status request: reserved, sent, recorded (`engine.flow`); a stop opens a decision."""
    PACE = "pace"
    """The fleet's pacing: a due operation waits for its provider's slot, still due."""
    NARROW = "narrow"
    """A resume asks for tighter limits than the operation has."""
    ANSWER = "answer"
    """A person answers an open decision (extend, recheck, keep, close, cancel, resubmit, refuse)."""
    REQUEST_EXTENSION = "request_extension"
    """An agent asks a person for more time or checks after a stop."""
    REQUEST_CANCEL = "request_cancel"
    """An agent asks a person to cancel the job at the provider."""
    INTERRUPT = "interrupt"
    """A watch stopped before the operation was final (Ctrl-C, a callback's exception): recorded, nothing else."""
    RELEASE = "release"
    """A lease given back with the record unchanged."""


class Claim(StrEnum):
    """How a change takes the operation's lease."""

    NONE = "none"
    """No fenced write: it creates the operation, or only appends to its log."""
    HELD = "held"
    """The lease of a claim the caller already holds (a watch's, the fleet's)."""
    AT_ONCE = "at_once"
    """One claim; an operation another process holds is refused ("busy")."""
    BRIEFLY = "briefly"
    """Waits a few seconds (`BRIEF_WAIT`) for a watcher's step: an agent's call should not fail on one poll."""
    FOR_A_STEP = "for_a_step"
    """Waits up to the contract's lease TTL: a person's answer outlasts any one step rather than fail on it."""


BRIEF_WAIT = timedelta(seconds=5)

NONE = frozenset[Phase]()
LIVE = frozenset({Phase.ACTIVE})
ANY = frozenset(Phase)


@dataclass(frozen=True)
class Transition:
    change: Change
    phases: frozenset[Phase]
    """The phases of an existing operation the change may start from."""
    claim: Claim
    writes: tuple[str, ...]
    """The audit events it appends (their KINDs in `pollwarden.events`), at most; a change may write fewer."""
    asks_a_person: bool = False
    """It may open a decision request: written with the change, its webhook queued in the same commit by the
    store (`Store.write(decision=...)`), whoever opens it: the one path by which a person is told."""
    ends_pacing: bool = False
    """It writes the record, so a pacing wait ends with it (`Store.defer_paced`)."""
    creates: bool = False
    """It may start where there is no operation yet, and create it."""


_TABLE = (
    Transition(Change.ADMIT, ANY, Claim.NONE, ("created", "resume_refused"), creates=True),
    Transition(
        Change.SUBMIT,
        NONE,
        Claim.NONE,
        (
            "submission_intent",
            "submitted",
            "submission_unknown",
            "submission_not_sent",
            "submission_rejected",
            "submission_duplicate",
        ),
        creates=True,
    ),
    Transition(
        Change.POLL,
        LIVE,
        Claim.HELD,
        ("reserved", "observed", "decision", "succeeded", "job_ended", "escalated", "request_withheld", "lease_lost"),
        asks_a_person=True,
        ends_pacing=True,
    ),
    Transition(Change.PACE, LIVE, Claim.HELD, ("paced",)),
    Transition(Change.NARROW, LIVE, Claim.AT_ONCE, ("limits_narrowed",), ends_pacing=True),
    Transition(
        Change.ANSWER,
        ANY,
        Claim.FOR_A_STEP,
        ("decided", "extended", "refused", "decision_expired", "inspected", "action"),
        ends_pacing=True,
    ),
    Transition(
        Change.REQUEST_EXTENSION,
        frozenset({Phase.STOPPED}),
        Claim.AT_ONCE,
        ("extension_requested", "decision_requested"),
        asks_a_person=True,
        ends_pacing=True,
    ),
    Transition(
        Change.REQUEST_CANCEL,
        frozenset({Phase.ACTIVE, Phase.STOPPED}),
        Claim.BRIEFLY,
        ("cancel_requested", "decision_requested"),
        asks_a_person=True,
        ends_pacing=True,
    ),
    Transition(Change.INTERRUPT, LIVE, Claim.NONE, ("interrupted",)),
    Transition(Change.RELEASE, ANY, Claim.HELD, ()),
)

TRANSITIONS: Mapping[Change, Transition] = MappingProxyType({t.change: t for t in _TABLE})


def allowed(change: Change, phase: Phase | None) -> bool:
    """Whether `change` may start from an operation in `phase` (None: there is none yet)."""
    transition = TRANSITIONS[change]
    return transition.creates if phase is None else phase in transition.phases


def patience(change: Change, ttl: timedelta) -> timedelta:
    """How long `change` waits for the lease another process holds (`ttl`: the contract's lease TTL)."""
    claim = TRANSITIONS[change].claim
    if claim is Claim.FOR_A_STEP:
        return ttl
    if claim is Claim.BRIEFLY:
        return BRIEF_WAIT
    return timedelta(0)


__all__ = ["BRIEF_WAIT", "TRANSITIONS", "Change", "Claim", "Transition", "allowed", "patience"]
