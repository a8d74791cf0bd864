"""What every framework tool shares, with no framework in it: the operation a tool call owns, its watch, its
answer to the framework, and a person's answer to a decision applied through the one decision path.

A framework re-runs a tool: LangGraph runs a node again from its start when it is resumed, an Agents SDK run
calls a tool again after an approval. So a tool call never starts a fresh operation of its own accord: its
operation id is derived from what the framework keeps across re-runs (the graph's thread, the tool, the
contract, the job), and a second run of the same call resumes the stored operation, with its deadline and budget
as they were (and a final one is returned as it is, with no request sent).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from ..actions.decisions import person_problem as decisions_person_problem
from ..api import Outcome, Stopped, Succeeded, Watch, check_names
from ..core.admission import operation_id_problem
from ..core.contract.parse import Contract
from ..core.contract.result import JSONValue
from ..core.escalation import DecisionError, DecisionRequest, Option, OptionKind
from ..shown import shown_request

if TYPE_CHECKING:
    from ..actions.decisions import Outcome as Decided
    from ..store.base import Store
    from ..store.roles import Decisions

_PROBE_ID = "probe"
"""The operation id a tool's settings are checked with when it is built: nothing is opened or stored then."""

"""The longest approver name and note a framework's answer may carry: the console's limits (console.actions)."""


def missing_extra(what: str, extra: str) -> ImportError:
    """The error a framework module raises when its framework is not installed: which extra brings it."""
    return ImportError(f"pollwarden.integrations.{what} needs the {extra!r} extra: pip install 'pollwarden[{extra}]'")


def operation_id_for(prefix: str, *parts: str) -> str:
    """`prefix:part:part...` when that is a valid operation id, else `prefix-` and a hash of the parts.

    Readable ids keep the thread and the job visible in `pollwarden status`; a part with ':' of its own, a
    character an id cannot hold or a total past 128 characters is hashed instead, so two different sets of
    parts never meet in one id (a readable id always has a ':', a hashed one never).
    """
    readable = ":".join((prefix, *parts))
    if all(part and ":" not in part for part in parts) and operation_id_problem(readable) is None:
        return readable
    digest = hashlib.sha256(json.dumps([prefix, *parts]).encode("utf-8")).hexdigest()[:32]
    return f"{prefix}-{digest}"


def continue_option(request: DecisionRequest) -> Option | None:
    """The option that lets waiting go on (extend, else pause), the only one a yes/no approval can mean."""
    for kind in (OptionKind.EXTEND, OptionKind.PAUSE):
        for option in request.options:
            if option.kind is kind:
                return option
    return None


def decision_json(request: DecisionRequest, answer_with: str) -> dict[str, JSONValue]:
    """What a person is shown of an open decision: its id, the question (R31's message) and the bounded options.

    Provider text in the question is made visible (`shown`): the framework's front end may print it as it is.
    """
    safe = shown_request(request)
    options: list[JSONValue] = [
        {"number": o.number, "kind": o.kind.value, "label": o.label, "effect": o.effect} for o in safe.options
    ]
    return {
        "decision_id": request.decision_id,
        "operation_id": request.operation_id,
        "job_id": safe.job_id,
        "topic": request.topic.value,
        "reason": request.reason.value if request.reason is not None else None,
        "question": safe.render(),
        "options": options,
        "answer_with": answer_with,
    }


def outcome_json(outcome: Outcome, answer_with: str) -> dict[str, JSONValue]:
    """A tool's answer to the model: the outcome, the operation's summary (as `status --json` has it)."""
    summary: dict[str, JSONValue] = outcome.record.summary() if outcome.record is not None else {}
    if isinstance(outcome, Succeeded):
        return {"status": "succeeded", "operation_id": outcome.operation_id, "result": outcome.result, **_op(summary)}
    decision = outcome.decision
    return {
        "status": "stopped",
        "operation_id": outcome.operation_id,
        "reason": outcome.reason.value,
        "job_ended": outcome.job_ended,
        "decision": decision_json(decision, answer_with) if decision is not None else None,
        "message": (
            "the job ended at the provider without success"
            if outcome.job_ended
            else "waiting stopped; only a person's decision can let it go on"
            if decision is not None
            else "waiting stopped and nothing is left to decide"
        ),
        **_op(summary),
    }


def _op(summary: dict[str, JSONValue]) -> dict[str, JSONValue]:
    return {"operation": summary} if summary else {}


@dataclass(frozen=True)
class Answer:
    """A person's answer to one decision, as a framework carries it back."""

    decision_id: str
    option: int | None
    """None when the answer refuses the decision."""
    by: str
    note: str | None = None

    def to_json(self) -> dict[str, JSONValue]:
        answer: dict[str, JSONValue] = {"decision": self.decision_id, "by": self.by}
        if self.option is None:
            answer["refuse"] = True
        else:
            answer["option"] = self.option
        if self.note is not None:
            answer["note"] = self.note
        return answer


ANSWER_FORM = '{"decision": DECISION_ID, "option": N, "by": "NAME"} (or "refuse": true instead of "option")'


def person_problem(by: object, note: object = None) -> str | None:
    """Why `by` cannot name the person deciding (or `note` go with it), or None: `decisions.person_problem`."""
    problem = decisions_person_problem(by, note)
    return None if problem is None else f'"{problem[0]}" {problem[1]}'


def parse_answer(value: object) -> Answer | str:
    """A resume value read as a person's answer, or the problem with it (hostile until parsed)."""
    if not isinstance(value, Mapping):
        return f"the answer must be a mapping like {ANSWER_FORM}, not {type(value).__name__}"
    unknown = sorted(str(k) for k in value if k not in ("decision", "option", "refuse", "by", "note"))
    if unknown:
        return f"the answer has unknown keys {', '.join(unknown)}; give {ANSWER_FORM}"
    decision, option, refuse = value.get("decision"), value.get("option"), value.get("refuse", False)
    if not isinstance(decision, str) or not decision:
        return f'the answer must name its "decision" (the decision_id it answers); give {ANSWER_FORM}'
    if refuse is not True and refuse is not False:
        return '"refuse" must be true or false'
    if refuse is (option is not None):
        return f'give one of "option" (a number from the options) or "refuse": true; give {ANSWER_FORM}'
    if option is not None and (isinstance(option, bool) or not isinstance(option, int)):
        return f'"option" must be one of the option numbers, not {option!r}'
    by, note = value.get("by"), value.get("note")
    if (problem := person_problem(by, note)) is not None:
        return problem
    assert isinstance(by, str) and (note is None or isinstance(note, str))
    return Answer(decision, option, by.strip(), note)


class NewLimits(TypedDict, total=False):
    """What a tool asks of a new operation, as `Watch` takes it (None: the contract's own)."""

    deadline: timedelta | str | None
    max_requests: int | None
    useful_for: timedelta | str | None


class ToolOptions(NewLimits, total=False):
    """The keywords of `langgraph_tool` and `openai_agents_tool` beyond the contract, declared once: `deadline`,
    `max_requests` and `useful_for` (as the Python API takes them) are what a new operation starts with (else the
    contract's), `vars` the contract's [vars]; `name` (default "wait_for_job") and `description` are the tool's."""

    home: str | Path | None
    name: str
    description: str | None
    vars: Mapping[str, str] | None


class JobTool:
    """One tool's settings, checked once when the tool is built: the contract (loaded and checked by `Watch`,
    the API's one place for it), the home, and the limits a new operation starts with."""

    def __init__(self, contract: Contract | str | Path, options: ToolOptions) -> None:
        check_names(options, tuple(ToolOptions.__annotations__))
        self.limits = NewLimits(
            deadline=options.get("deadline"),
            max_requests=options.get("max_requests"),
            useful_for=options.get("useful_for"),
        )
        self.home = options.get("home")
        self.name = options.get("name", "wait_for_job")
        self.description = options.get("description")
        probe = Watch(contract, home=self.home, operation_id=_PROBE_ID, vars=options.get("vars"), **self.limits)
        self.contract = probe.contract

    def open_store(self) -> Store:
        from ..api import WatchError
        from ..home.directory import resolve_home
        from ..home.operating import HomeError, open_store

        try:
            return open_store(resolve_home(str(self.home) if self.home is not None else None))
        except HomeError as exc:
            raise WatchError(str(exc)) from None

    def _limits(self, new: bool) -> NewLimits:
        """The tool's limits for a new operation; none for a resume, so a person's extension is kept (the tool's
        limits would narrow it back) and nothing is widened."""
        return self.limits if new else NewLimits()

    def watch(self, store: Store, operation_id: str, job_id: str) -> Outcome:
        """Start the operation, or resume it, and watch it to its outcome (blocking)."""
        limits = self._limits(store.get(operation_id) is None)
        return Watch(self.contract, job_id, store=store, operation_id=operation_id, **limits).run()

    async def watch_async(self, operation_id: str, job_id: str) -> Outcome:
        """The same through the API's `watch`: cancelling the awaiting task cancels the watch within one request
        (recorded as `interrupted`, the operation left to resume), and no thread polls on behind it."""
        import asyncio

        from ..api import watch

        def is_new() -> bool:
            store = self.open_store()
            try:
                return store.get(operation_id) is None
            finally:
                store.close()

        limits = self._limits(await asyncio.to_thread(is_new))
        return await watch(self.contract, job_id, home=self.home, operation_id=operation_id, **limits)

    def open_decision(self, store: Decisions, operation_id: str) -> DecisionRequest | None:
        found = store.decisions(operation_id, open_only=True)
        return found[-1].request if found else None

    def decide(self, store: Store, answer: Answer) -> Decided:
        """The person's answer through `operating.decide`, what `pollwarden decide` and the console run: the same
        checks (no second answer, expired options), the same audit, the approver's name recorded."""
        from ..home.operating import HomeError, decide

        try:
            return decide(
                store,
                answer.decision_id,
                option=answer.option,
                refuse=answer.option is None,
                by=answer.by,
                note=answer.note,
            )
        except HomeError as exc:
            raise DecisionError(str(exc)) from None


def stopped_for_decision(outcome: Outcome) -> DecisionRequest | None:
    """The open decision a stop waits on, if any."""
    return outcome.decision if isinstance(outcome, Stopped) else None


__all__ = [
    "ANSWER_FORM",
    "Answer",
    "JobTool",
    "continue_option",
    "decision_json",
    "missing_extra",
    "operation_id_for",
    "outcome_json",
    "parse_answer",
    "person_problem",
    "stopped_for_decision",
]
