"""Typed audit events: one class per kind, a registry, tolerant parsing, and the payloads producers wrote."""

from __future__ import annotations

import ast
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

# What hands an event to the store (or to a driver that does): a kind spelled in their arguments is a kind the
# type of the event no longer names.
WRITERS = {
    "append", "append_many", "write", "write_many", "resolve_decision", "create", "create_many",
    "record_submission", "accept_submission", "mark_submission", "set_setting", "install_contract",
    "_append", "_append_many", "_seal_onto", "FencedWrite", "Write", "Append", "Attempted", "audit",
}  # fmt: skip
KIND_LIKE = re.compile(r"[a-z]*_[a-z_]*")  # what is left of "submission_{state}" once its fields are out


def _spelled_kinds(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every kind spelled where an event is written: a registered kind, or a kind built by a
    format string, among a writer's positional arguments (or in the tuples and lists they hold); a `(kind,
    payload)` pair anywhere; and `new_event()`, which only the store calls."""
    found: list[tuple[int, str]] = []

    def spelled(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ev.EVENT_TYPES:
            return node.value
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
            if text and KIND_LIKE.fullmatch(text):
                return ast.unparse(node)
        return None

    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Tuple)
            and len(node.elts) == 2
            and isinstance(node.elts[1], ast.Dict | ast.Call | ast.Name)
            and (kind := spelled(node.elts[0])) is not None
        ):
            found.append((node.lineno, f"({kind}, ...)"))
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "new_event":
            found.append((node.lineno, "new_event()"))
        if name not in WRITERS:
            continue
        held = [*node.args, *(k.value for k in node.keywords if k.arg in ("event", "events"))]
        for arg in held:
            within = [
                inner
                for held_in in ast.walk(arg)
                if isinstance(held_in, ast.Tuple | ast.List)
                for inner in held_in.elts
            ]
            for inner in [arg, *within]:
                if (kind := spelled(inner)) is not None:
                    found.append((node.lineno, f"{name}(... {kind} ...)"))
    return found


def test_no_producer_spells_a_kind() -> None:
    """The store appends event objects: the kind is the class's. Only `events/` (which defines the kinds) and
    the store's sealing (`new_event`) are exempt."""
    spelled: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        where = path.relative_to(SRC)
        if where.parts[0] in ("events", "simulator"):  # the simulator writes no audit; its "kind" is a URL's
            continue
        for line, what in _spelled_kinds(ast.parse(path.read_text(encoding="utf-8"))):
            if not (where.as_posix() == "store/trail.py" and what == "new_event()"):
                spelled.append(f"{where}:{line}: {what}")
    assert spelled == []


@pytest.mark.parametrize(
    "source",
    [
        'store.append(op, "paced", {"until": until}, now)',
        'store.append_many([(op, "resume_refused", data)], now)',
        'store.write(lease, record, [("decision", payload)], now, release=True)',
        'store.mark_submission(op, state, f"submission_{state}", now)',
        'self._append(tx, log_id, f"approval_{status}", data, at)',
        "store.append(op, *event.new_event(), now)",
    ],
)
def test_the_scan_finds_a_spelled_kind(source: str) -> None:
    assert _spelled_kinds(ast.parse(source)) != []


def test_the_scan_passes_typed_events_and_other_words() -> None:
    typed = """
store.append(op, ev.Paced(provider="exports", until=until), now)
store.resolve_decision(lease, Resolution(d, "refused", by), record=None, events=[e], now=now)
store.append(agent_log_id(session), ev.CallResult.prepared({"call": 1}), now)
lines.append(f"{at} decided by {by}")
"""
    assert _spelled_kinds(ast.parse(typed)) == []


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


def test_a_prepared_event_is_sealed_as_its_producer_built_it() -> None:
    """The poll path's shortcut: the kind is still the class's, and the payload is not typed and copied again."""
    payload = {"provider": "exports", "until": "2025-04-18T10:20:40Z", "kept": [1]}
    prepared = ev.Paced.prepared(payload)
    assert prepared.KIND == "paced"
    assert prepared.new_event() == ("paced", payload)
    assert ev.parse(*prepared.new_event()) == ev.Paced.from_json(payload)


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
    assert [event.new_event() for event in built] == [event.new_event() for event in typed]
    assert [event.KIND for event in built][:2] == ["observed", "decision"]
    assert ev.Reserved.prepared(ev.Reserved.payload(reserved, 7)).new_event() == ev.Reserved.of(reserved, 7).new_event()
