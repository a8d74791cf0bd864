"""The audit trail told as a story (R45): one line per decision, in the words an operator uses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .core.durations import parse_rfc3339
from .store.base import Event

SOURCE_WORDS = {
    "provider_retry_after": "provider guidance",
    "provider_poll_hint": "provider hint",
    "local_backoff": "local backoff",
    "manual_extension": "manual extension",
}


def _clock(moment: datetime) -> str:
    return moment.strftime("%H:%M:%S")


def _clock_text(text: str | None) -> str:
    return "?" if text is None else _clock(parse_rfc3339(text))


def _words(reason: str) -> str:
    return reason.replace("_", " ")


def _observed(data: Mapping[str, Any]) -> str:
    status = data.get("http_status")
    state = data.get("state")
    if status is None:
        return f"request failed ({data.get('detail', 'transport failure')})"
    if state is not None:
        return f"polled, state {state}"
    text = f"received {status}"
    if data.get("retry_after_header"):
        text += f", Retry-After {data['retry_after_header']}"
    return text


def render_event(event: Event, observed: Mapping[str, Any] | None) -> str | None:
    d = event.data
    at = _clock(event.at)
    if event.kind == "created":
        return (
            f"{at} watching job {d['job']} ({d['contract']}), deadline {_clock_text(d['deadline_at'])},"
            f" budget {d['max_status_requests']} requests, {d['max_transport_failures']} transport failures"
        )
    if event.kind == "decision":
        head = _observed(observed) if observed is not None else None
        action = d.get("action")
        if action == "wait":
            when = _clock_text(d.get("next_poll_at"))
            source = SOURCE_WORDS.get(str(d.get("delay_source")), str(d.get("delay_source")))
            return f"{at} {head}, next poll {when} from {source}"
        if action == "succeed":
            return f"{at} {head}, result validated, succeeded"
        reason = str(d.get("reason"))
        prefix = f"{at} {head}, " if head else f"{at} "
        if reason in {"job_failed", "job_cancelled", "job_expired"}:
            return f"{prefix}{_words(reason)}, stopped"
        return f"{prefix}{_words(reason)}, escalated"
    if event.kind == "guidance_rejected":
        return f"{at}   rejected {d['source']} {d['value']!r}: {d['why']}"
    if event.kind == "lease_taken_over":
        return f"{at} took over the operation from {d['previous_owner']} (lease {d['token']})"
    if event.kind == "lease_lost":
        return f"{at} lost the lease (token {d['token']}); the response was discarded"
    if event.kind == "resume_refused":
        return f"{at} refused a resume: {d['why']}"
    if event.kind == "decision_requested":
        labels = ", ".join(o["label"] for o in d.get("options", []))
        return f"{at} asked for a decision {d['decision_id']} ({d['reason']}): {labels}"
    if event.kind == "decided":
        note = f" ({d['note']})" if d.get("note") else ""
        return f"{at} {d['by']} chose [{d['option']}] {d['label']} on {d['decision_id']}{note}"
    if event.kind == "refused":
        return f"{at} {d['by']} refused {d['decision_id']}; the operation stays stopped"
    if event.kind == "extended":
        return (
            f"{at} extended: deadline {_clock_text(d['deadline_at'])}, budget {d['max_status_requests']} requests,"
            f" next poll {_clock_text(d['next_poll_at'])} from manual extension"
        )
    if event.kind == "decision_expired":
        return f"{at} decision {d['decision_id']} expired: the operation had moved on"
    if event.kind == "inspected":
        return f"{at} {d['by']} opened the provider console for {d['decision_id']}"
    if event.kind in ("notified", "notify_failed"):
        state = "sent" if d.get("ok") else f"FAILED ({d.get('error')})"
        return f"{at} webhook for {d['decision_id']} {state} after {d.get('attempts')} attempt(s)"
    if event.kind == "action":
        state = "done" if d.get("ok") else "FAILED"
        return f"{at} action {d.get('action')} {state}" + (f" by {d['by']}" if d.get("by") else "")
    if event.kind == "submission_intent":
        return f"{at} recorded a submission {d['fingerprint'][:19]}… before sending it"
    if event.kind == "submitted":
        return (
            f"{at} submitted job {d['job']} ({d['contract']}), deadline {_clock_text(d['deadline_at'])},"
            f" budget {d['max_status_requests']}"
        )
    if event.kind.startswith("submission_"):
        return f"{at} submission {event.kind.removeprefix('submission_')}: {d}"
    if event.kind == "session_started":
        return f"{at} agent session {d.get('session')} started ({d.get('server')}), client {d.get('client')}"
    if event.kind == "watch_started":
        return f"{at} the agent started operation {d.get('operation')} on job {d.get('job')} ({d.get('contract')})"
    if event.kind == "call_intent":
        return (
            f"{at} call {d.get('call')}: {d.get('purpose')} for {d.get('operation')} (approval {d.get('approval')},"
            f" requests {d.get('status_requests_used')}/{d.get('max_status_requests')})"
        )
    if event.kind == "call_result":
        return f"{at} call {d.get('call')}: {d.get('outcome', 'done')}"
    if event.kind == "call_denied":
        return f"{at} call for {d.get('operation')} denied: {d.get('why')}"
    if event.kind.endswith("_approval_requested"):
        return f"{at} {event.kind.split('_')[0]} approval {d.get('grant_id')} requested for {d.get('scope')}"
    if event.kind.startswith("approval_"):
        return f"{at} approval {d.get('grant_id')} {event.kind.removeprefix('approval_')} by {d.get('by')}"
    if event.kind == "extension_requested":
        return f"{at} the agent asked for more time for {d.get('operation')}: {d.get('reason', '')}".rstrip(": ")
    if event.kind == "paced":
        return f"{at} paced by the fleet's cap for {d['provider']}: next poll not before {_clock_text(d['until'])}"
    if event.kind == "limits_narrowed":
        return f"{at} limits narrowed: deadline {_clock_text(d['deadline_at'])}, budget {d['max_status_requests']}"
    return None


def story_lines(events: Sequence[Event]) -> list[str]:
    lines: list[str] = []
    observed: Mapping[str, Any] | None = None
    for event in events:
        if event.kind == "observed":
            observed = event.data
            continue
        line = render_event(event, observed)
        if event.kind == "decision":
            observed = None
        if line is not None:
            lines.append(line)
    return lines


def story_json(events: Sequence[Event]) -> list[dict[str, Any]]:
    return [{"seq": e.seq, "at": e.at.isoformat(), "kind": e.kind, "data": dict(e.data)} for e in events]
