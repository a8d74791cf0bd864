"""`why` on a damaged recorded decision or first-check placement: a WhyError naming the record, never a traceback
(the log is hash-chained, but read as hostile like every input)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from pollwarden.report.why import WhyError, explain
from pollwarden.store.base import Event


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        ("created", {"placed": {}, "inputs": {"record": {}}}),
        ("created", {"placed": {}, "inputs": {"record": 1, "learnt": {}, "u": 0.5}}),
        ("submitted", {"placed": {}, "inputs": {"record": {}, "learnt": [], "u": "x"}}),
        ("decided", {"inputs": {"record": {}, "now": "2026-01-01T00:00:00+00:00"}}),
        ("decided", {"inputs": {"record": [], "now": 7}}),
    ],
)
def test_damaged_recorded_inputs_are_a_why_error(kind: str, data: dict[str, Any]) -> None:
    event = Event("op-1", 7, datetime(2026, 1, 1, tzinfo=UTC), kind, data)
    with pytest.raises(WhyError, match="record 7's recorded inputs cannot be read"):
        explain(event)
