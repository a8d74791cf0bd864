"""The closed vocabularies of the core: state categories, stop reasons, delay sources.

They are strings on the wire (JSON, audit, exit reports), so each is a `StrEnum` whose values are fixed.
"""

from __future__ import annotations

from enum import StrEnum


class Category(StrEnum):
    """What a provider state permits (R2): only the contract's table assigns a value to one of these."""

    PENDING = "pending"
    SUCCESS = "success"
    FAILURE = "failure"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    NEEDS_PERSON = "needs_person"
    UNKNOWN = "unknown"


class StopReason(StrEnum):
    """Why waiting ended without success; each one decides what a person may do next."""

    JOB_FAILED = "job_failed"
    JOB_CANCELLED = "job_cancelled"
    JOB_EXPIRED = "job_expired"
    JOB_NEEDS_ACTION = "job_needs_action"
    UNKNOWN_STATE = "unknown_state"
    INVALID_RESPONSE = "invalid_response"
    RESULT_INVALID = "result_invalid"
    CONTRADICTORY_STATUS = "contradictory_status"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    REQUEST_BUDGET_EXHAUSTED = "request_budget_exhausted"
    RATE_LIMITED = "rate_limited"
    AUTHORIZATION_DENIED = "authorization_denied"
    PROVIDER_FAILURE = "provider_failure"
    AMBIGUOUS_DELIVERY = "ambiguous_delivery"
    INTEGRATION_FAILURE = "integration_failure"
    USEFULNESS_WINDOW_CLOSED = "usefulness_window_closed"

    @property
    def job_ended(self) -> bool:
        """True when the provider itself ended the job: the stop is a fact, not a question (exit 3)."""
        return self in _JOB_ENDED


_JOB_ENDED = frozenset({StopReason.JOB_FAILED, StopReason.JOB_CANCELLED, StopReason.JOB_EXPIRED})


class DelaySource(StrEnum):
    """Who chose the next poll time (R44): the audit must say whether a wait was ours or the provider's."""

    PROVIDER_RETRY_AFTER = "provider_retry_after"
    PROVIDER_POLL_HINT = "provider_poll_hint"
    PROVIDER_ESTIMATE = "provider_estimate"
    """Moved onto the provider's own estimate of when the job ends (`[fields] estimated_completion_at`)."""
    LOCAL_BACKOFF = "local_backoff"
    LEARNT = "learnt"
    """Placed from the contract's history of job durations for its p95 lag target (`core.learnt`)."""
    MANUAL_EXTENSION = "manual_extension"
    CREDENTIAL_RECHECK = "credential_recheck"
    """A person chose one check with the credential configured now, after a refusal: its sender reads it again."""
    PROVIDER_PUSH = "provider_push"
    """A signed push from the provider made the check due now (issue 27); the answer it gets decides."""


class Phase(StrEnum):
    """Where an operation is: only ACTIVE permits another status request."""

    ACTIVE = "active"
    SUCCEEDED = "succeeded"
    STOPPED = "stopped"


class Jitter(StrEnum):
    BOUNDED = "bounded"
    FULL = "full"
