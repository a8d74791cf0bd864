"""The audit trail told as a story (R45): one line per decision, in the words an operator uses.

Each kind has one renderer in `RENDERERS`, fed the typed event (`events.parse`), so a record written by an
older version, with a field missing, still tells its line: a missing value reads "?", never "None".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from .. import events as ev
from ..core.contract.result import counts_text, result_text
from ..core.durations import DurationError, parse_rfc3339
from ..store.base import AGENT_LOG_PREFIX, CONTRACT_LOG_PREFIX, Event

SOURCE_WORDS = {
    "provider_retry_after": "provider guidance",
    "provider_poll_hint": "provider hint",
    "local_backoff": "local backoff",
    "learnt": "the contract's learnt schedule",
    "manual_extension": "manual extension",
    "credential_recheck": "a check with the credential configured now",
}

JOB_ENDED_REASONS = frozenset({"job_failed", "job_cancelled", "job_expired"})


@dataclass(frozen=True)
class Scene:
    """Where an event sits: its clock time, its log, and the observation a decision line starts from."""

    at: str
    log_id: str
    observed: ev.Observed | None

    @property
    def operation(self) -> str | None:
        """The operation whose log this is; an agent session's or an installed contract's log is no operation."""
        return None if self.log_id.startswith((AGENT_LOG_PREFIX, CONTRACT_LOG_PREFIX)) else self.log_id


Renderer = Callable[[ev.AuditEvent, Scene], str | None]
RENDERERS: dict[str, Renderer] = {}
"""kind -> its line; a kind that tells no line of its own (reserved, succeeded, ...) maps to `_silent`."""

E = TypeVar("E", bound=ev.AuditEvent)


def renders(*classes: type[E]) -> Callable[[Callable[[E, Scene], str | None]], Callable[[E, Scene], str | None]]:
    def register(fn: Callable[[E, Scene], str | None]) -> Callable[[E, Scene], str | None]:
        def typed(event: ev.AuditEvent, scene: Scene) -> str | None:
            if not isinstance(event, classes):
                raise TypeError(f"{fn.__name__} renders {classes}, not {type(event).__name__}")
            return fn(event, scene)

        for cls in classes:
            RENDERERS[cls.KIND] = typed
        return fn

    return register


def _v(value: object) -> str:
    """A value for a sentence: a field an older record lacks reads "?", never "None"."""
    return "?" if value is None or value == "" else str(value)


def _clock(moment: datetime) -> str:
    return moment.strftime("%H:%M:%S")


def _clock_text(text: str | None) -> str:
    if not text:
        return "?"
    try:
        return _clock(parse_rfc3339(text))
    except DurationError:
        return "?"


def _words(reason: str | None) -> str:
    return _v(reason).replace("_", " ")


@renders(ev.Reserved, ev.Escalated, ev.Observed)
def _silent(event: ev.AuditEvent, scene: Scene) -> None:
    """The decision line already tells these; `story --json` has them all."""
    return None


@renders(ev.SucceededEvent)
def _succeeded(e: ev.SucceededEvent, s: Scene) -> str | None:
    """The decision line tells the success; the provider's counts, when it gave them, say what the result covers."""
    told = counts_text(_counts(e.counts))
    return None if told is None else f"{s.at}   the result covers: {told}"


@renders(ev.JobEnded)
def _job_ended(e: ev.JobEnded, s: Scene) -> str | None:
    """The decision line tells the ending; a partial result kept with it (what finished first) is told here."""
    summary = e.summary or {}
    result = summary.get("result")
    if result is None:
        return None
    told = counts_text(_counts(summary.get("counts")))
    covers = f" ({told})" if told else ""
    return f"{s.at}   kept the finished part as a partial result: {_v(result_text(result))[:300]}{covers}"


def _counts(value: object) -> tuple[tuple[str, int | float], ...] | None:
    """The counts of an event's payload, as `counts_text` reads them (a hand-edited payload may hold anything)."""
    if not isinstance(value, Mapping):
        return None
    return tuple((str(k), v) for k, v in value.items() if isinstance(v, int | float) and not isinstance(v, bool))


def _observed(o: ev.Observed) -> str:
    if o.http_status is None:
        return f"request failed ({o.detail or 'transport failure'})"
    if o.state is not None:
        return f"polled, state {o.state}"
    text = f"received {o.http_status}"
    if o.retry_after_header:
        text += f", Retry-After {o.retry_after_header}"
    return text


@renders(ev.Created)
def _created(e: ev.Created, s: Scene) -> str:
    return (
        f"{s.at} watching job {_v(e.job)} ({_v(e.contract)}), deadline {_clock_text(e.deadline_at)},"
        f" budget {_v(e.max_status_requests)} requests, {_v(e.max_transport_failures)} transport failures"
    )


def _learnt_words(e: ev.DecisionEvent) -> str | None:
    """The learnt part of a decision's detail, as `core.learnt.Learnt.words` wrote it."""
    detail = e.detail or ""
    at = detail.find("next check in ")
    return None if at < 0 else detail[at:].split("; ")[0]


@renders(ev.DecisionEvent)
def _decision(e: ev.DecisionEvent, s: Scene) -> str:
    head = _observed(s.observed) if s.observed is not None else None
    if e.action == "wait":
        source = SOURCE_WORDS.get(str(e.delay_source), _v(e.delay_source))
        learnt = _learnt_words(e) if e.delay_source == "learnt" else None
        if learnt is not None:  # the decision's own words: "next check in 42s: learnt from 312 ended jobs ..."
            return f"{s.at} {_v(head)}, {_v(learnt)} (at {_clock_text(e.next_poll_at)})"
        return f"{s.at} {_v(head)}, next poll {_clock_text(e.next_poll_at)} from {source}"
    if e.action == "succeed":
        return f"{s.at} {_v(head)}, result validated, succeeded"
    prefix = f"{s.at} {head}, " if head else f"{s.at} "
    if e.reason in JOB_ENDED_REASONS:
        return f"{prefix}{_words(e.reason)}, stopped"
    if head is None and e.rule not in (None, e.reason):  # a stop of its own rule, with no answer to tell it
        return f"{prefix}{_words(e.reason)} ({_v(e.rule)}), escalated: {_v(e.detail)}"
    return f"{prefix}{_words(e.reason)}, escalated"


@renders(ev.GuidanceRejected)
def _rejected(e: ev.GuidanceRejected, s: Scene) -> str:
    value = "?" if e.value is None else repr(e.value)
    return f"{s.at}   rejected {_v(e.source)} {value}: {_v(e.why)}"


@renders(ev.LeaseTakenOver)
def _taken_over(e: ev.LeaseTakenOver, s: Scene) -> str:
    return f"{s.at} took over the operation from {_v(e.previous_owner)} (lease {_v(e.token)})"


@renders(ev.LeaseLost)
def _lost(e: ev.LeaseLost, s: Scene) -> str:
    return f"{s.at} lost the lease (token {_v(e.token)}); the response was discarded"


@renders(ev.RequestWithheld)
def _withheld(e: ev.RequestWithheld, s: Scene) -> str:
    return f"{s.at} did not send request {_v(e.request_no)} (counted): {_v(e.why)}"


@renders(ev.ResumeRefused)
def _resume_refused(e: ev.ResumeRefused, s: Scene) -> str:
    return f"{s.at} refused a resume: {_v(e.why)}"


@renders(ev.DecisionRequested)
def _requested(e: ev.DecisionRequested, s: Scene) -> str:
    labels = ", ".join(_v(o.get("label")) for o in e.options)
    about = "an agent's cancel request" if e.topic == "cancel_request" else _v(e.reason)
    return f"{s.at} asked for a decision {_v(e.decision_id)} ({about}): {labels}"


@renders(ev.Decided)
def _decided(e: ev.Decided, s: Scene) -> str:
    note = f" ({e.note})" if e.note else ""
    return f"{s.at} {_v(e.by)} chose [{_v(e.option)}] {_v(e.label)} on {_v(e.decision_id)}{note}"


@renders(ev.Refused)
def _refused(e: ev.Refused, s: Scene) -> str:
    return f"{s.at} {_v(e.by)} refused {_v(e.decision_id)}; the operation stays stopped"


@renders(ev.Extended)
def _extended(e: ev.Extended, s: Scene) -> str:
    limits = f"deadline {_clock_text(e.deadline_at)}, budget {_v(e.max_status_requests)} requests"
    if e.delay_source == "credential_recheck":
        return f"{s.at} one check with the credential configured now is due {_clock_text(e.next_poll_at)}: {limits}"
    return f"{s.at} extended: {limits}, next poll {_clock_text(e.next_poll_at)} from manual extension"


@renders(ev.DecisionExpired)
def _expired(e: ev.DecisionExpired, s: Scene) -> str:
    return f"{s.at} decision {_v(e.decision_id)} expired: the operation had moved on"


@renders(ev.Inspected)
def _inspected(e: ev.Inspected, s: Scene) -> str:
    return f"{s.at} {_v(e.by)} opened the provider console for {_v(e.decision_id)}"


@renders(ev.Notified, ev.NotifyFailed)
def _notified(e: ev.DeliveryEvent, s: Scene) -> str:
    state = "sent" if e.ok else f"FAILED ({_v(e.error)})"
    return f"{s.at} webhook for {_v(e.decision_id)} {state} after {_v(e.attempts)} attempt(s)"


@renders(ev.ActionEvent)
def _action(e: ev.ActionEvent, s: Scene) -> str:
    state = "done" if e.ok else "FAILED"
    return f"{s.at} action {_v(e.action)} {state}" + (f" by {e.by}" if e.by else "")


@renders(ev.SubmissionIntent)
def _intent(e: ev.SubmissionIntent, s: Scene) -> str:
    return f"{s.at} recorded a submission {_v(e.fingerprint)[:19]}… before sending it"


@renders(ev.Submitted)
def _submitted(e: ev.Submitted, s: Scene) -> str:
    return (
        f"{s.at} submitted job {_v(e.job)} ({_v(e.contract)}), deadline {_clock_text(e.deadline_at)},"
        f" budget {_v(e.max_status_requests)}"
    )


@renders(ev.SubmissionUnknown, ev.SubmissionNotSent, ev.SubmissionRejected, ev.SubmissionDuplicate)
def _marked(e: ev.SubmissionMarked, s: Scene) -> str:
    why = e.detail or (f"HTTP {e.http_status}" if e.http_status is not None else None)
    return f"{s.at} submission {e.state.replace('_', ' ')}" + (f": {why}" if why else "")


@renders(ev.SessionStarted)
def _session(e: ev.SessionStarted, s: Scene) -> str:
    who = f", agent {_principal(e.agent)}" if e.agent else f", isolation {_v(e.isolation)}" if e.isolation else ""
    return f"{s.at} agent session {_v(e.session)} started ({_v(e.server)}), client {_v(e.client)}{who}"


def _principal(who: Mapping[str, Any]) -> str:
    """An agent as the kernel named it to the broker: user name, uid and pid."""
    return f"{_v(who.get('user'))} (uid {_v(who.get('uid'))}, pid {_v(who.get('pid'))})"


@renders(ev.WatchStarted)
def _watch_started(e: ev.WatchStarted, s: Scene) -> str:
    return f"{s.at} the agent started operation {_v(e.operation)} on job {_v(e.job)} ({_v(e.contract)})"


@renders(ev.WatchRejoined)
def _watch_rejoined(e: ev.WatchRejoined, s: Scene) -> str:
    return f"{s.at} the agent asked again for job {_v(e.job)} and got operation {_v(e.operation)} back, budget kept"


@renders(ev.CallIntent)
def _call_intent(e: ev.CallIntent, s: Scene) -> str:
    return (
        f"{s.at} call {_v(e.call)}: {_v(e.purpose)} for {_v(e.operation)} (approval {_v(e.approval)},"
        f" requests {_v(e.status_requests_used)}/{_v(e.max_status_requests)})"
        + (f" by agent {_principal(e.agent)}" if e.agent else "")
    )


@renders(ev.CallResult)
def _call_result(e: ev.CallResult, s: Scene) -> str:
    return f"{s.at} call {_v(e.call)}: {e.outcome or 'done'}"


@renders(ev.CallDenied)
def _call_denied(e: ev.CallDenied, s: Scene) -> str:
    return f"{s.at} call for {_v(e.operation)} denied: {_v(e.why)}"


@renders(ev.TaskCancelled)
def _task_cancelled(e: ev.TaskCancelled, s: Scene) -> str:
    return f"{s.at} the agent cancelled its task on {_v(e.operation)}: the server stopped waiting, the job goes on"


@renders(ev.BrokerStarted)
def _broker_started(e: ev.BrokerStarted, s: Scene) -> str:
    who = f"agents {_v(e.agents)}, approvers {_v(e.approvers)}"
    return f"{s.at} broker started as {_v(e.user)} (pid {_v(e.pid)}): {who}"


@renders(ev.ConnectionRefused)
def _connection_refused(e: ev.ConnectionRefused, s: Scene) -> str:
    who = _principal(e.peer) if e.peer else "?"
    return f"{s.at} {_v(e.mode)} connection of {who} refused: {_v(e.why)}"


@renders(ev.PersonCommand)
def _person_command(e: ev.PersonCommand, s: Scene) -> str:
    who = _principal(e.peer) if e.peer else "?"
    return f"{s.at} {who} ran {_v(e.command)} {_v(e.subject)} through the broker (exit {_v(e.exit)})"


@renders(ev.SessionApprovalRequested, ev.CallApprovalRequested)
def _grant_requested(e: ev.GrantRequested, s: Scene) -> str:
    return f"{s.at} {e.KIND.split('_')[0]} approval {_v(e.grant_id)} requested for {_v(e.scope)}"


@renders(ev.ApprovalApproved, ev.ApprovalRefused, ev.ApprovalRevoked, ev.ApprovalExpired)
def _grant_answered(e: ev.GrantAnswered, s: Scene) -> str:
    if isinstance(e, ev.ApprovalRefused) and e.peer:  # the broker refused a command, no grant was answered
        return f"{s.at} {_v(e.command)} {_v(e.subject)} refused to {_principal(e.peer)}: {_v(e.why)}; nothing changed"
    return f"{s.at} approval {_v(e.grant_id)} {e.KIND.removeprefix('approval_')} by {_v(e.by)}"


@renders(ev.ExtensionRequested)
def _extension(e: ev.ExtensionRequested, s: Scene) -> str:
    # In the operation's own log the payload names no operation: the log is the operation.
    operation = e.operation or s.operation or "an operation"
    line = f"{s.at} the agent asked for more time for {operation}"
    return f"{line}: {e.reason}" if e.reason else line


@renders(ev.CancelRequested)
def _cancel_requested(e: ev.CancelRequested, s: Scene) -> str:
    operation = e.operation or s.operation or "an operation"
    line = f"{s.at} the agent asked a person to cancel the job of {operation} (decision {_v(e.decision_id)})"
    return f"{line}: {e.reason}" if e.reason else line


@renders(ev.WatchInterrupted)
def _interrupted(e: ev.WatchInterrupted, s: Scene) -> str:
    line = f"{s.at} watch interrupted by {_v(e.by)} ({_v(e.why)})"
    if not e.resumable:
        return line
    return (
        f"{line}; resume operation {_v(e.operation or s.operation)}: deadline {_clock_text(e.deadline_at)},"
        f" {_v(e.status_requests_used)}/{_v(e.max_status_requests)} requests used, kept"
    )


@renders(ev.Paced)
def _paced(e: ev.Paced, s: Scene) -> str:
    return f"{s.at} paced by the fleet's cap for {_v(e.provider)}: next poll not before {_clock_text(e.until)}"


@renders(ev.LimitsNarrowed)
def _narrowed(e: ev.LimitsNarrowed, s: Scene) -> str:
    return f"{s.at} limits narrowed: deadline {_clock_text(e.deadline_at)}, budget {_v(e.max_status_requests)}"


@renders(ev.ContractInstalled)
def _installed(e: ev.ContractInstalled, s: Scene) -> str:
    return (
        f"{s.at} {_v(e.by)} installed contract {_v(e.name)} version {_v(e.digest)[:12]} ({_v(e.via)}, from"
        f" {_v(e.source)}): its requests and credential ({_v(e.account)}) go to {_v(e.origin)}"
    )


@renders(ev.ContractRefused)
def _contract_refused(e: ev.ContractRefused, s: Scene) -> str:
    return (
        f"{s.at} {_v(e.by)} refused to run this operation: its contract (version {_v(e.digest)[:12]}) is not"
        " installed; nothing of it was used"
    )


@renders(ev.RecordUnreadable)
def _unreadable(e: ev.RecordUnreadable, s: Scene) -> str:
    return f"{s.at} its record could not be read ({_v(e.why)}): set aside, no claim takes it until it is repaired"


@renders(ev.SigningKeyRotated)
def _rotated(e: ev.SigningKeyRotated, s: Scene) -> str:
    return f"{s.at} signing key rotated by {_v(e.by)}: {_v(e.old_key_id)} signs this head last, {_v(e.new_key_id)} next"


@renders(ev.WitnessConfigured)
def _witness_set(e: ev.WitnessConfigured, s: Scene) -> str:
    return f"{s.at} witness set by {_v(e.by)}: new heads are kept in {_v(e.location)}"


@renders(ev.WitnessCleared)
def _witness_cleared(e: ev.WitnessCleared, s: Scene) -> str:
    return f"{s.at} witness cleared by {_v(e.by)}: new heads are kept in the home only"


def render_event(event: Event, observed: ev.Observed | None = None) -> str | None:
    """One line for a stored event; a kind this version does not know is named, not hidden."""
    scene = Scene(_clock(event.at), event.operation_id, observed)
    typed = ev.parse(event.kind, event.data)
    if typed is None:
        return f"{scene.at} {_words(event.kind)} (recorded by another version; see `story --json`)"
    return RENDERERS[event.kind](typed, scene)


def story_lines(events: Sequence[Event]) -> list[str]:
    lines: list[str] = []
    observed: ev.Observed | None = None
    for event in events:
        if event.kind == ev.Observed.KIND:
            observed = ev.Observed.from_json(event.data)
            continue
        line = render_event(event, observed)
        if event.kind == ev.DecisionEvent.KIND:
            observed = None
        if line is not None:
            lines.append(line)
    return lines


def story_json(events: Sequence[Event]) -> list[dict[str, Any]]:
    return [{"seq": e.seq, "at": e.at.isoformat(), "kind": e.kind, "data": dict(e.data)} for e in events]
