"""One engine under every interface: admission and the poll step, written once (see `flow` and `driver`)."""

from ..core.lease import lease_ttl
from .driver import (
    BATCH,
    AdmissionError,
    Admitted,
    BatchAdmissionError,
    Cancelled,
    Engine,
    StatusSender,
    Watching,
    new_decision_id,
)
from .flow import Busy, Done, NotYet, Polled, StepResult

__all__ = [
    "BATCH",
    "AdmissionError",
    "Admitted",
    "BatchAdmissionError",
    "Busy",
    "Cancelled",
    "Done",
    "Engine",
    "NotYet",
    "Polled",
    "StatusSender",
    "StepResult",
    "Watching",
    "lease_ttl",
    "new_decision_id",
]
