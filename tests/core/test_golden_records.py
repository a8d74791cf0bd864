"""The records the core produces, pinned byte for byte: `pollwarden why` replays old audits through today's core,
so a refactoring that changes one field of one record changes what `why` says about operations already run.

`records.golden.jsonl` holds `record_to_json` and `Decision.to_json` of every step below, one line each; it
was written by the core before the named transitions replaced `evolve`. A deliberate change of behaviour
regenerates it (`python -m tests.core.test_golden_records > tests/core/records.golden.jsonl`) and says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pollwarden.core import (
    Action,
    Contract,
    Decision,
    FailureKind,
    Halt,
    OperationRecord,
    Response,
    halt,
    next_step,
    parse_contract,
)
from pollwarden.core.admission import Limits, narrow
from pollwarden.core.codec import record_to_json
from pollwarden.core.decide import defer
from pollwarden.core.escalation import apply_extension, build_request
from pollwarden.core.observe import Exchange

from .support import T0, body, contract_text, failure, make_contract, make_record, poll, response

GOLDEN = Path(__file__).with_name("records.golden.jsonl")
MINUTE = timedelta(minutes=1)
ESCALATION = """
[escalation]
extend = "10m"
extend_checks = 5
pause = "15m"
"""

Make = Callable[[datetime], Exchange]


def _polls(contract: Contract, record: OperationRecord, makes: list[Make], u: float = 0.37) -> list[Decision]:
    """Each exchange at the time its poll falls due, until the operation stops waiting."""
    decisions: list[Decision] = []
    for make in makes:
        decision = poll(contract, record, make(record.next_poll_at), u=u)
        decisions.append(decision)
        record = decision.record
        if decision.action is not Action.WAIT:
            break
    return decisions


def _ok(*states: str, **fields: Any) -> list[Make]:
    def answer(state: str) -> Make:
        return lambda t: response(body(state, **fields), at=t)

    return [answer(state) for state in states]


def _status(code: int, times: int, **headers: str) -> list[Make]:
    return [lambda t: response(status=code, at=t, headers=headers)] * times


def _line(name: str, item: Decision | OperationRecord) -> str:
    if isinstance(item, Decision):
        entry: dict[str, Any] = {"step": name, "record": record_to_json(item.record), "decision": item.to_json()}
    else:
        entry = {"step": name, "record": record_to_json(item)}
    return json.dumps(entry, sort_keys=True)


def _scenarios() -> Iterator[tuple[str, Sequence[Decision | OperationRecord]]]:
    contract = make_contract(grace="30s")
    fresh = make_record(contract)
    first: dict[str, Exchange] = {
        "success": response(body("succeeded", result_url="https://f.example/x")),
        "success_without_result": response(body("succeeded")),
        "pending": response(body("running")),
        "pending_with_hint": response(body("running", poll_after_seconds=30)),
        "pending_with_a_past_hint": response(body("running", next_check_at="2025-04-18T10:00:00Z")),
        "pending_after_expiry": response(body("running", expires_at="2025-04-18T10:00:00Z")),
        "failed": response(body("failed", error={"code": "E1"})),
        "cancelled": response(body("cancelled")),
        "expired": response(body("expired")),
        "unknown": response(body("awaiting_review")),
        "invalid": response(b"<html>ok</html>"),
        "server_error_with_retry_after": response(status=503, headers={"retry-after": "90"}),
        "connect_failure": failure(FailureKind.CONNECT),
        "rate_limited": response(status=429),
        "denied": response(status=401),
        "not_found_in_grace": response(status=404),
        "not_found_later": response(status=404, at=T0 + MINUTE),
        "redirect": response(status=302, headers={"location": "/x"}),
        "teapot": response(status=418),
        "local_error": failure(FailureKind.LOCAL),
    }
    for name, exchange in first.items():
        yield name, [poll(contract, fresh, exchange, u=0.37)]
    yield (
        "backoff_to_success",
        _polls(
            contract, fresh, [*_ok("queued", "running", "running"), *_ok("succeeded", result_url="https://f.example/x")]
        ),
    )
    yield "transport_budget", _polls(contract, fresh, [lambda t: failure(FailureKind.TIMEOUT, at=t)] * 4)
    yield "rate_limit_run", _polls(contract, fresh, _status(429, 5))
    yield "rate_limit_with_retry_after", _polls(contract, fresh, _status(429, 5, **{"retry-after": "600"}))
    small = make_contract(max_requests=3)
    yield "request_budget", _polls(small, make_record(small), _ok("running", "running", "running", "running"))
    short = make_contract(deadline="1m", base_delay="40s")
    spent = _polls(short, make_record(short), _ok("running", "running"))
    yield "woken_at_the_deadline", spent
    slow = Response(status=200, headers={}, body=body("running"), sent_at=T0, received_at=T0 + 2 * MINUTE)
    yield "deadline_passed_during_the_request", [poll(short, make_record(short), slow, u=0.37)]
    step = next_step(spent[-1].record, T0 + 2 * MINUTE)
    assert isinstance(step, Halt)
    yield "deadline_halt", [halt(spent[-1].record, step.reason, T0 + 2 * MINUTE, step.detail, "deadline_exceeded")]
    useful = make_record(contract, useful_for=3 * timedelta(seconds=1))
    yield "woken_when_the_result_stops_being_useful", [poll(contract, useful, response(body("running")), u=0.37)]
    late = Response(status=200, headers={}, body=body("running"), sent_at=T0, received_at=T0 + 5 * MINUTE)
    yield "usefulness_passed_during_the_request", [poll(contract, make_record(contract, useful_for=MINUTE), late)]
    waiting = poll(contract, fresh, response(body("running")), u=0.37).record
    yield "deferred", [defer(waiting, T0 + 3 * MINUTE), defer(waiting, T0), defer(waiting, T0 + timedelta(hours=2))]
    yield (
        "narrowed",
        [
            narrow(waiting, Limits(deadline=10 * MINUTE, max_requests=4, max_transport_failures=1)),
            narrow(waiting, Limits(useful_for=5 * MINUTE)),
            narrow(waiting, Limits(max_requests=99)),
        ],
    )
    with_escalation = parse_contract(contract_text() + ESCALATION, source="test.toml")
    stopped = _polls(with_escalation, make_record(with_escalation), _status(503, 4))[-1].record
    request = build_request(stopped, with_escalation, T0 + 30 * MINUTE, decision_id="d1")
    yield "extended_after_transport", [apply_extension(stopped, request.option(1), T0 + 30 * MINUTE)]
    unknown = poll(with_escalation, make_record(with_escalation), response(body("awaiting_review"))).record
    pause = build_request(unknown, with_escalation, T0 + MINUTE, decision_id="d2")
    yield "paused", [apply_extension(unknown, pause.option(1), T0 + MINUTE)]
    limited = _polls(with_escalation, make_record(with_escalation), _status(429, 5))[-1].record
    again = build_request(limited, with_escalation, T0 + 20 * MINUTE, decision_id="d3")
    yield "extended_after_rate_limit", [apply_extension(limited, again.option(1), T0 + 20 * MINUTE)]


def _lines() -> list[tuple[str, str]]:
    return [
        (f"{name}[{i}]", _line(f"{name}[{i}]", item)) for name, items in _scenarios() for i, item in enumerate(items)
    ]


STEPS = _lines()


def test_the_golden_file_has_every_scenario_step_in_order() -> None:
    golden = [json.loads(line)["step"] for line in GOLDEN.read_text(encoding="utf-8").splitlines()]
    assert golden == [step for step, _ in STEPS]


@pytest.mark.parametrize(("step", "line"), STEPS, ids=[step for step, _ in STEPS])
def test_the_core_produces_the_golden_record(step: str, line: str) -> None:
    golden = {json.loads(text)["step"]: text for text in GOLDEN.read_text(encoding="utf-8").splitlines()}
    assert line == golden[step]


if __name__ == "__main__":
    print("\n".join(line for _, line in STEPS))
