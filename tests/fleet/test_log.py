"""The worker's JSON log: a batch's lines go out in one write, in order, each as it would have alone."""

from __future__ import annotations

import io
import json
import threading

import pytest

from pollwarden.fleet.worker import JsonLog


class _Writes(io.StringIO):
    """A text stream that remembers each write it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def test_a_batch_writes_its_lines_once_at_its_end_and_alone_each_line_is_a_write() -> None:
    stream = _Writes()
    log = JsonLog(stream, worker="w1")
    log("worker_started", lanes=2)
    with log.batch():
        log("polled", operation="op1")
        log("polled", operation="op2")
        assert len(stream.writes) == 1  # held until the batch ends
    log("stopped", operation="op3")
    assert len(stream.writes) == 3
    entries = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["event"], e.get("operation")) for e in entries] == [
        ("worker_started", None),
        ("polled", "op1"),
        ("polled", "op2"),
        ("stopped", "op3"),
    ]
    assert all(e["worker"] == "w1" and e["ts"].endswith("Z") for e in entries)


def test_a_batch_that_raises_still_writes_what_it_logged() -> None:
    stream = _Writes()
    log = JsonLog(stream, worker="w1")
    with pytest.raises(RuntimeError), log.batch():
        log("polled", operation="op1")
        raise RuntimeError("the batch failed")
    assert [json.loads(line)["operation"] for line in stream.getvalue().splitlines()] == ["op1"]
    log("stopped", operation="op2")  # and the log is no longer held
    assert len(stream.writes) == 2


def test_a_batch_holds_only_its_own_threads_lines() -> None:
    stream = _Writes()
    log = JsonLog(stream, worker="w1")
    with log.batch():
        log("polled", operation="held")
        other = threading.Thread(target=log, args=("polled",), kwargs={"operation": "other lane"})
        other.start()
        other.join()
        assert [json.loads(line)["operation"] for line in stream.writes] == ["other lane"]
    assert [json.loads(line)["operation"] for line in stream.getvalue().splitlines()] == ["other lane", "held"]
