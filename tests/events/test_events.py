"""Typed audit events: one class per kind, a registry, tolerant parsing, and the payloads producers wrote."""

from __future__ import annotations

import re
from dataclasses import fields
from datetime import timedelta
from pathlib import Path

import pytest

import pollwarden
from pollwarden import events as ev
from pollwarden.core import decide, halt, observe, reserve
from pollwarden.core.codec import record_to_json
from pollwarden.core.reasons import StopReason
from tests.core.support import T0, body, make_contract, make_record, poll, response

SRC = Path(pollwarden.__file__).resolve().parent

# Kinds written through a format string: every value the producers can put in it.
FORMATTED = {
    "submission_{state}": ("unknown", "not_sent", "rejected"),
    "{grant.kind}_approval_requested": ("session", "call"),
    "approval_{status}": ("approved", "refused", "revoked", "expired"),
}


def _written_kinds() -> set[str]:
    """Kinds that appear where the code hands an event to the store: `(kind, {` tuples and append calls."""
    kinds: set[str] = set()
    patterns = (
        r"\[\s*\(\"([a-z_]+)\",",  # [("kind", payload), ...] as store.write takes them
        r"\),\s*\(\"([a-z_]+)\",",  # ..., ("kind", payload)]
        r"extend\(\(\"([a-z_]+)\",",  # events.extend(("kind", ...) for ...)
        r"append\([^,()]+, *\"([a-z_]+)\"",  # store.append(op, "kind", ...)
        r"_append\([^,()]+, *[^,()]+, *\"([a-z_]+)\"",  # self._append(tx, op, "kind", ...)
        r"_audit\(\s*store,\s*\"([a-z_]+)\"",  # the MCP session log
        r"kind = \"([a-z_]+)\" if [^\n]+ else \"[a-z_]+\"",
        r"kind = \"[a-z_]+\" if [^\n]+ else \"([a-z_]+)\"",
    )
    for path in SRC.rglob("*.py"):
        if path.parent.name == "simulator":  # the scripted provider writes no audit; its "kind" is a URL's
            continue
        if path.relative_to(SRC).parts[0] == "core":  # the pure core hands nothing to a store; its pairs are keys
            continue
        # pairs iterated over (`for name, value in (("seq", seq), ...)`) are not events
        text = "\n".join(line for line in path.read_text(encoding="utf-8").splitlines() if " in ((" not in line)
        for pattern in patterns:
            kinds.update(re.findall(pattern, text))
        for template, values in FORMATTED.items():
            if template in text:
                kinds.update(template.split("{")[0] + v + template.split("}")[1] for v in values)
    return kinds


def test_every_kind_the_code_writes_has_a_class() -> None:
    written = _written_kinds()
    assert {"lease_taken_over", "submission_unknown"} <= written  # the scanner works; the engine writes typed events
    assert sorted(k for k in written if k not in ev.EVENT_TYPES) == []


def test_the_registry_is_one_class_per_kind() -> None:
    assert len(ev.EVENT_TYPES) == len(set(ev.EVENT_TYPES.values()))
    for kind, cls in ev.EVENT_TYPES.items():
        assert kind == cls.KIND
        assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", sorted(ev.EVENT_TYPES))
def test_from_json_is_tolerant_and_gives_back_what_it_read(kind: str) -> None:
    cls = ev.EVENT_TYPES[kind]
    assert cls.from_json({}) == cls()  # every field may be missing in an old record
    wrong = {f.name: object() for f in fields(cls) if f.name != "extra"}
    cls.from_json(wrong)  # wrong types become None or the empty value, never an exception
    data = {"older_field": [1, 2], **{k: v for k, v in cls().to_json().items()}}
    assert cls.from_json(data).to_json() == data
    assert ev.parse(kind, data) == cls.from_json(data)


def test_coercion_keeps_right_types_and_drops_wrong_ones() -> None:
    decided = ev.Decided.from_json({"decision_id": "d1", "option": "2", "by": None, "note": 5})
    assert (decided.decision_id, decided.option, decided.by, decided.note) == ("d1", None, None, None)
    assert ev.Notified.from_json({"ok": 1, "attempts": True}).ok is False  # a bool is a bool, not 1
    assert ev.Notified.from_json({"attempts": True}).attempts is None
    requested = ev.DecisionRequested.from_json({"options": [{"label": "close"}, "junk", 3]})
    assert requested.options == ({"label": "close"},)
    assert ev.parse("no_such_kind", {"a": 1}) is None


def test_new_event_is_the_stores_tuple() -> None:
    event = ev.Paced(provider="exports", until="2025-04-18T10:20:40Z")
    assert event.new_event() == ("paced", {"provider": "exports", "until": "2025-04-18T10:20:40Z"})


def _decision_payload_as_watch_built_it_after_a_poll() -> tuple[dict[str, object], dict[str, object]]:
    contract = make_contract()
    record = make_record(contract)
    reserved = reserve(record, T0)
    exchange = response(body("running"), at=T0 + timedelta(seconds=1))
    decision = poll(contract, record, exchange, u=0.25)
    obs = observe(contract, exchange)
    now = T0 + timedelta(seconds=1)
    expected: dict[str, object] = {
        **decision.to_json(),
        "request_no": reserved.status_requests_used,
        "max_status_requests": reserved.plan.max_status_requests,
        "deadline_at": "2025-04-18T11:00:00Z",
        "state": "running",
        "http_status": 200,
        "inputs": {
            "record": record_to_json(reserved),
            "observation": obs.to_json(),
            "now": now.isoformat(),
            "u": 0.25,
        },
    }
    return ev.DecisionEvent.of(reserved, obs, decision, now, 0.25).to_json(), expected


def test_the_decision_payload_after_a_poll_is_the_one_watch_built() -> None:
    built, expected = _decision_payload_as_watch_built_it_after_a_poll()
    assert built == expected


def test_the_decision_payload_of_a_halt_has_no_observation_and_no_draw() -> None:
    record = make_record(make_contract())
    now = T0 + timedelta(hours=1)
    decision = halt(record, StopReason.DEADLINE_EXCEEDED, now, "deadline passed", rule="deadline_exceeded")
    built = ev.DecisionEvent.of(record, None, decision, now).to_json()
    assert built == {
        **decision.to_json(),
        "request_no": 0,
        "max_status_requests": record.plan.max_status_requests,
        "deadline_at": "2025-04-18T11:00:00Z",
        "state": None,
        "http_status": None,
        "inputs": {"record": record_to_json(record), "now": now.isoformat()},
    }


def test_created_has_one_shape_whoever_creates() -> None:
    record = make_record(make_contract())
    plain = ev.Created.of(record, "cli").to_json()
    assert plain["operation"] == record.operation_id and plain["expected_terminal"] == list(record.expected_terminal)
    assert {"request_fingerprint", "contract_fingerprint", "max_transport_failures"} <= set(plain)
    agent = ev.Created.of(record, "agent session s1").to_json()
    assert agent == {**plain, "created_by": "agent session s1"}


@pytest.mark.parametrize(
    ("answer", "headers"),
    [
        (body("running"), None),
        (body("running", poll_after_seconds="soon"), {"Retry-After": "junk"}),  # rejections are trailed too
        (body("succeeded", result_url="https://files.example/r1"), None),  # and the outcome
        (body("failed", error="boom"), None),
    ],
)
def test_a_polls_payloads_built_directly_are_what_the_typed_events_write(
    answer: bytes, headers: dict[str, str] | None
) -> None:
    contract = make_contract()
    reserved = reserve(make_record(contract), T0)
    now = T0 + timedelta(seconds=1)
    exchange = response(answer, at=now, headers=headers)
    obs = observe(contract, exchange)
    decision = decide(reserved, obs, now, 0.25)
    typed = [
        ev.Observed.of(obs, exchange.sent_at),
        ev.DecisionEvent.of(reserved, obs, decision, now, 0.25),
        *(ev.GuidanceRejected.of(r) for r in decision.rejections),
        *ev.outcome_events(decision.record),
    ]
    built = ev.poll_events(reserved, obs, decision, now, 0.25, sent_at=exchange.sent_at)
    assert built == [event.new_event() for event in typed]
    assert [kind for kind, _ in built][:2] == ["observed", "decision"]
    assert [(ev.Reserved.KIND, ev.Reserved.payload(reserved, 7))] == [ev.Reserved.of(reserved, 7).new_event()]
