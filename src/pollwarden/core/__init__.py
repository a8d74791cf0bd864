"""The sans-I/O core: contract, observation, schedule and decision, with no clock, socket or store."""

from .contract.parse import Contract, ContractError, load_contract, parse_contract
from .decide import Action, Decision, Finished, Halt, Poll, Wait, decide, halt, next_step, reserve
from .durations import DurationError, format_duration, format_rfc3339, parse_duration, parse_rfc3339
from .observe import Exchange, FailureKind, Observation, Response, TransportFailure, observe
from .reasons import Category, DelaySource, Jitter, Phase, StopReason
from .record import OperationRecord, Plan, new_record

__all__ = [
    "Action",
    "Category",
    "Contract",
    "ContractError",
    "Decision",
    "DelaySource",
    "DurationError",
    "Exchange",
    "FailureKind",
    "Finished",
    "Halt",
    "Jitter",
    "Observation",
    "OperationRecord",
    "Phase",
    "Plan",
    "Poll",
    "Response",
    "StopReason",
    "TransportFailure",
    "Wait",
    "decide",
    "format_duration",
    "format_rfc3339",
    "halt",
    "load_contract",
    "new_record",
    "next_step",
    "observe",
    "parse_contract",
    "parse_duration",
    "parse_rfc3339",
    "reserve",
]
