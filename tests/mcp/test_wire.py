"""The stdio wire as a raw JSON-RPC client writes it: every request line gets an answer, a malformed one too."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from pollwarden.simulator import Simulator
from tests.prefork import spawn_args

from .support import agent_contract

ANSWER_TIMEOUT = 60.0
"""A line the server dropped would leave its request waiting forever: the test gives up, and fails, after this
(a guard: the first answer waits for the server to start, seconds on a loaded machine)."""


class RawClient:
    """Bytes in, JSON lines out, read on a thread so a missing answer is a failed wait, never a hung test."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self._lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, args=(process.stdout,), daemon=True).start()

    def _read(self, stdout: IO[bytes]) -> None:
        for line in stdout:
            self._lines.put(line)

    def send(self, raw: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(raw + b"\n")
        self.process.stdin.flush()

    def request(self, id_: int, method: str, params: dict[str, Any]) -> None:
        self.send(json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}).encode())

    def answer(self) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=ANSWER_TIMEOUT)
        except queue.Empty:
            pytest.fail(f"no answer within {ANSWER_TIMEOUT:g} s: the server dropped the line")
        message = json.loads(line)
        assert isinstance(message, dict), message
        return message

    def answer_to(self, id_: object) -> dict[str, Any]:
        """The answer with this id (log notifications in between are skipped)."""
        while True:
            message = self.answer()
            if "id" in message and message["id"] == id_:
                return message
            assert "method" in message, message  # a notification, or the answer is not the one asked for


@pytest.fixture
def raw(sim: Simulator, tmp_path: Path) -> Iterator[RawClient]:
    agent_contract(tmp_path / "contracts", sim.url)
    args = ["mcp", "--contracts", str(tmp_path / "contracts"), "--home", str(tmp_path / "home")]
    env = {k: v for k, v in os.environ.items() if k != "POLLWARDEN_HOME"}
    # Forked from a zygote that has imported the server (tests/prefork.py): the first answer's wait is then
    # the server's, not a loaded machine's interpreter start-up.
    command = [sys.executable, *spawn_args(args, env, servers=("mcp_server",))]
    with (tmp_path / "stderr.txt").open("wb") as errlog:
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
            env=env,
        )
    client = RawClient(process)
    try:
        client.request(
            1,
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
        )
        assert "result" in client.answer_to(1)
        client.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        yield client
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _call(id_: int, job_id: str) -> bytes:
    arguments = {"contract": "exports", "job_id": job_id}
    return json.dumps(
        {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": "start_watch", "arguments": arguments}}
    ).encode()


def test_a_lone_surrogate_in_an_argument_is_answered_with_a_parse_error(raw: RawClient) -> None:
    raw.send(_call(7, "\ud800"))  # json.dumps writes it as the escape \ud800, which is not a Unicode string
    refused = raw.answer_to(7)
    assert refused["error"]["code"] == -32700, refused
    raw.send(_call(8, "happy-1"))  # and the server goes on serving
    served = raw.answer_to(8)
    assert served["result"]["structuredContent"]["status"] == "watching", served


_CUT = b'{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": '
_BAD_UTF8 = (
    b'{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "list_operations", "x": "\xff\xfe"}}'
)
_SURROGATE_BYTES = (
    b'{"jsonrpc": "2.0", "id": "nine", "method": "tools/call", "params": {"name": "x", "y": "\xed\xa0\x80"}}'
)


@pytest.mark.parametrize(
    ("line", "code", "id_"),
    [
        (_CUT, -32700, None),  # cut off: no id can be read
        (b"not json at all", -32700, None),
        (_BAD_UTF8, -32700, 9),  # served with U+FFFD in it before: an argument changed in transit
        (_SURROGATE_BYTES, -32700, "nine"),  # a surrogate encoded as UTF-8 bytes, likewise
        (b'{"jsonrpc": "2.0", "id": 9, "method": 5}', -32600, 9),
        (b'{"jsonrpc": "2.0", "method": "tools/call", "params": {"x": "\\ud800"}}', -32700, None),  # no id to read
    ],
    ids=["truncated", "not-json", "invalid-utf8", "encoded-surrogate", "not-json-rpc", "notification"],
)
def test_a_line_that_is_not_json_rpc_is_answered(raw: RawClient, line: bytes, code: int, id_: object) -> None:
    raw.send(line)
    refused = raw.answer()
    assert refused["error"]["code"] == code and refused["id"] == id_, refused
    assert "nothing was done" in refused["error"]["message"], refused
    raw.send(_call(10, "happy-2"))
    assert "result" in raw.answer_to(10)


def test_a_nan_wait_is_refused_not_waited_on(raw: RawClient) -> None:
    """NaN is no JSON, but the SDK's parser reads it: a wait of NaN seconds compared false with every bound and
    so polled on until the operation stopped (its whole budget spent in one call), not at most max_wait_seconds."""
    raw.send(_call(11, "never-1"))
    op = raw.answer_to(11)["result"]["structuredContent"]["operation_id"]
    params = {"name": "wait_operation", "arguments": {"operation_id": op, "max_wait_seconds": "@"}}
    raw.send(
        json.dumps({"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": params})
        .replace('"@"', "NaN")
        .encode()
    )
    refused = raw.answer_to(12)["result"]
    assert refused["isError"] and refused["structuredContent"]["error"] == "invalid_argument", refused
